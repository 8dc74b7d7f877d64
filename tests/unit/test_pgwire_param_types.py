"""Parameters of bytea, json, jsonb and varchar keep their declared type, without Spark.

A bytea parameter was bound as the string of its hex text (``'\\x00ff'``): a query
got a STRING where it compared or stored bytes, and its column was described as
text (OID 25). It is now a BINARY literal (``X'00FF'``) of its bytes, from PostgreSQL's
hex or escape text format or its binary format (psycopg's default for ``bytes``).
json and jsonb, which Spark has no type of, stay strings, checked as PostgreSQL
checks them (22P02 for text that is not JSON); psycopg sends them in binary with
``%b`` (jsonb's with its version byte), which was refused (0A000).
"""

from __future__ import annotations

from typing import Any

import pytest
from psycopg.pq import DiagnosticField
from psycopg.types.json import Json, Jsonb
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server.pgwire import PgServer
from timeshard.server.statements import Param, SqlError, bind, placeholder


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("\\x00ff27", "X'00FF27'"),
        ("\\X00 Ff\n27", "X'00FF27'"),  # whitespace between pairs, as PostgreSQL skips it
        ("\\x", "X''"),
        ("a'\\\\b\\000", "X'61275C6200'"),  # escape format: \\ and \ooo
        ("é", "X'C3A9'"),
        (None, "CAST(NULL AS BINARY)"),
    ],
)
def test_a_bytea_parameter_is_a_binary_literal(text: str | None, want: str) -> None:
    assert bind("SELECT $1", [Param(text, 17)]) == f"SELECT {want}"


@pytest.mark.parametrize("text", ["\\x0", "\\x0g", "a\\b", "\\400", "\\12"])
def test_a_bytea_parameter_that_is_not_bytea_is_22p02(text: str) -> None:
    with pytest.raises(SqlError) as e:
        bind("SELECT $1", [Param(text, 17)])
    assert e.value.sqlstate == "22P02"
    assert repr(text) in str(e.value)


@pytest.mark.parametrize("oid", [114, 3802])
def test_a_json_parameter_is_its_text_checked(oid: int) -> None:
    assert bind("SELECT $1", [Param('{"a": "x\'"}', oid)]) == "SELECT '{\"a\": \"x''\"}'"
    with pytest.raises(SqlError) as e:
        bind("SELECT $1", [Param("{nope", oid)])
    assert e.value.sqlstate == "22P02"
    assert "{nope" in str(e.value)
    assert bind("SELECT $1", [placeholder(oid)]) != ""  # a placeholder binds
    for not_json in ("NaN", "[Infinity]", '{"a": -Infinity}'):  # Python's decoder takes them
        with pytest.raises(SqlError) as e:
            bind("SELECT $1", [Param(not_json, oid)])
        assert e.value.sqlstate == "22P02", not_json


@pytest.mark.parametrize(
    ("sql", "param", "want"),
    [
        ("SELECT %s", b"\x00\xff'", "SELECT X'00FF27'"),  # psycopg's default: binary
        ("SELECT %t", b"\x00\xff'", "SELECT X'00FF27'"),
        ("SELECT %b", Json({"a": 1}), "SELECT '{\"a\": 1}'"),
        ("SELECT %b", Jsonb({"a": 1}), "SELECT '{\"a\": 1}'"),
        ("SELECT %t", Jsonb({"a": 1}), "SELECT '{\"a\": 1}'"),
        ("SELECT %b", "vc", "SELECT 'vc'"),
    ],
)
def test_psycopg_parameters_keep_their_type(
    served: tuple[PgServer, StandIn], sql: str, param: Any, want: str
) -> None:
    server, engine = served
    with connect(server, autocommit=True) as conn:
        conn.execute(sql, [param])
    assert engine.statements[-1].query == want  # type: ignore[attr-defined]


def test_a_binary_jsonb_of_another_version_is_22p03(served: tuple[PgServer, StandIn]) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        result = conn.pgconn.exec_params(b"SELECT $1", [b"\x02{}"], [3802], [1])
    assert result.error_field(DiagnosticField.SQLSTATE) == b"22P03", result.error_message
