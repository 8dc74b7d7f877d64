"""``check_spec`` refuses the source declarations that would fail only while running.

A run file that fails the checks writes nothing (docs/run-spec.md): a key
column that is not a column of the source's output, declared on a source
after others, would otherwise fail when the pipeline is built, after the
earlier sources wrote.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.spec import RunSpec, SourceSpec, check_spec


def check(*sources: SourceSpec) -> None:
    check_spec(RunSpec(source=list(sources)), existing=[])


def test_an_upsert_key_column_that_is_no_column_is_refused() -> None:
    first = SourceSpec(name="kv", kind="key_value", envelope="upsert", key_columns=["key"])
    typo = SourceSpec(name="c", kind="counter", envelope="upsert", key_columns=["countr"])
    with pytest.raises(InvalidUsage, match=r"'c'.*\['countr'\].*\['counter'\]"):
        check(first, typo)


def test_an_upsert_key_column_named_twice_is_refused() -> None:
    twice = SourceSpec(name="kv", kind="key_value", envelope="upsert", key_columns=["key", "key"])
    with pytest.raises(InvalidUsage, match=r"'kv'.*\['key'\] twice"):
        check(twice)


def test_an_upsert_of_keys_only_is_refused(tmp_path: Path) -> None:
    only = SourceSpec(name="c", kind="counter", envelope="upsert", key_columns=["counter"])
    with pytest.raises(InvalidUsage, match=r"'c'.*no value column"):
        check(only)


def test_good_upsert_keys_pass(tmp_path: Path) -> None:
    check(
        SourceSpec(name="kv", kind="key_value", envelope="upsert", key_columns=["key"]),
        SourceSpec(
            name="f",
            kind="file",
            envelope="upsert",
            key_columns=["id"],
            options={"path": str(tmp_path), "format": "json"},
            columns={"id": "int64", "v": "string"},
        ),
    )


@pytest.mark.parametrize("envelope", ["none", None])
def test_key_columns_without_the_upsert_envelope_are_refused(envelope: str | None) -> None:
    spec = {"name": "kv", "kind": "key_value", "key_columns": ["nope"]}
    if envelope is not None:
        spec["envelope"] = envelope
    with pytest.raises(InvalidUsage, match=r"'kv': key_columns \['nope'\] go with envelope"):
        check(SourceSpec.model_validate(spec))


@pytest.mark.parametrize("kind", ["key_value", "counter", "tpch"])
def test_columns_of_a_generator_are_refused(kind: str) -> None:
    with pytest.raises(InvalidUsage, match=rf"'g': a {kind} generator .* no columns"):
        check(SourceSpec(name="g", kind=kind, columns={"key": "nosuchtype"}))  # type: ignore[arg-type]
