"""The SQL dialect ``timeshard serve`` reads: PostgreSQL's, with Spark's functions.

A client writes PostgreSQL's syntax and calls Spark's functions (the query runs
on Spark). sqlglot's PostgreSQL reader gives a few of Spark's function names the
meaning of another dialect, which would run a different function than the one
the client wrote; :class:`ServePostgres` reads them as Spark does:

* ``map(k1, v1, k2, v2, ...)`` is Spark's map of those keys and values
  (PostgreSQL has no ``map``; sqlglot's reader took ``map(k, v)`` for
  ``map_from_arrays(k, v)``, which Spark refuses for keys that are no array,
  and refused more than two arguments). An odd number of arguments stays a
  call of ``map``, for Spark to refuse as it refuses any wrong call.

Every reader of a client's SQL in :mod:`timeshard.server` parses with
:data:`DIALECT`, so a statement means one thing to all of them.

Pure Python, no Spark.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlglot import exp, parser
from sqlglot.dialects.postgres import Postgres
from sqlglot.parsers.postgres import PostgresParser


def _spark_map(args: list[Any]) -> exp.Expr:
    """Spark's ``map(k1, v1, ...)``: a map of its keys and values; a call of ``map`` as
    written when the arguments do not pair up."""
    if len(args) % 2:
        return exp.Anonymous(this="map", expressions=args)
    return parser.build_var_map(args)


class ServePostgres(Postgres):
    """PostgreSQL as ``timeshard serve`` reads it (see the module's docstring)."""

    class Parser(PostgresParser):
        FUNCTIONS: ClassVar[dict[str, Any]] = {**PostgresParser.FUNCTIONS, "MAP": _spark_map}


#: The dialect every reader of a client's SQL parses with.
DIALECT = ServePostgres()

__all__ = ["DIALECT", "ServePostgres"]
