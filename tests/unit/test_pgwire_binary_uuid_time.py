"""uuid and time parameters in binary, as psycopg sends them by default, without Spark.

psycopg sends a ``uuid.UUID`` and a ``datetime.time`` in PostgreSQL's binary format;
serve refused them (0A000 "binary parameters of type OID 2950 are not supported"),
so ``WHERE id = %s`` with a UUID failed unless the client asked for text. They are
now read as their text forms (a uuid's canonical one, with dashes; Spark has no
uuid type, so a uuid stays a string, as one sent in text is), and a value of the
wrong length is 22P03, as PostgreSQL answers it.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from psycopg.pq import DiagnosticField
from tests.unit.test_pgwire_cursor import StandIn, connect

from timeshard.server.pgwire import PgServer


@pytest.mark.parametrize(
    "value",
    [
        uuid.UUID("12345678-9abc-def0-1234-56789abcdef0"),  # as PostgreSQL writes a uuid
        datetime.time(1, 2, 3),  # as psycopg writes a time in text: isoformat
        datetime.time(23, 59, 59, 999999),
        datetime.time(0, 0, 0, 5),
    ],
)
def test_a_binary_parameter_binds_as_its_text_form(
    served: tuple[PgServer, StandIn], value: Any
) -> None:
    server, engine = served
    with connect(server, autocommit=True) as conn:
        conn.execute("SELECT %b", [value])
    assert engine.statements[-1].query == f"SELECT '{value}'"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("oid", "value"), [(2950, b"\0" * 15), (1083, b"\0" * 7)])
def test_a_binary_parameter_of_the_wrong_length_is_22p03(
    served: tuple[PgServer, StandIn], oid: int, value: bytes
) -> None:
    server, _ = served
    with connect(server, autocommit=True) as conn:
        result = conn.pgconn.exec_params(b"SELECT $1", [value], [oid], [1])
    assert result.error_field(DiagnosticField.SQLSTATE) == b"22P03", result.error_message
