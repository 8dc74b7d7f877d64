"""The MySQL source's pure pieces: columns, the one text form, GTID frontiers, quoting."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.storage.mysql_source import (
    Server,
    binlog_order,
    check_not_behind,
    quote,
    start_position,
)
from timeshard.storage.mysql_types import (
    INVALID,
    Column,
    Undecodable,
    binlog_text,
    column_from_schema,
    covers,
    decode_text,
    gtid_frontier,
    incompatibility,
    snapshot_text,
    time_text,
)


def col(data_type: str, **kw: object) -> Column:
    return Column("c", data_type, **kw)  # type: ignore[arg-type]


def test_arrow_types() -> None:
    assert col("int").arrow_type() == pa.int32()
    assert col("int", unsigned=True).arrow_type() == pa.int64()
    assert col("bigint").arrow_type() == pa.int64()
    assert col("bigint", unsigned=True).arrow_type() == pa.decimal128(20, 0)
    assert col("decimal", precision=10, scale=2).arrow_type() == pa.decimal128(10, 2)
    assert col("decimal", precision=65, scale=30).arrow_type() == pa.string()
    assert col("float").arrow_type() == pa.float32()
    assert col("timestamp").arrow_type() == pa.timestamp("us", tz="UTC")
    assert col("datetime").arrow_type() == pa.timestamp("us")
    assert col("varbinary").arrow_type() == pa.binary()
    assert col("set").arrow_type() == pa.string()
    with pytest.raises(InvalidUsage, match="'geometry'"):
        col("geometry")


def test_column_from_information_schema() -> None:
    c = column_from_schema("n", "BIGINT", "bigint(20) unsigned", 20, 0, None)
    assert c == Column("n", "bigint", unsigned=True, precision=20, scale=0, fsp=0)
    assert column_from_schema("b", "binary", "binary(16)", None, None, None).length == 16
    assert column_from_schema("b", "varbinary", "varbinary(16)", None, None, None).length is None


@pytest.mark.parametrize(
    ("column", "server_text", "binlog_value", "none_source", "stored"),
    [
        (col("int"), "-1", -1, None, -1),
        (col("bigint", unsigned=True), "18446744073709551615", 2**64 - 1, None, Decimal(2**64 - 1)),
        (
            col("decimal", precision=10, scale=2),
            "-0.01",
            Decimal("-0.01"),
            None,
            Decimal("-0.01"),
        ),
        (col("double"), "0.1", 0.1, None, 0.1),
        (col("varchar"), "héllo", "héllo", None, "héllo"),
        (col("varbinary"), b"\x00\xff", b"\x00\xff", None, b"\x00\xff"),
        # binary(4): the binlog drops the trailing zero bytes the server pads it with
        (col("binary", length=4), b"a\x00\x00\x00", b"a", None, b"a\x00\x00\x00"),
        (col("binary", length=2), b"\x00\x00", b"", None, b"\x00\x00"),
        (col("date"), "2024-02-29", dt.date(2024, 2, 29), None, dt.date(2024, 2, 29)),
        (
            col("datetime", fsp=3),
            "2024-05-01 12:30:15.123",
            dt.datetime(2024, 5, 1, 12, 30, 15, 123000),
            None,
            dt.datetime(2024, 5, 1, 12, 30, 15, 123000),
        ),
        (
            col("timestamp", fsp=6),
            "2024-05-01 12:30:15.123456",
            dt.datetime(2024, 5, 1, 12, 30, 15, 123456),
            None,
            dt.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=dt.UTC),
        ),
        (col("time"), "-838:59:59", dt.timedelta(days=-35, seconds=3601), None, "-838:59:59"),
        (col("set"), "x,z", {"z", "x"}, None, "x,z"),
        (col("set"), "", None, "empty set", ""),
        (col("year"), "2024", 2024, None, 2024),
        (col("json"), '{"k": 1}', '{"k": 1}', None, '{"k": 1}'),
    ],
)
def test_both_paths_decode_alike(
    column: Column,
    server_text: object,
    binlog_value: object,
    none_source: str | None,
    stored: object,
) -> None:
    a = snapshot_text(server_text, column)  # type: ignore[arg-type]
    b = binlog_text(binlog_value, column, none_source, ["x", "y", "z"])
    assert a is not None and b is not None
    assert decode_text(a, column) == decode_text(b, column) == stored


def test_nulls_and_values_arrow_cannot_hold() -> None:
    date = col("date")
    assert binlog_text(None, date, "null", None) is None
    assert snapshot_text(None, date) is None
    assert binlog_text(None, date, "out of date range", None) == INVALID
    messages = set()
    for text in (INVALID, "2020-00-10", "0000-00-00"):
        with pytest.raises(Undecodable) as e:
            decode_text(text, date)
        messages.add(str(e.value))
    assert messages == {"column 'c' (date) holds a value outside the range it is stored in"}
    # The zero timestamp is stored as 0 in the binlog, which no real timestamp is.
    assert binlog_text(dt.datetime(1970, 1, 1), col("timestamp"), None, None) == INVALID


@given(st.integers(min_value=-838 * 3600 * 10**6, max_value=838 * 3600 * 10**6), st.integers(0, 6))
def test_time_text_round_trips_through_its_parts(micros: int, fsp: int) -> None:
    micros -= micros % 10 ** (6 - fsp)  # a time(fsp) holds fsp digits
    text = time_text(dt.timedelta(microseconds=micros), fsp)
    sign = -1 if text.startswith("-") else 1
    hms, _, fraction = text.lstrip("-").partition(".")
    h, m, s = (int(x) for x in hms.split(":"))
    assert len(fraction) == fsp and m < 60 and s < 60
    back = ((h * 60 + m) * 60 + s) * 10**6 + int((fraction or "0").ljust(6, "0"))
    assert sign * back == micros


def test_gtid_frontiers_and_covering_files() -> None:
    assert gtid_frontier("0-1-7,2-1-1") == {"0": 8, "2": 2}
    assert gtid_frontier("0-1-7,\n5-3-10") == {"0": 8, "5": 11}
    assert gtid_frontier("") == {}
    with pytest.raises(ValueError):
        gtid_frontier("garbage")
    assert covers({}, {"0": 1})
    assert covers({"0": 8}, {"0": 8, "2": 2})
    assert not covers({"0": 9}, {"0": 8})
    assert not covers({"0": 8, "3": 2}, {"0": 8})  # domain 3's first transaction is older


def test_incompatibility_of_table_maps() -> None:
    declared = [Column("id", "int"), Column("d", "decimal", precision=10, scale=2)]

    def binlog(**kw: object) -> list[SimpleNamespace]:
        columns = {
            "id": SimpleNamespace(name="id", type=3, unsigned=False),
            "d": SimpleNamespace(name="d", type=246, precision=10, decimals=2),
            "new": SimpleNamespace(name="new", type=15),
        }
        for name, change in kw.items():
            if change is None:
                del columns[name]
            else:
                columns[name] = change  # type: ignore[assignment]
        return list(columns.values())

    assert incompatibility(declared, binlog()) is None
    assert incompatibility(declared, binlog(d=None)) == "column 'd' was dropped"
    assert incompatibility(declared, binlog(id=SimpleNamespace(name="id", type=8))) == (
        "column 'id' changed type"
    )
    assert incompatibility(
        declared, binlog(id=SimpleNamespace(name="id", type=3, unsigned=True))
    ) == ("column 'id' changed signedness")
    assert incompatibility(
        declared, binlog(d=SimpleNamespace(name="d", type=246, precision=12, decimals=2))
    ) == ("column 'd' changed precision or scale")


@pytest.mark.parametrize(
    ("declared", "now", "why"),
    [
        (Column("t", "time", fsp=0), {"type": 19, "fsp": 3}, "changed its fractional digits"),
        (Column("t", "datetime", fsp=6), {"type": 18, "fsp": 0}, "changed its fractional digits"),
        (Column("t", "timestamp", fsp=2), {"type": 17, "fsp": 2}, None),
        (Column("t", "binary", length=4), {"type": 254, "max_length": 8}, "changed its length"),
        (Column("t", "binary", length=4), {"type": 254, "max_length": 4}, None),
        (Column("t", "char"), {"type": 254, "max_length": 40}, None),
    ],
)
def test_a_table_map_with_other_fractional_digits_or_binary_length_is_incompatible(
    declared: Column, now: dict[str, int], why: str | None
) -> None:
    """``TIME(0)`` altered to ``TIME(3)`` was read cut to whole seconds, ``binary(4)`` altered
    to ``binary(8)`` padded to 4 bytes: the table map said so, and nothing compared it."""
    got = incompatibility([declared], [SimpleNamespace(name="t", **now)])
    assert got == (None if why is None else f"column 't' {why}")


def test_identifiers_are_quoted_and_urls_parsed() -> None:
    assert quote("orders") == "`orders`"
    for bad in ("a\x00b", "", "x" * 65):
        with pytest.raises(InvalidUsage):
            quote(bad)
    server = Server.from_url("mysql://repl:s%40cret@db.example:3307/shop")
    assert (server.host, server.port, server.user, server.password, server.database) == (
        "db.example",
        3307,
        "repl",
        "s@cret",
        "shop",
    )
    with pytest.raises(InvalidUsage, match="names no database"):
        Server.from_url("mysql://repl@db/")
    with pytest.raises(InvalidUsage, match="mysql://"):
        Server.from_url("postgresql://repl@db/shop")


def test_a_small_decimal_has_one_text_from_both_paths() -> None:
    """The binlog's Decimal prints in exponent form with ``str``; the server never does."""
    wide = col("decimal", precision=50, scale=12)  # wider than Arrow's: stored as its text
    binlog = binlog_text(Decimal("0.000000100000"), wide, None, None)
    assert binlog == snapshot_text("0.000000100000", wide) == "0.000000100000"
    assert decode_text("0.000000100000", wide) == "0.000000100000"
    assert binlog_text(Decimal("-1E+2"), wide, None, None) == "-100"


def test_the_password_is_in_no_repr_or_message() -> None:
    server = Server.from_url("mysql://repl:hunter2@db.example:3307/shop")
    assert "hunter2" not in repr(server) and server.password == "hunter2"
    for url in ("mysql://repl:hunter2@db.example:3307/", "http://repl:hunter2@db.example/shop"):
        with pytest.raises(InvalidUsage) as e:
            Server.from_url(url)
        assert "hunter2" not in str(e.value) and "repl:***@db.example" in str(e.value)


def test_a_url_without_a_password_takes_mysql_pwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYSQL_PWD", "from-env")
    assert Server.from_url("mysql://repl@db.example/shop").password == "from-env"
    assert Server.from_url("mysql://repl:@db.example/shop").password == ""  # given: empty
    assert Server.from_url("mysql://repl:s%40cret@db.example/shop").password == "s@cret"
    monkeypatch.delenv("MYSQL_PWD")
    assert Server.from_url("mysql://repl@db.example/shop").password == ""


def test_binlog_positions_compare_by_the_file_number() -> None:
    assert binlog_order(("binlog.999999", 9000)) < binlog_order(("binlog.1000000", 4))
    assert binlog_order(("binlog.000002", 4)) < binlog_order(("binlog.000002", 5))
    assert binlog_order(("binlog.000002", 9)) < binlog_order(("binlog.000010", 4))


def test_a_gtid_position_behind_the_frontier_is_a_definite_error() -> None:
    check_not_behind("s", {"0": 8, "5": 3}, {"0": 8, "5": 3}, "x")
    check_not_behind("s", {"0": 9, "5": 3, "6": 1}, {"0": 8}, "x")
    with pytest.raises(SourceUnavailable, match="went backwards: domain 5 is at 0") as e:
        check_not_behind("s", {"0": 9}, {"0": 8, "5": 3}, "x")
    assert e.value.definite


class _Binlog:
    """A cursor over ``SHOW BINARY LOGS`` and ``BINLOG_GTID_POS(file, 4)`` (None: NULL)."""

    def __init__(self, first_positions: dict[str, str | None]) -> None:
        self.first_positions = first_positions
        self.result: list[tuple[object, ...]] = []

    def execute(self, query: str, params: tuple[object, ...] = ()) -> None:
        if query == "SHOW BINARY LOGS":
            self.result = [(name, 1000) for name in self.first_positions]
        else:
            self.result = [(self.first_positions[str(params[0])],)]

    def fetchall(self) -> list[tuple[object, ...]]:
        return self.result

    def fetchone(self) -> tuple[object, ...]:
        return self.result[0]


def test_a_null_gtid_position_of_a_file_is_unknown_not_empty() -> None:
    """NULL (not found) must not read as "" (no GTIDs yet), which covers every frontier."""
    cur = _Binlog({"binlog.000001": "", "binlog.000002": "0-1-5", "binlog.000003": None})
    assert start_position(cur, {"0": 7}) == ("binlog.000002", 4)
    assert start_position(cur, {"0": 3}) == ("binlog.000001", 4)
    cur = _Binlog({"binlog.000001": None})
    with pytest.raises(SourceUnavailable, match="was purged") as e:
        start_position(cur, {"0": 3})
    assert e.value.definite


@pytest.mark.parametrize(
    ("charset", "raw", "text"),
    [
        ("latin1", b"\x80\x81\x8d\x8f\x90\x9d\x9f\xe9", "€\x81\x8d\x8f\x90\x9dŸé"),
        ("latin1", bytes(range(256)), None),
        ("utf16", "é😀".encode("utf-16-be"), "é😀"),
        ("utf16le", "é😀".encode("utf-16-le"), "é😀"),
        ("ucs2", b"\x00\xe9", "é"),
        ("utf32", "é😀".encode("utf-32-be"), "é😀"),
        ("utf8mb4", "é😀".encode(), "é😀"),
        ("utf8mb3", "é".encode(), "é"),
        ("koi8r", b"\xc1", "\u0430"),  # Cyrillic a
        (None, "é".encode(), "é"),
    ],
)
def test_binlog_text_decodes_each_charset_as_mysql_does(
    charset: str | None, raw: bytes, text: str | None
) -> None:
    """pymysql reads latin1 as Python's cp1252, which fails on 5 bytes; the library read
    utf16 little-endian (é as U+E900) and handed ucs2/utf32 over as bytes read as UTF-8."""
    c = col("varchar")
    if text is None:  # every byte: latin1 has no byte MySQL fails on
        assert len(binlog_text(raw, c, None, None, charset) or "") == 256
        return
    assert binlog_text(raw, c, None, None, charset) == text
    assert decode_text(text, c) == decode_text(snapshot_text(text, c) or "", c)


@pytest.mark.parametrize(
    ("charset", "raw", "why"),
    [
        ("swe7", b"[", "character set 'swe7', which the MySQL source cannot decode"),
        ("sjis", b"\x5c", "character set 'sjis', which the MySQL source cannot decode"),
        ("ucs2", "😀".encode("utf-16-be"), "no text in character set 'ucs2'"),
        ("utf16", b"\xd8\x00", "no text in character set 'utf16'"),
        ("utf8mb4", b"\xff", "no text in character set 'utf8mb4'"),
        ("cp1250", b"\x81", "no text in character set 'cp1250'"),
    ],
)
def test_text_that_does_not_decode_is_undecodable(charset: str, raw: bytes, why: str) -> None:
    """Never a wrong text (swe7 '[' is 'Ä'), never an error other than Undecodable."""
    with pytest.raises(Undecodable, match=why):
        binlog_text(raw, col("text"), None, None, charset)


def test_a_column_keeps_its_charset_but_compares_without_it() -> None:
    c = column_from_schema("c", "varchar", "varchar(10)", None, None, None, "LATIN1")
    assert c.charset == "latin1" and c == Column("c", "varchar")


class _RowEvent:
    """A row event of table ``t (id int, d date, s varchar)`` as ``mysql-replication`` gives
    it: ``rows`` decodes the values (with ``charset_to_encoding``) when first read."""

    def __init__(
        self, fault: BaseException | None = None, s: bytes = b"\x81", collation: str = "latin1_bin"
    ) -> None:
        self.fault, self.s = fault, s
        self.columns = [
            SimpleNamespace(name="id", type=3, unsigned=False, collation_name=None),
            SimpleNamespace(name="d", type=10, unsigned=False, collation_name=None),
            SimpleNamespace(name="s", type=15, unsigned=False, collation_name=collation),
        ]

    @staticmethod
    def charset_to_encoding(name: str) -> str:
        return "cp1252"  # pymysql's codec of latin1

    @property
    def rows(self) -> list[dict[str, Any]]:
        if self.fault is not None:
            raise self.fault
        try:  # the library's __read_string: a codec Python lacks hands the bytes over
            s: str | bytes = self.s.decode(self.charset_to_encoding("latin1"))
        except LookupError:
            s = self.s
        return [{"values": {"id": 1, "d": dt.date(2024, 2, 1), "s": s}, "none_sources": {}}]


def _plan() -> Any:
    from timeshard.storage.mysql_source import ReadPlan, Table

    columns = (Column("id", "int"), Column("d", "date"), Column("s", "varchar", charset="latin1"))
    server = Server("h", 1, "u", "p", "db")
    return ReadPlan(server, (Table("t", columns),), {"0": 1}, {"0": 9}, ("b.1", 4), ("b.1", 4))


def test_a_binlog_value_that_does_not_decode_is_an_err_row_not_a_failed_task() -> None:
    """A date such as 2024-02-30 (ALLOW_INVALID_DATES) raised ValueError out of the read task
    on every retry; a latin1 byte 0x81 raised UnicodeDecodeError."""
    from timeshard.storage.mysql_read import _apply_rows, _emit, _Txn

    plan = _plan()
    undecodable = [
        _RowEvent(ValueError("day is out of range for month")),
        _RowEvent(s=b"\xff", collation="utf8mb4_general_ci"),
    ]
    for event in undecodable:
        txn = _Txn("0", 5, False, True)
        _apply_rows(txn, event, plan, 0)
        rows = list(_emit(txn, plan, {}))
        assert rows == [(0, "0", 5, 1, rows[0][4], None)], rows
        assert (
            rows[0][4].startswith("t: a row event does not decode: ") and "GTID 0-5" in rows[0][4]
        )
    txn = _Txn("0", 6, False, True)
    _apply_rows(txn, _RowEvent(s=b"\x81\xe9"), plan, 0)
    assert list(_emit(txn, plan, {})) == [(0, "0", 6, 1, None, ["1", "2024-02-01", "\x81é"])]


def test_a_fault_while_reading_row_events_fails_the_task() -> None:
    from timeshard.storage.mysql_read import _apply_rows, _Txn

    with pytest.raises(MemoryError):
        _apply_rows(_Txn("0", 5, False, True), _RowEvent(MemoryError()), _plan(), 0)


def _time2_bytes(negative: bool, h: int, m: int, s: int, us: int, fsp: int) -> bytes:
    """MySQL's ``my_time_packed_to_binary`` of a time (C division and remainder)."""
    packed = ((h << 12 | m << 6 | s) << 24) + us
    packed = -packed if negative else packed
    head = (0x800000 + (packed >> 24)).to_bytes(3, "big")
    fraction = -(abs(packed) % (1 << 24)) if packed < 0 else packed % (1 << 24)
    if fsp in (1, 2):
        return head + int(fraction / 10_000).to_bytes(1, "big", signed=True)
    if fsp in (3, 4):
        return head + int(fraction / 100).to_bytes(2, "big", signed=True)
    if fsp:
        return (packed + 0x800000000000).to_bytes(6, "big")
    return head


class _Packet:
    """A row event's bytes, read with the library's own readers."""

    from pymysqlreplication.packet import BinLogPacketWrapper

    read_int_be_by_size = BinLogPacketWrapper.read_int_be_by_size
    read_int24_be = BinLogPacketWrapper.read_int24_be

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def read(self, n: int) -> bytes:
        self.at += n
        return self.data[self.at - n : self.at]


@pytest.mark.parametrize(
    ("negative", "h", "m", "s", "us", "fsp"),
    [
        (True, 0, 0, 0, 500000, 1),
        (True, 1, 2, 3, 450000, 2),
        (True, 0, 0, 1, 500000, 1),
        (True, 0, 0, 0, 1000, 3),
        (True, 838, 59, 58, 999999, 6),
        (True, 0, 0, 0, 1, 6),
        (False, 12, 0, 0, 123456, 6),
        (True, 0, 0, 0, 100, 4),
        (True, 0, 0, 0, 10, 5),
        (True, 838, 59, 59, 0, 0),
        (False, 0, 0, 0, 0, 3),
    ],
)
def test_time2_reads_as_the_server_prints_it(
    negative: bool, h: int, m: int, s: int, us: int, fsp: int
) -> None:
    """mysql-replication read -01:02:03.45 as -01:02:03.55 and -00:00:00.001 as
    -00:00:00.999: a negative time's fraction borrows from its integer part."""
    from pymysqlreplication.constants import FIELD_TYPE
    from pymysqlreplication.row_event import RowsEvent

    from timeshard.storage.mysql_source import read_exactly

    raw = _time2_bytes(negative, h, m, s, us, fsp)
    want = f"{'-' if negative else ''}{h:02d}:{m:02d}:{s:02d}"
    want += "." + f"{us:06d}"[:fsp] if fsp else ""
    event: Any = object.__new__(RowsEvent)  # the library's reader, on the bytes alone
    event.packet = _Packet(raw)
    column = SimpleNamespace(name="t", type=FIELD_TYPE.TIME2, fsp=fsp)
    event.table_map, event.table_id = {1: SimpleNamespace(columns=[column])}, 1
    event._RowsEvent__none_sources = {}
    read_exactly(event)
    value = event._RowsEvent__read_values_name(column, b"\x00", 0, False, b"\x01", False, 0)
    assert time_text(value, fsp) == want and event.packet.at == len(raw)
    assert binlog_text(value, Column("t", "time", fsp=fsp), None, None) == want


def test_year_0000_reads_the_same_from_the_binlog_as_from_the_snapshot() -> None:
    """The library adds 1900 to the stored byte: YEAR 0000 (byte 0) read as 1900."""
    year = col("year")
    assert decode_text(binlog_text(1900, year, None, None) or "", year) == 0
    assert decode_text(snapshot_text("0000", year) or "", year) == 0
    assert decode_text(binlog_text(2155, year, None, None) or "", year) == 2155


def test_a_table_map_with_the_declared_columns_elsewhere_is_incompatible() -> None:
    declared = [Column("x", "int"), Column("y", "int")]
    maps = {
        ("x", "y"): None,
        ("x", "y", "z"): None,
        ("y", "x"): "its columns are no longer in the declared order ['x', 'y']",
        ("z", "x", "y"): "its columns are no longer in the declared order ['x', 'y']",
    }
    for names, why in maps.items():
        binlog = [SimpleNamespace(name=n, type=3, unsigned=False) for n in names]
        assert incompatibility(declared, binlog) == why, names
