"""An Avro datum whose length prefix is huge is an err row, not the JVM's end.

Java Avro allocates a string, bytes or array of the length a datum's prefix
declares before it reads a byte of it. Seven bytes declaring a 2 GiB string
threw ``OutOfMemoryError`` in the task, which ``PERMISSIVE`` does not catch:
the executor died, and in local mode the driver with it, at every retry of
the tick that read the record. The session sets Avro's length limits
(:data:`timeshard.spark.session.AVRO_LIMITS`): the datum fails to decode,
and the source makes it an err row as it does any corrupt datum.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import functions as F
from tests.integration.avro_main import _varint as zigzag

from timeshard.spark.session import AVRO_LIMITS, spark_avro_options
from timeshard.storage.avro import datum_ok, decode_datum

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    "field,huge",
    [
        ({"name": "s", "type": "string"}, zigzag((1 << 31) - 100) + b"xx"),
        ({"name": "s", "type": "bytes"}, zigzag((1 << 31) - 100) + b"xx"),
        ({"name": "s", "type": {"type": "array", "items": "null"}}, zigzag((1 << 31) - 100)),
    ],
    ids=["string", "bytes", "array"],
)
def test_a_datum_declaring_a_huge_length_fails_to_decode(
    spark: Any, field: dict[str, Any], huge: bytes
) -> None:
    schema = json.dumps({"type": "record", "name": "r", "fields": [field]})
    good = zigzag(2) + b"hi" if field["type"] in ("string", "bytes") else zigzag(0)
    df = spark.createDataFrame([(good,), (huge,)], "d binary")
    decoded = df.select(decode_datum(F.col("d"), schema).alias("v"))
    assert [r.ok for r in decoded.select(datum_ok(F.col("v")).alias("ok")).collect()] == [
        True,
        False,
    ]


def test_the_limits_reach_the_driver_and_the_executors_and_keep_the_users() -> None:
    conf = spark_avro_options(
        {"spark.executor.extraJavaOptions": "-Dorg.apache.avro.limits.bytes.maxLength=5 -Dx=1"}
    )
    for side in ("driver", "executor"):
        options = conf[f"spark.{side}.extraJavaOptions"].split()
        for name, value in AVRO_LIMITS.items():
            if side == "executor" and name.endswith("bytes.maxLength"):
                assert f"-D{name}=5" in options and f"-D{name}={value}" not in options
            else:
                assert f"-D{name}={value}" in options, (side, options)
    assert "-Dx=1" in conf["spark.executor.extraJavaOptions"].split()
