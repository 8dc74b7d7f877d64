"""The POSTGRES source's connections keep the DSN's own ``options`` (no server needed)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.storage.postgres_source import PostgresSource


@pytest.mark.parametrize(
    "dsn",
    [
        "host=127.0.0.1 port=1 dbname=d options='-c search_path=app -c lock_timeout=5s'",
        "postgresql://u:secret@127.0.0.1:1/d?options=-c%20search_path%3Dapp%20-c%20lock_timeout%3D5s",
    ],
)
def test_the_dsns_own_options_are_kept_beside_the_sources_settings(
    monkeypatch: pytest.MonkeyPatch, dsn: str
) -> None:
    seen: list[Any] = []

    def connect(conninfo: str, **kwargs: Any) -> Any:
        seen.append(kwargs.get("options"))
        raise psycopg.OperationalError("the server is down")

    monkeypatch.setattr(psycopg, "connect", connect)
    with pytest.raises(SourceUnavailable):
        PostgresSource("s", dsn, "pub")
    options = seen[0]
    assert options.startswith("-c search_path=app -c lock_timeout=5s "), options
    assert "-c DateStyle=ISO" in options  # the decoder's settings come after: they win


def test_a_dsn_that_does_not_parse_is_invalid_usage_without_its_text() -> None:
    with pytest.raises(InvalidUsage, match="POSTGRES source 's': its dsn does not parse") as e:
        PostgresSource("s", "host=h password=hunter2 junk", "pub")
    assert "hunter2" not in str(e.value)
