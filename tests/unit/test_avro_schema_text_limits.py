"""Schema text that is too deep to read, or not text, is refused plainly.

A schema nested past Python's recursion limit raised RecursionError out of
``avro()``, ``SchemaFiles`` and ``avro_payload_schema``, and ``SchemaFiles`` took
bytes for schema text (its later reads expect text).
"""

from __future__ import annotations

import pytest

from timeshard.errors import InvalidUsage
from timeshard.storage.avro import avro_payload_schema
from timeshard.storage.schema_registry import SchemaFiles, avro

DEEP_ARRAY = '{"type": "array", "items": ' * 3000 + '"long"' + "}" * 3000
DEEP_RECORD = (
    '{"type": "record", "name": "r", "fields": [{"name": "a", "type": ' + DEEP_ARRAY + "}]}"
)


@pytest.mark.parametrize("text", ["[" * 5000, DEEP_ARRAY], ids=["brackets", "arrays"])
def test_a_schema_too_deep_is_not_avro(text: str) -> None:
    assert avro(text) is False
    with pytest.raises(InvalidUsage, match="nested too deeply"):
        SchemaFiles({1: text})


@pytest.mark.parametrize("text", ["[" * 5000, DEEP_RECORD], ids=["brackets", "record"])
def test_a_payload_schema_too_deep_is_invalid_usage(text: str) -> None:
    with pytest.raises(InvalidUsage, match="nested too deeply"):
        avro_payload_schema(text)


def test_schema_text_must_be_text() -> None:
    assert avro(b'"long"') is False  # type: ignore[arg-type]
    with pytest.raises(InvalidUsage, match="schema id 1 is not text, got bytes"):
        SchemaFiles({1: b'"long"'})  # type: ignore[dict-item]
    assert SchemaFiles({1: '"long"'}).schema(1) == '"long"'
