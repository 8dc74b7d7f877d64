"""A Bind of a prepared statement parses no SQL: the columns that are a json, jsonb or
varchar parameter (:func:`~timeshard.server.pgtypes.declared_columns`) are found from
a parse of the statement's text made once, not once per Bind. Parses are counted (the
parser patched), not timed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlglot
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server import pgtypes
from timeshard.server.pgwire import PgServer

SQL = b"SELECT $1::json AS j, $2 AS v FROM t"


def _forget_parses() -> None:
    """Every memo of :mod:`~timeshard.server.pgtypes` emptied: no text is parsed yet."""
    for memo in vars(pgtypes).values():
        if hasattr(memo, "cache_clear"):
            memo.cache_clear()


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The texts sqlglot parses from now on (none cached before)."""
    _forget_parses()
    seen: list[str] = []
    parse_one = sqlglot.parse_one

    def counted(sql: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(sql)
        return parse_one(sql, *args, **kwargs)

    monkeypatch.setattr(sqlglot, "parse_one", counted)
    yield seen
    _forget_parses()


def test_binds_of_a_prepared_statement_parse_it_once(
    served: tuple[PgServer, StandIn], parses: list[str]
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        pgconn = conn.pgconn
        prepared = pgconn.prepare(b"s", SQL, [114, 1043])
        assert prepared.status == 1, prepared.error_message  # COMMAND_OK
        for n in range(5):
            result = pgconn.exec_prepared(b"s", [b'{"n": %d}' % n, b"v"])
            assert result.status == 2, result.error_message  # TUPLES_OK
    assert parses.count(SQL.decode()) == 1, parses


def test_the_columns_found_are_the_same_each_time(parses: list[str]) -> None:
    sql = SQL.decode()
    found = pgtypes.parameter_columns(sql, [114, 1043])
    first = pgtypes.kept_columns(found, [114, 1043])
    assert first == {0: "json", 1: "varchar"}
    assert pgtypes.kept_columns(found, [114, 25]) == {0: "json"}
    assert pgtypes.kept_columns(found, [114, 1043]) == first
    assert pgtypes.declared_columns(sql, [114, 1043]) == first
    assert parses == [sql, sql]


def test_no_memo_keeps_the_text_of_a_closed_statement(
    served: tuple[PgServer, StandIn], parses: list[str]
) -> None:
    """The parse is the prepared statement's own: a memo keyed on the text kept up to 256
    texts (however long) after their statements were closed."""
    server, _ = served
    text = SQL + b" WHERE '" + b"x" * 1000 + b"' <> 'y'"
    with connect(server, autocommit=True) as conn:
        pgconn = conn.pgconn
        prepared = pgconn.prepare(b"s", text, [114, 1043])
        assert prepared.status == 1, prepared.error_message  # COMMAND_OK
        result = pgconn.exec_prepared(b"s", [b"{}", b"v"])
        assert result.status == 2, result.error_message  # TUPLES_OK
        closed = pgconn.exec_(b"DEALLOCATE s")  # libpq's close_prepared holds the GIL
        assert closed.status == 1, closed.error_message
    memos = {
        name: memo.cache_info().currsize
        for name, memo in vars(pgtypes).items()
        if hasattr(memo, "cache_info") and name != "_nested"  # keyed on a column type
    }
    assert not any(memos.values()), memos
