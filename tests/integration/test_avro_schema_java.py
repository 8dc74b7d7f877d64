"""The reader-schema checks agree with Avro's Java parser, which spark-avro runs.

Every schema the declaration refuses is one Java Avro refuses too, framed as it
is handed to spark-avro, and every one it accepts Java Avro parses (with its
defaults validated, as spark-avro parses a reader schema)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.unit.test_avro_reader_schema import ACCEPTED, REFUSED, WRITER_ACCEPTED, WRITER_REFUSED

from timeshard.storage.avro import framed_schema

pytestmark = pytest.mark.spark


def java_refuses(spark: Any, schema: dict[str, Any]) -> bool:
    try:
        spark._jvm.org.apache.avro.Schema.Parser().parse(framed_schema(json.dumps(schema)))
    except Exception:  # py4j's error, wrapping Avro's exception
        return True
    return False


def test_the_checks_agree_with_java_avro(spark: Any) -> None:
    assert [s for s, _ in REFUSED if not java_refuses(spark, s)] == []
    assert [s for s in ACCEPTED if java_refuses(spark, s)] == []


def test_the_writer_checks_agree_with_java_avro(spark: Any) -> None:
    assert [s for s, _ in WRITER_REFUSED if not java_refuses(spark, s)] == []
    assert [s for s in WRITER_ACCEPTED if java_refuses(spark, s)] == []
