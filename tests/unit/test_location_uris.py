"""Location URIs and keys that cannot be used: InvalidUsage naming the value, never its
secrets.

The conformance suite checks the well-formed URIs of every backend; this file
checks the malformed ones a user types: secrets that must not reach an error
message or a log, control characters, and values that can be refused before
anything is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import (
    FileBlob,
    MemoryConsensus,
    PostgresConsensus,
    SqliteConsensus,
    VersionedData,
    check_blob_key,
    check_consensus_key,
    open_blob,
    open_consensus,
)

SECRET = "hunter2"


@pytest.mark.parametrize(
    ("opener", "uri"),
    [
        (open_consensus, f"host=db.example password={SECRET} dbname=ts"),
        (open_consensus, f"host=db.example password='{SECRET} x' dbname=ts"),
        (open_consensus, f"postgresql//app:{SECRET}@db.example/ts"),
        (open_consensus, f"postgresql:app:{SECRET}@db.example/ts"),
        (open_consensus, f"mysql://app:{SECRET}@db.example/ts"),
        (open_consensus, f"postgresql://app:{SECRET}@db.example/ts?nonsense=1"),
        (open_consensus, f"postgresql://app:p/{SECRET}@db.example/ts?nonsense=1"),
        (open_blob, f"s3://AKIAX:{SECRET}@bucket/dir?region=us-east-1&bogus_option=1"),
        (open_blob, f"s3://AKIAX:{SECRET}@bucket/dir?region=us-east-1&scheme=bogus"),
        (open_blob, f"s3://AKIAX:{SECRET}@bu cket/dir?region=us-east-1"),
        (open_blob, f"arrowfs+gs://tok:{SECRET}@bucket/d?x=1"),
        (open_blob, f"redis://app:{SECRET}@cache"),
        (open_blob, f"file://app:{SECRET}@host/dir"),
    ],
)
def test_a_refused_uri_hides_its_secrets(
    opener: Callable[[str], object], uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidUsage) as info:
        opener(uri)
    assert SECRET not in str(info.value)
    assert "***" in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key", ["abc\n", "s1\n", "a\tb", "k\r"])
def test_a_consensus_key_with_a_control_character_is_refused(key: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidUsage, match="invalid consensus key"):
        check_consensus_key(key)
    for c in (MemoryConsensus(), SqliteConsensus(tmp_path / "c.db")):
        with pytest.raises(InvalidUsage, match="invalid consensus key"):
            c.compare_and_set(key, None, VersionedData(0, b"x"))
        assert c.list_keys() == []


@pytest.mark.parametrize("key", ["s1/w1/b1/part\n", "s1\n/w/b/p", "a/b\tc", "x\x7f"])
def test_a_blob_key_with_a_control_character_is_refused(key: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidUsage, match="invalid blob key"):
        check_blob_key(key)
    blob = FileBlob(tmp_path)
    with pytest.raises(InvalidUsage, match="invalid blob key"):
        blob.set(key, b"x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("opener", "uri"),
    [
        (open_consensus, "sqlite:x\ny.db"),
        (open_consensus, "sqlite://{dir}/x\ty.db"),
        (open_consensus, "sqlite:x%0Ay.db"),
        (open_consensus, "memory://a\nb"),
        (open_consensus, "postgresql://app:hunter2@db\n.example/ts"),
        (open_blob, "file://{dir}/a\nb"),
        (open_blob, "relative\n/dir"),
        (open_blob, "file://{dir}/a%09b"),
        (open_blob, "memory://a\tb"),
        (open_blob, "s3://bucket/d\nir"),
    ],
)
def test_a_uri_with_a_control_character_is_refused(
    opener: Callable[[str], object], uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``urlsplit`` drops newlines and tabs: ``sqlite:x\\ny.db`` opened ``xy.db``."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidUsage, match="control character") as info:
        opener(uri.replace("{dir}", str(tmp_path)))
    assert SECRET not in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("postgresql://u:hunter2@127.0.0.1:notaport/db", "port 'notaport'"),
        ("postgresql://u:hunter2@127.0.0.1:70000/db", "port '70000'"),
        ("postgresql://u:hunter2@h1:5432,h2:x/db", "port 'x'"),
        ("host=127.0.0.1 port=-1 password=hunter2", "port '-1'"),
        ("postgresql://u:hunter2@127.0.0.1:1/db?sslmode=bogus", "sslmode 'bogus'"),
        ("postgresql://u:hunter2@127.0.0.1:1/db?connect_timeout=soon", "connect_timeout 'soon'"),
        ("postgresql://u@127.0.0.1:1/db?target_session_attrs=any-of-them", "target_session_attrs"),
    ],
)
def test_a_postgres_dsn_with_a_bad_value_is_refused_before_connecting(uri: str, why: str) -> None:
    with pytest.raises(InvalidUsage, match=why) as info:
        open_consensus(uri) if "://" in uri else PostgresConsensus(uri)  # a key=value DSN
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("sqlite:///", "names no database file"),
        ("sqlite://{dir}", "is a directory"),
        ("sqlite://{dir}/", "names no database file"),
        ("sqlite://{dir}/new/", "names no database file"),
        ("sqlite://{dir}/file/x.db", "is not a directory"),
        ("sqlite:/dev/null/x.db", "is not a directory"),
    ],
)
def test_a_sqlite_uri_that_names_no_database_file_is_refused(
    uri: str, why: str, tmp_path: Path
) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(InvalidUsage, match=why):
        open_consensus(uri.replace("{dir}", str(tmp_path)))
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


@pytest.mark.parametrize("uri", ["file://{dir}/file/x", "{dir}/file", "file:///dev/null/x"])
def test_a_blob_root_under_a_file_is_refused(uri: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(InvalidUsage, match="is not a directory"):
        open_blob(uri.replace("{dir}", str(tmp_path)))
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


@pytest.mark.parametrize(
    "timeouts",
    [
        {"lock_timeout_s": -1.0},
        {"lock_timeout_s": 0.0},
        {"lock_timeout_s": float("nan")},
        {"idle_in_transaction_s": 0.0},
        {"idle_in_transaction_s": float("inf")},
        {"connect_timeout_s": 0},
        {"connect_timeout_s": -5},
    ],
)
def test_postgres_timeouts_must_be_positive(timeouts: dict[str, float]) -> None:
    name = next(iter(timeouts))
    with pytest.raises(InvalidUsage, match=name):
        PostgresConsensus("postgresql://postgres@127.0.0.1:1/postgres", **timeouts)  # type: ignore[arg-type]


def test_a_postgres_timeout_under_a_millisecond_still_times_out() -> None:
    """``lock_timeout_s=0.0004`` was sent as ``0ms``, which PostgreSQL reads as no timeout."""
    from timeshard.location.postgres import _ms

    assert _ms(0.0004) == "1ms"
    assert _ms(1.5) == "1500ms"


@pytest.mark.parametrize("busy_timeout_s", [-1.0, float("nan"), float("inf")])
def test_sqlite_busy_timeout_must_be_finite_and_not_negative(
    busy_timeout_s: float, tmp_path: Path
) -> None:
    with pytest.raises(InvalidUsage, match="busy_timeout_s"):
        SqliteConsensus(tmp_path / "c.db", busy_timeout_s=busy_timeout_s)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "uri",
    [
        "postgresql://app:hun@ter2@127.0.0.1:1/db",
        "postgresql://app:hun@ter2@127.0.0.1:1,h2/db",
        "postgresql://app:hun/ter2@127.0.0.1:1/db",
        "postgres://app:hun:ter2/x@127.0.0.1/db",
    ],
)
def test_a_postgres_password_with_an_unencoded_at_or_slash_is_refused_unshown(uri: str) -> None:
    """libpq splits such a password: ``hun@ter2@host`` connected to host ``ter2@host``
    (a Determinate fault naming it, retried for ever), ``hun/ter2@host`` read ``hun`` as
    the port and the refusal named it."""
    with pytest.raises(InvalidUsage, match="percent-encode") as info:
        open_consensus(uri)
    assert "hun" not in str(info.value) and "ter2" not in str(info.value)
    assert "app:***@" in str(info.value)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://app:hun%40ter2@127.0.0.1:1/db?user=app@tenant",
        "postgresql://app:hun%2Fter2@127.0.0.1:1/db",
        "postgresql://app@127.0.0.1:1/db",
        "host=/run/postgresql port=5432 password=hun@ter2/x",
        "postgresql:///ts?host=@pgsock",  # an abstract Unix socket (libpq 14 and later)
        "postgresql://app@%40pgsock/ts",
    ],
)
def test_a_postgres_dsn_with_an_encoded_or_no_password_is_not_refused(dsn: str) -> None:
    from timeshard.location.postgres import _check_dsn

    _check_dsn(dsn)


@pytest.mark.parametrize(
    "uri", ["postgresql://app:hun ter2@127.0.0.1:1/db", "postgresql://app:hunter2 x@h/db"]
)
def test_a_postgres_password_with_a_space_is_refused_unshown(uri: str) -> None:
    """libpq refuses the space and its message quoted the password, as did the URI shown."""
    with pytest.raises(InvalidUsage, match="spaces") as info:
        open_consensus(uri)
    assert "hun" not in str(info.value) and "ter2" not in str(info.value)


def test_a_short_password_is_hidden_in_a_message_without_garbling_it() -> None:
    """Every occurrence of a secret was replaced, inside words too: with password ``a``
    libpq's message read ``p***ssword ***uthentic***tion f***iled``."""
    from timeshard.location._masking import hidden

    dsn = "postgresql://app:a@db.example:5432/ts"
    message = 'password authentication failed for user "app": the password was "a"'
    assert hidden(message, dsn) == (
        'password authentication failed for user "app": the password was "***"'
    )
