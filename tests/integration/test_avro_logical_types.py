"""Avro logical types in a FILE source, against spark-avro's own ``from_avro``.

Datums are written by fastavro from the schema *without* its logical types
(the underlying ints, longs and two's-complement bytes), so that a logical
type whose attributes fastavro refuses can be written too. Each is read two
ways: through a FILE source in format ``avro`` into a shard, and by a plain
``from_avro`` with the very schema text. The shard's columns have the Spark
types ``from_avro`` gives, and its rows the same values, nulls in unions and
values nested in arrays, records and maps included; a corrupt datum, and
one with a value out of its logical type's range, is an err row.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from tests.integration.one_step import rows_after_one_step

from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark.session import arrow_to_spark_schema
from timeshard.storage.file_source import AVRO_DECODE_ERROR, FileSource

pytestmark = pytest.mark.spark


def _fixed(name: str, size: int, **logical: Any) -> dict[str, Any]:
    return {"type": "fixed", "name": name, "size": size, **logical}


def _decimal(precision: Any, scale: Any = None) -> dict[str, Any]:
    extra = {} if scale is None else {"scale": scale}
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, **extra}


def _be(value: int, size: int | None = None) -> bytes:
    """``value`` as big-endian two's complement (of ``size`` bytes, else the fewest)."""
    n = size if size is not None else max(1, (value.bit_length() + 8) // 8)
    return value.to_bytes(n, "big", signed=True)


#: ``(field, Avro type, values)``: each field is a union of null and its type.
FIELDS: list[tuple[str, Any, list[Any]]] = [
    ("dec", _decimal(10, 2), [_be(1234), _be(-200), _be(9_999_999_999)]),
    ("dec_noscale", _decimal(5), [_be(-99999), _be(0), _be(7)]),
    ("dec38", _decimal(38, 38), [_be(10**37), _be(-1), _be(0)]),
    (
        "dec_fixed",
        _fixed("F5", 5, logicalType="decimal", precision=11, scale=3),
        [_be(-1, 5), _be(99_999_999_999, 5), _be(0, 5)],
    ),
    # Attributes Java Avro finds invalid: the logical type is ignored, the bytes stay bytes.
    ("dec_scale_above", _decimal(2, 3), [b"\x01", b"", b"\xff\x00"]),
    ("dec_precision_0", _decimal(0, 0), [b"\x01", b"\x02", b"\x03"]),
    ("dec_text_precision", _decimal("5", 1), [b"\x01", b"\x02", b"\x03"]),
    ("dec_float_precision", _decimal(5.0, 1), [b"\x01", b"\x02", b"\x03"]),
    ("dec_negative_scale", _decimal(5, -1), [b"\x01", b"\x02", b"\x03"]),
    ("dec_no_precision", {"type": "bytes", "logicalType": "decimal"}, [b"\x01", b"", b"\x03"]),
    (
        "dec_fixed_too_small",
        _fixed("F2", 2, logicalType="decimal", precision=10, scale=2),
        [b"\x00\x01", b"\xff\xff", b"\x12\x34"],
    ),
    ("dec_on_int", {"type": "int", "logicalType": "decimal", "precision": 5}, [1, -2, 3]),
    ("day", {"type": "int", "logicalType": "date"}, [19782, -141714, 0]),
    ("ts_ms", {"type": "long", "logicalType": "timestamp-millis"}, [1_700_000_000_123, -5, 0]),
    ("ts_us", {"type": "long", "logicalType": "timestamp-micros"}, [1_700_000_000_123_456, -1, 7]),
    ("lts_ms", {"type": "long", "logicalType": "local-timestamp-millis"}, [1, -86_400_001, 0]),
    (
        "lts_us",
        {"type": "long", "logicalType": "local-timestamp-micros"},
        [1_700_000_000_000_001, -3, 0],
    ),
    ("ts_ns", {"type": "long", "logicalType": "timestamp-nanos"}, [1, 2, 3]),
    ("ts_on_int", {"type": "int", "logicalType": "timestamp-millis"}, [1, 2, 3]),
    ("date_on_long", {"type": "long", "logicalType": "date"}, [1, 2, 3]),
    ("time_ms", {"type": "int", "logicalType": "time-millis"}, [0, 86_399_999, 5]),
    ("time_us", {"type": "long", "logicalType": "time-micros"}, [0, 86_399_999_999, 5]),
    (
        "uuid",
        {"type": "string", "logicalType": "uuid"},
        ["0c1b6f5e-0000-4000-8000-00000000000a"] * 3,
    ),
    (
        "duration",
        _fixed("Dur", 12, logicalType="duration"),
        [bytes(12), bytes(range(12)), bytes(12)],
    ),
    ("other", {"type": "long", "logicalType": "no-such-type"}, [1, 2, 3]),
    ("plain_fixed", _fixed("Three", 3), [b"abc", b"\x00\x00\x00", b"\xff\x00\x01"]),
    ("kind", {"type": "enum", "name": "Kind", "symbols": ["A", "B_2"]}, ["A", "B_2", "A"]),
    (
        "days",
        {"type": "array", "items": ["null", {"type": "int", "logicalType": "date"}]},
        [[0, None, 19782], [], None],
    ),
    (
        "point",
        {
            "type": "record",
            "name": "Point",
            "fields": [
                {
                    "name": "at",
                    "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
                },
                {"name": "n", "type": ["null", _decimal(5, 1)], "default": None},
                {
                    "name": "local",
                    "type": ["null", {"type": "long", "logicalType": "local-timestamp-millis"}],
                },
            ],
        },
        [
            {"at": 1, "n": _be(-12345), "local": 2},
            {"at": None, "n": None, "local": 0},
            None,
        ],
    ),
    (
        "amounts",
        {"type": "map", "values": ["null", _decimal(6, 2)]},
        [{"a": _be(100), "b": None}, {}, None],
    ),
]
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Logical",
    "fields": [
        {"name": "id", "type": "long"},
        *({"name": name, "type": ["null", avro_type]} for name, avro_type, _ in FIELDS),
    ],
}
#: Three records with the values above, and one null in every union.
DATA: list[dict[str, Any]] = [
    {"id": i, **{name: values[i] for name, _, values in FIELDS}} for i in range(3)
] + [{"id": 3, **{name: None for name, _, _ in FIELDS}}]


def _plain(schema: Any) -> Any:
    """``schema`` without any ``logicalType`` (a copy; this schema has no field of that name)."""
    if isinstance(schema, list):
        return [_plain(s) for s in schema]
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    return schema


def _datums(records: list[dict[str, Any]]) -> list[bytes]:
    parsed = fastavro.parse_schema(_plain(SCHEMA))
    out = []
    for record in records:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        out.append(buffer.getvalue())
    return out


def _normal(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its maps (lists of pairs from Arrow) as dicts."""
    out = dict(row)
    amounts = out["amounts"]
    out["amounts"] = None if amounts is None else dict(amounts)
    return out


def test_logical_types_decode_as_spark_avro_decodes_them(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql.avro.functions import from_avro

    datums = _datums(DATA)
    # Values out of their logical type's range: 11 digits in a decimal(10, 2), and the
    # microseconds of the last timestamp-millis overflow a long.
    out_of_range = _datums([{**DATA[3], "dec": _be(10**10)}, {**DATA[3], "ts_ms": 2**63 - 1}])
    text = json.dumps(SCHEMA)
    plain = spark.createDataFrame([(d,) for d in datums], "datum binary")
    decoded = plain.select(from_avro("datum", text, {"mode": "FAILFAST"}).alias("r")).select("r.*")
    want = sorted((_normal(r) for r in decoded.toArrow().to_pylist()), key=lambda r: r["id"])

    root = tmp_path / "in"
    root.mkdir()
    corrupt = [datums[0][:-1], *out_of_range]
    lines = [base64.b64encode(d) for d in datums + corrupt]
    (root / "a.b64").write_bytes(b"\n".join(lines) + b"\n")
    source = FileSource("logical", root, "avro", avro_schema=text)
    assert [(f.name, f.dataType) for f in arrow_to_spark_schema(source.schema)] == [
        (f.name, f.dataType) for f in decoded.schema
    ]
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    rows = rows_after_one_step(spark, client, source)
    ok = sorted((r for r in rows if r["_err"] is None), key=lambda r: r["id"])
    got = [_normal({k: r[k] for k in SCHEMA_NAMES}) for r in ok]
    assert got == want
    errs = [r for r in rows if r["_err"] is not None]
    assert len(errs) == 3 and all(AVRO_DECODE_ERROR in r["_err"] for r in errs), errs
    # Two of them are whole datums whose values the logical type cannot hold: the text says so.
    assert "outside its logical type's range" in errs[0]["_err"]

    # A few values by hand, so that neither decoder can be wrong the same way unseen.
    first = got[0]
    assert first["dec"] == Decimal("12.34")
    assert first["dec_fixed"] == Decimal("-0.001")
    assert first["dec38"] == Decimal("0.1")
    assert first["dec_scale_above"] == b"\x01"
    assert first["day"] == dt.date(2024, 2, 29)
    assert got[1]["day"] == dt.date(1582, 1, 1)
    assert first["ts_ms"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    assert got[1]["lts_ms"] == dt.datetime(1969, 12, 30, 23, 59, 59, 999000)
    assert first["point"] == {
        "at": dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
        "n": Decimal("-1234.5"),
        "local": dt.datetime(1970, 1, 1, 0, 0, 0, 2000),
    }
    assert first["amounts"] == {"a": Decimal("1.00"), "b": None}
    assert [r["kind"] for r in got] == ["A", "B_2", "A", None]


SCHEMA_NAMES = ["id", *(name for name, _, _ in FIELDS)]


DEC = _decimal(4, 2)
FIXED_DEC = _fixed("F2", 2, logicalType="decimal", precision=4)
#: ``(type, default, whether spark-avro reads it)`` of a reader field a writer lacks.
DEFAULTS: list[tuple[Any, Any, bool]] = [
    (DEC, "\u0000d", True),
    (DEC, "\u0003\u00e7", True),  # 9.99
    (DEC, "", False),  # no bytes: no number
    (DEC, "\u0027\u0010", False),  # 100.00: five digits
    (FIXED_DEC, "", True),  # padded: 0
    (FIXED_DEC, "\u0001", True),  # padded: 256
    (FIXED_DEC, "\u007f\u00ff", False),  # 32767
    ({"type": "long", "logicalType": "timestamp-millis"}, 1_700_000_000_000, True),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, 2**62, False),
    ({"type": "long", "logicalType": "timestamp-micros"}, 2**62, True),
    ([DEC, "null"], "", False),  # a union's default is of its first branch
    (["null", DEC], None, True),
    # Java Avro takes a default of any branch, and encodes it with the first it fits.
    (["null", DEC], "\u0003\u00e7", True),
    (["null", DEC], "\u0027\u0010", False),
    (["null", {"type": "long", "logicalType": "timestamp-millis"}], 10**17, False),
    ({"type": "array", "items": DEC}, ["\u0001", ""], False),
    ({"type": "map", "values": DEC}, {"a": "\u0001"}, True),
    (
        {"type": "record", "name": "S", "fields": [{"name": "n", "type": DEC, "default": ""}]},
        {},
        False,
    ),
    (
        {"type": "record", "name": "S", "fields": [{"name": "n", "type": DEC}]},
        {"n": "\u0001"},
        True,
    ),
]


@pytest.mark.parametrize(("avro_type", "default", "read"), DEFAULTS)
def test_a_reader_default_spark_avro_cannot_read_is_refused(
    spark: Any, avro_type: Any, default: Any, read: bool
) -> None:
    """A datum written without the field decodes with the default as spark-avro reads it
    (``from_avro``), and the source takes the reader schema exactly when it does."""
    from pyspark.sql import functions as F

    from timeshard.errors import InvalidUsage
    from timeshard.storage.avro import avro_payload_schema, datum_ok, decode_datum

    writer = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    field = {"name": "v", "type": avro_type, "default": default}
    reader = {**writer, "fields": [*writer["fields"], field]}
    datum = spark.createDataFrame([(b"\x02",)], "datum binary")
    decoded = decode_datum(F.col("datum"), json.dumps(writer), json.dumps(reader))
    (row,) = datum.select(datum_ok(decoded).alias("ok")).collect()
    assert row["ok"] is read
    if read:
        assert avro_payload_schema(json.dumps(reader)).names == ["id", "v"]
    else:
        with pytest.raises(InvalidUsage, match=r"field (v\.n|'v') has default"):
            avro_payload_schema(json.dumps(reader))


@pytest.mark.parametrize("mode", ["EXCEPTION", "LEGACY"])
def test_dates_before_1582_read_alike_whatever_the_sessions_rebase_mode(
    spark: Any, tmp_path: Path, mode: str
) -> None:
    """Avro's calendar is the proleptic Gregorian one: a session whose
    ``spark.sql.avro.datetimeRebaseModeInRead`` says otherwise (a cluster's defaults) must
    not shift the values (LEGACY) or make err rows of them (EXCEPTION)."""
    schema = {
        "type": "record",
        "name": "Old",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    day, at = dt.date(1000, 3, 1), dt.datetime(1000, 3, 1, 12, tzinfo=dt.UTC)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    record = {
        "id": 1,
        "day": (day - epoch.date()).days,
        "at": (at - epoch) // dt.timedelta(microseconds=1),
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(_plain(schema)), record)
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.b64").write_bytes(base64.b64encode(buffer.getvalue()) + b"\n")
    key = "spark.sql.avro.datetimeRebaseModeInRead"
    before = spark.conf.get(key)
    spark.conf.set(key, mode)
    try:
        source = FileSource("old", root, "avro", avro_schema=json.dumps(schema))
        client = PersistClient(Location.embedded(tmp_path / "loc"))
        rows = rows_after_one_step(spark, client, source)
    finally:
        spark.conf.set(key, before)
    assert [(r["_err"], r["day"], r["at"]) for r in rows] == [(None, day, at)]
