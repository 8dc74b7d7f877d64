"""pgoutput messages and PostgreSQL text values, decoded without a server."""

from __future__ import annotations

import datetime as dt
import re
import struct
from decimal import Decimal

import pyarrow as pa
import pytest

from timeshard.storage.pgoutput import (
    UNCHANGED,
    Begin,
    Change,
    Column,
    Commit,
    Relation,
    Truncate,
    arrow_type,
    decode_text,
    format_lsn,
    parse_array,
    parse_lsn,
    parse_message,
)
from timeshard.storage.postgres_source import SnapshotInfo, default_slot, incompatibility


def tuple_data(*values: str | object | None) -> bytes:
    out = struct.pack("!h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        else:
            raw = str(v).encode()
            out += b"t" + struct.pack("!i", len(raw)) + raw
    return out


def test_messages_round_trip_from_their_wire_form() -> None:
    assert parse_message(b"B" + struct.pack("!Qqi", 0x1_0000_00A0, 5, 77)) == Begin(
        0x1_0000_00A0, 77
    )
    assert parse_message(b"C" + struct.pack("!BQQq", 0, 10, 20, 5)) == Commit(10, 20)
    relation = (
        b"R"
        + struct.pack("!I", 16384)
        + b"public\0orders\0f"
        + struct.pack("!h", 2)
        + b"\x01id\0"
        + struct.pack("!Ii", 23, -1)
        + b"\x00amount\0"
        + struct.pack("!Ii", 1700, (10 << 16 | 2) + 4)
    )
    assert parse_message(relation) == Relation(
        16384,
        "public",
        "orders",
        "f",
        (Column("id", 23, -1), Column("amount", 1700, (10 << 16 | 2) + 4)),
    )
    insert = b"I" + struct.pack("!I", 16384) + b"N" + tuple_data("1", None)
    assert parse_message(insert) == Change("I", 16384, None, ("1", None))
    update = (
        b"U"
        + struct.pack("!I", 1)
        + b"O"
        + tuple_data("1", "a")
        + b"N"
        + tuple_data("1", UNCHANGED)
    )
    parsed = parse_message(update)
    assert (
        isinstance(parsed, Change) and parsed.old == ("1", "a") and parsed.new == ("1", UNCHANGED)
    )
    delete = b"D" + struct.pack("!I", 1) + b"O" + tuple_data("2", "b")
    assert parse_message(delete) == Change("D", 1, ("2", "b"), None)
    assert parse_message(b"T" + struct.pack("!IBII", 2, 0, 5, 6)) == Truncate((5, 6))
    assert parse_message(b"Y" + struct.pack("!I", 1) + b"s\0t\0") is None  # a type: ignored


def test_text_values_decode_exactly() -> None:
    assert decode_text("12345678901234", 20) == 12345678901234
    assert decode_text("1.5e-300", 701) == 1.5e-300
    assert decode_text("NaN", 701) != decode_text("NaN", 701)  # NaN
    assert decode_text("t", 16) is True and decode_text("f", 16) is False
    assert decode_text("12345678.91", 1700, (10 << 16 | 2) + 4) == Decimal("12345678.91")
    assert decode_text("1e1000", 1700, -1) == "1e1000"  # unconstrained: its exact text
    assert decode_text("\\x00ff", 17) == b"\x00\xff"
    assert decode_text("2024-02-29", 1082) == dt.date(2024, 2, 29)
    assert decode_text("2024-02-29 23:59:59.000001", 1114) == dt.datetime(
        2024, 2, 29, 23, 59, 59, 1
    )
    assert decode_text("2024-03-01 01:00:00+05:30", 1184) == dt.datetime(
        2024, 2, 29, 19, 30, tzinfo=dt.UTC
    )
    assert decode_text('{"a": [1, 2]}', 3802) == '{"a": [1, 2]}'
    assert decode_text("{1,NULL,3}", 1007) == [1, None, 3]
    assert decode_text('{"a,b","c\\"d",NULL,"NULL"}', 1009) == ["a,b", 'c"d', None, "NULL"]
    for bad, oid in [("infinity", 1114), ("-infinity", 1184), ("0044-01-01 BC", 1082), ("x", 16)]:
        with pytest.raises(ValueError):
            decode_text(bad, oid)
    with pytest.raises(ValueError, match="does not fit"):
        decode_text("NaN", 1700, (10 << 16 | 2) + 4)
    with pytest.raises(ValueError, match="multi-dimensional"):
        parse_array("{{1,2},{3,4}}")
    assert parse_array("{}") == [] and parse_array("[0:1]={7,8}") == ["7", "8"]


def test_arrow_types() -> None:
    assert arrow_type(1700, (12 << 16 | 3) + 4) == pa.decimal128(12, 3)
    assert arrow_type(1700, -1) == pa.string()
    assert arrow_type(1184) == pa.timestamp("us", tz="UTC")
    assert arrow_type(1016) == pa.list_(pa.int64())
    assert arrow_type(3802) == pa.string()


def test_lsns_and_snapshot_visibility() -> None:
    assert (
        parse_lsn("16/B374D848") == 0x16_B374_D848 and format_lsn(0x16_B374_D848) == "16/B374D848"
    )
    snap = SnapshotInfo(
        "x", xmin=(1 << 32) + 100, xmax=(1 << 32) + 110, xip=((1 << 32) + 105,), wal_after=0
    )
    assert snap.sees(99) and snap.sees(104) and not snap.sees(105) and not snap.sees(110)
    assert snap.sees(0xFFFF_FFF0)  # the previous epoch, long committed
    declared = (Column("id", 23, -1), Column("v", 25, -1))
    assert incompatibility(declared, (*declared, Column("new", 25, -1))) is None
    assert incompatibility(declared, declared[:1]) == "column 'v' was dropped"
    assert (
        incompatibility(declared, (declared[0], Column("v", 20, -1))) == "column 'v' changed type"
    )
    numbered = (Column("id", 23, -1, 1), Column("v", 25, -1, 2))
    assert incompatibility(numbered, declared) is None  # a Relation message has no numbers
    assert incompatibility(numbered, (numbered[0], Column("v", 25, -1, 3))) == (
        "column 'v' was dropped and added again"
    )


def test_an_old_row_without_its_other_columns_is_an_err_row_not_a_retraction() -> None:
    """A partition published via its root logs old rows as its own identity has them (e.g.
    DEFAULT: the key only, ``K``): an update without its old row or a delete of only the key
    must not retract a row the shard never had."""
    from timeshard.storage.postgres_read import _apply_change, _Txn
    from timeshard.storage.postgres_source import ReadPlan, Table

    delete = b"D" + struct.pack("!I", 7) + b"K" + tuple_data("2", None)
    assert parse_message(delete) == Change("D", 7, ("2", None), None, key_only=True)
    full = b"D" + struct.pack("!I", 7) + b"O" + tuple_data("2", "b")
    assert parse_message(full) == Change("D", 7, ("2", "b"), None, key_only=False)
    keyed_update = (
        b"U" + struct.pack("!I", 7) + b"K" + tuple_data("1", None) + b"N" + tuple_data("1", "z")
    )
    parsed = parse_message(keyed_update)
    assert isinstance(parsed, Change) and parsed.key_only
    table = Table("s", "p", "s.p", (Column("id", 23, -1), Column("v", 25, -1)), 7)
    plan = ReadPlan("", "slot", "pub", [table], lo=0, hi=100, consistent=0)
    for change in [
        Change("U", 7, None, ("1", "z")),
        Change("D", 7, ("2", None), None, key_only=True),
        parsed,
    ]:
        txn = _Txn(Begin(50, 1))
        _apply_change(txn, change, {7: (0, [0, 1])}, plan)
        assert txn.rows == [], change
        ((index, why),) = txn.errors
        assert index == 0 and why.startswith("s.p: ") and "must be FULL" in why, why
    txn = _Txn(Begin(50, 1))
    _apply_change(txn, Change("U", 7, ("1", "a"), ("1", "z")), {7: (0, [0, 1])}, plan)
    assert txn.rows == [(0, -1, None, ["1", "a"]), (0, 1, None, ["1", "z"])] and not txn.errors


def test_different_source_names_have_different_default_slots() -> None:
    names = ["a.x", "a-x", "A_x", "a_x", "a=x", "x" * 100, "x" * 99 + "y"]
    slots = [default_slot(n) for n in names]
    assert len(set(slots)) == len(names), slots
    assert all(re.fullmatch(r"timeshard_[a-z0-9_]{1,40}_[0-9a-f]{12}", s) for s in slots), slots
    assert all(len(s) <= 63 for s in slots) and slots[0].startswith("timeshard_a_x_")


def test_time_and_time_arrays_are_stored_as_their_text() -> None:
    """Spark has no time type: ``time`` is its text, and so is each element of ``time[]``
    (stored as time64, a table with a time[] column failed the whole source's construction)."""
    from timeshard.persist._internal.parts import check_spark_readable
    from timeshard.storage.postgres_source import Table, _decode, stored_type

    scalar, array = Column("t", 1083, -1), Column("ts", 1183, -1)
    assert stored_type(scalar) == pa.string()
    assert stored_type(array) == pa.list_(pa.string())
    check_spark_readable(Table("public", "x", "x", (scalar, array), 1).arrow_schema())
    assert _decode("12:00:01.5", scalar) == "12:00:01.5"
    assert _decode("{12:00:01.5,NULL,24:00:00}", array) == ["12:00:01.5", None, "24:00:00"]
