"""The SQL ``timeshard serve`` speaks: statements parsed into plain values.

The forms follow Materialize's where it has one:

* ``CREATE SOURCE``, ``CREATE MATERIALIZED VIEW`` and ``CREATE SINK``: their
  forms and options are in :mod:`timeshard.server.ddl`;
* ``DROP {SOURCE | MATERIALIZED VIEW | SINK} [IF EXISTS] name [CASCADE | RESTRICT]``;
* ``SHOW {SOURCES | MATERIALIZED VIEWS | SINKS | OBJECTS}``,
  ``SHOW CREATE {SOURCE | MATERIALIZED VIEW | SINK} name``;
* ``EXPLAIN [MATERIALIZED VIEW] name``: the view's maintenance path, and why;
* a query (``SELECT``, ``WITH``, ``VALUES``, ``TABLE``) with an optional
  ``AS OF t`` at its top level: at its end (Materialize's place) or before
  its ORDER BY or LIMIT;
* ``SUBSCRIBE [TO] name [AS OF t] [UP TO t]``, bare or as
  ``COPY (SUBSCRIBE ...) TO STDOUT``;
* ``DECLARE name [NO SCROLL] CURSOR [WITHOUT HOLD] FOR {query | SUBSCRIBE ...}``,
  ``FETCH [FORWARD] [count | ALL | NEXT] [FROM | IN] name [WITH (TIMEOUT [=] t)]``
  (``BACKWARD``, ``PRIOR``, a negative count, and PostgreSQL's ``FIRST``, ``LAST``,
  ``ABSOLUTE [-]n`` and ``RELATIVE [-]n`` are read too: a cursor scans forward only,
  and the server answers those of them that move forward)
  (``t`` a duration such as ``'1s'``, ``'500ms'`` or ``'0s'``, or a number of
  seconds; no count is a count of 1) and ``CLOSE {name | ALL}``: cursors, as
  Materialize has them; the server's session keeps them, the engine never
  sees these three;
* ``ALTER SYSTEM PROMOTE``: a read-only server becomes a writer;
* ``DEALLOCATE [PREPARE] {name | ALL}`` (drivers send it for the statements
  they prepared);
* ``SET [SESSION | LOCAL] statement_timeout {TO | =} {value | DEFAULT}``,
  ``RESET {statement_timeout | ALL}``, ``SHOW statement_timeout``: the
  session's statement timeout (:class:`Setting`; ``DISCARD ALL`` resets it);
* ``BEGIN``, ``START TRANSACTION``, ``COMMIT``, ``ROLLBACK``, any other ``SET``
  or ``RESET``, and ``DISCARD``, accepted and ignored (drivers send them; every
  statement takes effect at once).

Names are PostgreSQL identifiers, and options ``(name words [=] value, ...)``,
as :mod:`timeshard.server.sql_tokens` reads them. Parameters ``$1``, ``$2``, ...
may stand for any literal; :func:`bind` replaces them with literal tokens
before parsing, typed by what the client sent, so a value never becomes SQL
text by concatenation.

The tokens come from sqlglot's PostgreSQL tokenizer, read by
:class:`~timeshard.server.sql_tokens.TokenReader`; the grammar above is
parsed here and in :mod:`timeshard.server.ddl`, by hand, because no parser
knows it; queries are left to sqlglot. Every statement's value, and
:class:`SqlError`, can be imported from here. Pure Python, no Spark.
"""

from __future__ import annotations

import decimal
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import TokenType

from timeshard.errors import InvalidUsage
from timeshard.server.ddl import (
    COLUMN_TYPES,
    GENERATORS,
    KAFKA_FORMATS,
    KAFKA_METADATA,
    SINK_OPTIONS,
    SOURCE_NEEDS,
    SOURCE_OPTIONS,
    CreateSink,
    CreateSource,
    CreateView,
    create_sink,
    create_source,
    create_view,
)
from timeshard.server.dialect import DIALECT
from timeshard.server.intervals import interval_fields, interval_literal
from timeshard.server.sql_tokens import SqlError, TokenReader, tokenize


@dataclass(frozen=True)
class Drop:
    kind: str  # "source" | "view"
    name: str
    if_exists: bool = False
    cascade: bool = False


@dataclass(frozen=True)
class Show:
    what: str  # "sources" | "views" | "sinks" | "objects"


@dataclass(frozen=True)
class ShowCreate:
    kind: str
    name: str


@dataclass(frozen=True)
class Explain:
    name: str


@dataclass(eq=False)
class TypedAs:
    """A query as its prepared statement's Describe ran it (its parameters bound to
    placeholders), whose column types a query's rows are sent as where they differ
    (:attr:`Query.typed_as`), and the Spark SQL it resolves to, once it has: one per
    prepared statement, kept with it and gone with it, so the Binds of a statement
    resolve it once."""

    query: str  # PostgreSQL text of the query, without its AS OF
    spark_sql: str | None = None


@dataclass(frozen=True)
class Query:
    query: str  # PostgreSQL text of the query, without its AS OF
    as_of: int | None = None
    #: the query as its prepared statement's Describe ran it (:class:`TypedAs`): a
    #: year-month interval parameter makes ``DATE + $1`` a DATE, a day-time one (the
    #: placeholder's) a TIMESTAMP. None: the query's own types.
    typed_as: TypedAs | None = None


@dataclass(frozen=True)
class Subscribe:
    name: str
    as_of: int | None = None
    up_to: int | None = None


@dataclass(frozen=True)
class Ignored:
    tag: str  # the command tag to answer with


@dataclass(frozen=True)
class Deallocate:
    """``DEALLOCATE [PREPARE] {name | ALL}``: forget prepared statements (None: all)."""

    name: str | None


@dataclass(frozen=True)
class Declare:
    """``DECLARE name CURSOR FOR statement``: ``statement``'s rows, to FETCH a few at a time."""

    name: str
    statement: Query | Subscribe


@dataclass(frozen=True)
class Fetch:
    """``FETCH [count | ALL] name [WITH (TIMEOUT = t)]``, and PostgreSQL's positioned
    forms ``FIRST``, ``LAST``, ``ABSOLUTE n`` and ``RELATIVE n``.

    ``count`` None is ALL; ``timeout_s`` None waits for a SUBSCRIBE cursor's
    first row as long as it takes, 0 takes only the rows that are ready.
    ``position`` says how ``count`` is read: ``"forward"`` rows to take,
    ``"absolute"`` the number of the one row to take (``FIRST`` is 1, a negative one
    counts from the end), ``"relative"`` how far past the current row that row is
    (0: the current row, negative: before it), ``"last"`` the last row (no count).
    """

    name: str
    count: int | None = 1
    timeout_s: float | None = None
    #: ``BACKWARD``, ``PRIOR`` or a negative count: a cursor only scans forward, as a
    #: PostgreSQL ``NO SCROLL`` one (55000 once the cursor is found)
    backward: bool = False
    position: str = "forward"


@dataclass(frozen=True)
class CloseCursor:
    """``CLOSE {name | ALL}`` (None: every cursor of the session)."""

    name: str | None


@dataclass(frozen=True)
class Setting:
    """``SET [SESSION | LOCAL] statement_timeout {TO | =} {value | DEFAULT}``, ``RESET
    statement_timeout`` and ``RESET ALL``: the session's statement timeout in
    milliseconds (0: none; None: the default, none). ``local``: until the
    transaction block ends."""

    name: str
    value_ms: int | None
    local: bool = False
    tag: str = "SET"


@dataclass(frozen=True)
class ShowSetting:
    """``SHOW statement_timeout``."""

    name: str


@dataclass(frozen=True)
class Promote:
    """``ALTER SYSTEM PROMOTE``: a read-only server takes over as the writer."""


@dataclass(frozen=True)
class Empty:
    pass


Statement = (
    CreateSource
    | CreateView
    | CreateSink
    | Drop
    | Show
    | ShowCreate
    | Explain
    | Query
    | Subscribe
    | Ignored
    | Deallocate
    | Declare
    | Fetch
    | CloseCursor
    | Promote
    | Setting
    | ShowSetting
)

#: The settings a session keeps (``SET``, ``SHOW``, ``RESET``); every other SET is accepted
#: and ignored, as drivers send them (``extra_float_digits``, ``application_name``, ...).
STATEMENT_TIMEOUT = "statement_timeout"
#: The most milliseconds PostgreSQL's statement_timeout takes (an int4).
_MAX_TIMEOUT_MS = 2_147_483_647
#: The units of a time setting in milliseconds, as PostgreSQL reads them.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME_SETTING = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.ASCII)


# -- splitting and binding --------------------------------------------------------------------


def split(sql: str) -> list[str]:
    """The statements of ``sql``, split at its top-level semicolons; empty ones dropped."""
    tokens = tokenize(sql)
    out: list[str] = []
    start = 0
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            out.append(sql[start : t.start])
            start = t.end + 1
    out.append(sql[start:])
    return [s.strip() for s in out if tokenize(s)]


@dataclass(frozen=True)
class Param:
    """A bound parameter's value, as the client sent it in text, and its type's OID."""

    text: str | None
    oid: int = 0


#: The SQL type a parameter of each of these OIDs is cast to: its value has the type the
#: client declared, whatever its digits (``5`` as int8 is a BIGINT, ``1.5`` as float8 a
#: DOUBLE, not the INT and DECIMAL Spark makes of the bare literals), and Describe
#: answers the types Execute does. numeric's is the DECIMAL its digits need.
_CAST_TYPES = {
    16: "BOOLEAN",
    17: "BINARY",
    20: "BIGINT",
    21: "SMALLINT",
    23: "INTEGER",
    25: "TEXT",
    26: "BIGINT",
    700: "REAL",
    701: "DOUBLE PRECISION",
    1082: "DATE",
    1114: "TIMESTAMP_NTZ",
    1184: "TIMESTAMPTZ",  # Spark's TIMESTAMP; a bare TIMESTAMP is PostgreSQL's, without zone
    1186: "INTERVAL DAY TO SECOND",
}
#: date, timestamp and timestamptz: sent as text, bound as a cast of it to Spark's type.
_TIME_OIDS = {1082, 1114, 1184}
_INTEGER_OIDS = {20, 21, 23, 26}
_FLOAT_OIDS = {700, 701}
_NUMERIC_OID = 1700
_BYTEA_OID = 17
#: interval: a Spark year-month or day-time interval (:mod:`timeshard.server.intervals`);
#: its NULL, and its placeholder, a day-time one.
_INTERVAL_OID = 1186
#: json and jsonb: Spark has no JSON type (its VARIANT compares with no string), so their
#: values are strings, checked as PostgreSQL checks them.
_JSON_OIDS = {114, 3802}
#: Spark's DECIMAL holds at most 38 digits.
MAX_DECIMAL_DIGITS = 38
#: The significant decimal digits a DOUBLE keeps whatever they are (IEEE 754 binary64).
_DOUBLE_DIGITS = 15
#: The special values PostgreSQL's float input takes (case ignored), as Spark casts them.
_FLOAT_SPECIALS = {
    "nan": "NaN",
    "infinity": "Infinity",
    "+infinity": "Infinity",
    "inf": "Infinity",
    "+inf": "Infinity",
    "-infinity": "-Infinity",
    "-inf": "-Infinity",
}


def placeholder(oid: int) -> Param:
    """A parameter of type ``oid`` that stands for any value of it where a statement is
    described before it is bound: it binds to a literal of the type every value binds
    to (a number's digits do not decide its type, a NULL's neither)."""
    if oid == 16:
        return Param("f", oid)
    if oid in _INTEGER_OIDS or oid in _FLOAT_OIDS or oid == _NUMERIC_OID:
        return Param("0", oid)
    if oid in _TIME_OIDS or oid == _INTERVAL_OID:
        return Param(None, oid)
    # A string: "0" is JSON (``$1::json`` resolves) and an integer's text (``$1::int``
    # and ``$1 + 2`` resolve: the rewrites check a constant's text as PostgreSQL's
    # integer input reads it).
    return Param("0", oid)


#: The types of a parameter PostgreSQL reads as a string where the statement casts it:
#: undeclared (``unknown``), text, bpchar, varchar.
_STRING_OIDS = {0, 25, 1042, 1043}


def interval_parameters(sql: str) -> frozenset[int]:
    """The numbers of the parameters ``sql`` casts to interval themselves (``$1::interval``,
    ``CAST(($2) AS interval)``): PostgreSQL infers interval for such a parameter left
    undeclared, and a string bound there is read as an interval. Not Spark's ``TRY_CAST``
    (no PostgreSQL form), whose string stays a string, NULL where it is no interval (as
    a ``TRY_CAST`` of a literal is: ``engine._interval_casts``). None if ``sql`` does not
    parse (a statement that is not a query: it is told once bound). Parses ``sql`` only if
    it names ``interval``."""
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    if "interval" not in sql.lower():
        return frozenset()
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except (SqlglotError, RecursionError):  # no query, or nested past the stack
        return frozenset()
    found = set()
    for cast in tree.find_all(exp.Cast) if tree is not None else ():
        if isinstance(cast, exp.TryCast):  # Spark's: text that is no interval is NULL there
            continue
        value = cast.this.unnest()
        plain = cast.to.this == exp.DataType.Type.INTERVAL and not cast.to.expressions
        if plain and isinstance(value, exp.Parameter) and value.this.is_int:
            found.add(int(value.this.this))
    return frozenset(found)


def described_oid(oid: int, number: int, intervals: frozenset[int]) -> int:
    """The type parameter ``number`` (declared ``oid``) is described as and stands as in a
    Describe: interval (1186) if a string one is cast to interval itself (``intervals``,
    :func:`interval_parameters`), as PostgreSQL infers an undeclared one and casts a
    string one there; else ``oid``."""
    return _INTERVAL_OID if number in intervals and oid in _STRING_OIDS else oid


def bind(sql: str, params: list[Param]) -> str:
    """``sql`` with ``$n`` replaced by the n-th parameter as a literal.

    A parameter of a numeric, boolean, time, interval, bytea or text type OID becomes a
    value of that type (a cast of its literal: :func:`_literal`), NULL a NULL of it,
    anything else a string literal written by sqlglot (quotes doubled), so
    no value becomes SQL syntax. An untyped parameter (OID 0,
    PostgreSQL's ``unknown``, what psycopg sends for a ``str``) is a string
    literal however it reads: ``'007'`` stays ``'007'``, as PostgreSQL keeps
    it.
    """
    tokens = tokenize(sql)
    out: list[str] = []
    pos = 0
    i = 0
    while i < len(tokens):
        t = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if t.token_type == TokenType.PARAMETER and nxt and nxt.token_type == TokenType.NUMBER:
            n = int(nxt.text)
            if not 1 <= n <= len(params):
                raise SqlError(f"there is no parameter ${n} ({len(params)} given)", "08P01")
            out.append(sql[pos : t.start])
            out.append(_literal(params[n - 1]))
            pos = nxt.end + 1
            i += 2
            continue
        i += 1
    out.append(sql[pos:])
    return "".join(out)


def parameter_count(sql: str) -> int:
    """The highest ``$n`` of ``sql`` (0 if none), as PostgreSQL counts a statement's
    parameters: one used twice is one, and a ``$`` in a string, a name or a comment
    is none."""
    tokens = tokenize(sql)
    return max(
        (
            int(nxt.text)
            for t, nxt in itertools.pairwise(tokens)
            if t.token_type == TokenType.PARAMETER
            and nxt.token_type == TokenType.NUMBER
            and nxt.text.isdigit()
        ),
        default=0,
    )


_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
_TRUE, _FALSE = ("t", "true", "1", "on", "yes", "y"), ("f", "false", "0", "off", "no", "n")


def _literal(param: Param) -> str:
    """A parameter as one SQL expression of its declared type (:data:`_CAST_TYPES`): a
    cast of a literal, so no value becomes SQL syntax and ``1-$1`` with ``-5`` never
    becomes the comment ``1--5``. A float4 or float8 may be ``NaN`` or infinite, as
    PostgreSQL takes them; an integer or numeric may not (Spark's have no such value).
    An untyped parameter (OID 0) is a string literal, and its NULL a bare NULL, as
    PostgreSQL's ``unknown``; a date, timestamp or timestamptz one a cast of its string
    literal (its NULL a NULL of its type); an interval one a Spark interval literal
    written from the numbers its text reads as (:mod:`timeshard.server.intervals`); a
    parameter of another type is a string literal (its NULL a text NULL)."""
    oid = param.oid
    if param.text is None:
        if oid == _NUMERIC_OID:
            return f"CAST(NULL AS DECIMAL({MAX_DECIMAL_DIGITS}, 0))"
        if oid == 0:
            return "NULL"
        return f"CAST(NULL AS {_CAST_TYPES.get(oid, 'TEXT')})"  # another type's value is text
    text = param.text.strip()
    if oid in _FLOAT_OIDS:
        special = _FLOAT_SPECIALS.get(text.lower())
        if special is not None:  # no literal spells them: a string, cast
            return f"CAST('{special}' AS {_CAST_TYPES[oid]})"
    if oid in _INTEGER_OIDS and not _INTEGER.fullmatch(text):  # a cast would truncate 1.5
        raise SqlError(f"parameter {param.text!r} is not an integer", "22P02")
    if oid in _INTEGER_OIDS or oid in _FLOAT_OIDS:
        if not _NUMBER.fullmatch(text):
            raise SqlError(f"parameter {param.text!r} is not a number", "22P02")
        return f"CAST({text.lstrip('+')} AS {_CAST_TYPES[oid]})"
    if oid == _NUMERIC_OID:
        return _numeric_literal(param.text, text)
    if oid == 16:
        if text.lower() not in (*_TRUE, *_FALSE):
            raise SqlError(f"parameter {param.text!r} is not a boolean", "22P02")
        return "TRUE" if text.lower() in _TRUE else "FALSE"
    if oid == _BYTEA_OID:
        return _bytea_literal(param.text)
    if oid == _INTERVAL_OID:  # written from the numbers read, never the client's text
        return interval_literal(*interval_fields(param.text), shown=param.text)
    if oid in _JSON_OIDS:
        check_json(param.text)
    literal = sqlglot.exp.Literal.string(param.text).sql("postgres")
    return f"CAST({literal} AS {_CAST_TYPES[oid]})" if oid in _TIME_OIDS else literal


def check_json(text: str) -> None:
    """SqlError 22P02 (its text cut to 100 characters) unless ``text`` is JSON as PostgreSQL's
    json reads it: ``NaN`` and ``Infinity``, which Python's decoder takes, are not, and
    nesting past Python's recursion limit is refused too."""
    try:
        json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        shown = repr(text) if len(text) <= 100 else repr(text[:100]) + "..."
        raise SqlError(f"invalid input syntax for type json: {shown}", "22P02") from None


def _not_json(constant: str) -> Any:
    """Refuse ``NaN``, ``Infinity`` and ``-Infinity``, which PostgreSQL's json refuses."""
    raise ValueError(f"{constant} is not JSON")


_HEX_PAIRS = re.compile(r"(?:[0-9a-fA-F]{2}|[ \t\n\r])*", re.ASCII)
_BYTEA_ESCAPE = re.compile(r"\\(?:\\|[0-3][0-7]{2})|[^\\]")


def _bytea_literal(sent: str) -> str:
    """A bytea parameter's text as Spark's binary literal ``X'...'`` of its bytes: the hex
    format (``\\x`` and pairs of hex digits, whitespace between pairs skipped) or the
    escape format (``\\\\`` a backslash, ``\\ooo`` an octal byte, any other character its
    UTF-8 bytes), as PostgreSQL reads them; anything else is SqlError 22P02. The literal
    holds only hex digits the server wrote, never the client's text."""
    if sent[:2] in ("\\x", "\\X"):
        if not _HEX_PAIRS.fullmatch(sent, 2):
            raise SqlError(f"invalid hexadecimal bytea parameter {sent!r}", "22P02")
        return f"X'{bytes.fromhex(''.join(sent[2:].split())).hex().upper()}'"
    data = bytearray()
    pos = 0
    while pos < len(sent):
        match = _BYTEA_ESCAPE.match(sent, pos)
        if match is None:
            raise SqlError(f"invalid input syntax for type bytea: {sent!r}", "22P02")
        piece = match.group()
        if piece == "\\\\":
            data += b"\\"
        elif piece.startswith("\\"):
            data.append(int(piece[1:], 8))
        else:
            data += piece.encode("utf-8")
        pos = match.end()
    return f"X'{data.hex().upper()}'"


def _numeric_literal(sent: str, text: str) -> str:
    """A numeric parameter as the DECIMAL of exactly its digits and scale (``1e3`` is
    ``1000``, a DECIMAL(4, 0)); past Spark's 38 digits, a DOUBLE if its significant
    digits are few enough that the DOUBLE is the number as written (``1.5E+40``), else
    SqlError 22003 (no Spark type holds it)."""
    if not _NUMBER.fullmatch(text):
        raise SqlError(f"parameter {sent!r} is not a number", "22P02")
    number = decimal.Decimal(text)
    precision, scale = decimal_digits(number)
    if precision > MAX_DECIMAL_DIGITS:  # no DECIMAL holds it
        significant = len("".join(map(str, number.as_tuple().digits)).strip("0"))
        if significant > _DOUBLE_DIGITS:  # nor a DOUBLE: refused, never rounded
            raise SqlError(
                f"numeric parameter {sent!r} needs {precision} digits and has {significant} "
                f"significant ones: Spark's DECIMAL holds {MAX_DECIMAL_DIGITS} digits, its "
                f"DOUBLE {_DOUBLE_DIGITS} significant ones",
                "22003",
            )
        return f"CAST('{number}' AS DOUBLE)"
    return f"CAST({number:f} AS DECIMAL({precision}, {scale}))"


def numeric_text(text: str) -> decimal.Decimal | None:
    """The finite number ``text`` is as PostgreSQL's numeric input reads it (whitespace
    around it taken), digits and scale as written (``' 1.50'`` is ``1.50``); None if it is
    none (``NaN`` and ``Infinity`` among them: Spark's DECIMAL has neither)."""
    text = text.strip()
    return decimal.Decimal(text) if _NUMBER.fullmatch(text) else None


def decimal_digits(number: decimal.Decimal) -> tuple[int, int]:
    """The precision and scale of the DECIMAL that holds the finite ``number`` exactly, as
    written: ``1.50`` is (3, 2), ``1e3`` (4, 0), ``0.001`` (3, 3), ``0`` (1, 0)."""
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int), number  # no NaN nor infinity
    scale = max(0, -exponent)
    return max(1, max(0, len(digits) + exponent) + scale), scale


# -- parsing ---------------------------------------------------------------------------------


def parse(sql: str) -> Statement | Empty:
    """One statement (see the module doc); a :class:`SqlError` says what is wrong."""
    tokens = tokenize(sql)
    if not tokens:
        return Empty()
    p = _Parser(sql, tokens)
    return p.statement()


class _Parser(TokenReader):
    """Reads one statement; the rest of a CREATE is read by :mod:`timeshard.server.ddl`."""

    def statement(self) -> Statement:
        first = self.word()
        if first == "CREATE":
            self.i += 1
            if self.accept("SOURCE"):
                return create_source(self)
            if self.accept("MATERIALIZED", "VIEW"):
                return create_view(self)
            if self.accept("SINK"):
                return create_sink(self)
            what = self.word() or (self.peek().text if self.peek() else "")  # type: ignore[union-attr]
            raise SqlError(
                f"CREATE {what} is not supported: only CREATE SOURCE, CREATE MATERIALIZED "
                "VIEW and CREATE SINK are",
                "0A000",
            )
        if first == "DROP":
            self.i += 1
            return self.drop()
        if first == "SHOW":
            self.i += 1
            if self.accept(STATEMENT_TIMEOUT.upper()):
                self.end()
                return ShowSetting(STATEMENT_TIMEOUT)
            return self.show()
        if first == "EXPLAIN":
            self.i += 1
            self.accept("MATERIALIZED", "VIEW") or self.accept("VIEW")
            name = self.name()
            self.end()
            return Explain(name)
        if first == "SUBSCRIBE":
            self.i += 1
            return self.subscribe()
        if first == "COPY":
            self.i += 1
            nxt = self.peek()
            if nxt is None or nxt.token_type != TokenType.L_PAREN:
                raise SqlError(
                    "COPY supports only (SUBSCRIBE ...) TO STDOUT: a table's COPY (FROM STDIN "
                    "among them) is not supported; `timeshard copy` loads files into a shard",
                    "0A000",
                )
            self.expect_punct(TokenType.L_PAREN, "(")
            if not self.accept("SUBSCRIBE"):
                raise SqlError("COPY supports only (SUBSCRIBE ...) TO STDOUT", "0A000")
            sub = self.subscribe(inner=True)
            self.expect_punct(TokenType.R_PAREN, ")")
            self.expect("TO", "STDOUT")
            self.end()
            return sub
        if first in ("SELECT", "WITH", "VALUES", "TABLE"):
            return self.query()
        if first == "DECLARE":
            self.i += 1
            return self.declare()
        if first == "FETCH":
            self.i += 1
            return self.fetch()
        if first == "CLOSE":
            self.i += 1
            which = None if self.accept("ALL") else self.ident()
            self.end()
            return CloseCursor(which)
        if first == "ALTER":
            self.i += 1
            if not self.accept("SYSTEM"):
                what = self.word() or self.rest()[:20]
                raise SqlError(
                    f"ALTER {what} is not supported: only ALTER SYSTEM PROMOTE is", "0A000"
                )
            self.expect("PROMOTE")
            self.end()
            return Promote()
        if first == "DEALLOCATE":
            self.i += 1
            self.accept("PREPARE")
            which = None if self.accept("ALL") else self.ident()
            self.end()
            return Deallocate(which)
        if first in ("SET", "RESET"):
            self.i += 1
            return self.setting(first)
        if first == "DISCARD" and self.word(1) == "ALL" and len(self.tokens) == 2:
            return Setting("all", None, tag="DISCARD ALL")
        if first in ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "DISCARD"):
            tags = {"START": "START TRANSACTION", "END": "COMMIT", "ABORT": "ROLLBACK"}
            return Ignored(tags.get(first, first))
        raise SqlError(f"statement {first or self.tokens[0].text!r} is not supported", "0A000")

    def setting(self, verb: str) -> Setting | Ignored:
        """The rest of a SET or RESET: a :class:`Setting` of statement_timeout (RESET ALL
        resets it), else :class:`Ignored`."""
        if verb == "RESET":
            which = "all" if self.accept("ALL") else (self.word() or "").lower()
            if which not in ("all", STATEMENT_TIMEOUT):
                return Ignored("RESET")
            self.i += 1 if which == STATEMENT_TIMEOUT else 0
            self.end()
            return Setting(which, None, tag="RESET")
        local = self.accept("LOCAL")
        if not local:
            self.accept("SESSION")
        if (self.word() or "").lower() != STATEMENT_TIMEOUT:
            return Ignored("SET")
        self.i += 1
        if not (self.accept("TO") or self.punct(TokenType.EQ)):
            raise self.error("expected TO or =")
        if self.accept("DEFAULT"):
            self.end()
            return Setting(STATEMENT_TIMEOUT, None, local)
        value = self.value()
        self.end()
        return Setting(STATEMENT_TIMEOUT, timeout_ms(value), local)

    def drop(self) -> Drop:
        if self.accept("SOURCE"):
            kind = "source"
        elif self.accept("SINK"):
            kind = "sink"
        elif self.accept("MATERIALIZED", "VIEW") or self.accept("VIEW"):
            kind = "view"
        else:
            raise self.error("expected SOURCE, SINK or MATERIALIZED VIEW")
        if_exists = self.accept("IF", "EXISTS")
        name = self.name()
        cascade = self.accept("CASCADE")
        if not cascade:
            self.accept("RESTRICT")
        self.end()
        return Drop(kind, name, if_exists, cascade)

    def show(self) -> Show | ShowCreate:
        if self.accept("CREATE"):
            if self.accept("SOURCE"):
                kind = "source"
            elif self.accept("SINK"):
                kind = "sink"
            elif self.accept("MATERIALIZED", "VIEW") or self.accept("VIEW"):
                kind = "view"
            else:
                raise self.error("expected SOURCE, SINK or MATERIALIZED VIEW")
            name = self.name()
            self.end()
            return ShowCreate(kind, name)
        for words, what in (
            (("SOURCES",), "sources"),
            (("MATERIALIZED", "VIEWS"), "views"),
            (("VIEWS",), "views"),
            (("SINKS",), "sinks"),
            (("OBJECTS",), "objects"),
        ):
            if self.accept(*words):
                self.end()
                return Show(what)
        what = self.word() or ""
        raise SqlError(
            f"SHOW {what} is not supported: SHOW supports SOURCES, MATERIALIZED VIEWS, SINKS, "
            "OBJECTS and CREATE ...",
            "0A000",
        )

    def declare(self) -> Declare:
        name = self.ident()
        self.accept("NO", "SCROLL")
        self.expect("CURSOR")
        if self.accept("WITH", "HOLD"):
            raise SqlError(
                "WITH HOLD cursors are not supported: a cursor ends with its transaction", "0A000"
            )
        self.accept("WITHOUT", "HOLD")
        self.expect("FOR")
        if self.word() not in ("SUBSCRIBE", "SELECT", "WITH", "VALUES", "TABLE"):
            raise self.error("a cursor is FOR a query (SELECT ...) or a SUBSCRIBE")
        inner = parse(self.rest())
        assert isinstance(inner, Query | Subscribe), inner
        return Declare(name, inner)

    def fetch(self) -> Fetch:
        position = "forward"
        backward = self.accept("BACKWARD") or self.accept("PRIOR")
        directed = backward or self.accept("FORWARD")
        count: int | None = 1
        if self.positioned() and not directed:
            word = self.word()
            assert word is not None
            self.i += 1
            if word == "LAST":
                position, count = "last", None
            elif word == "FIRST":
                position, count = "absolute", 1
            else:
                position = word.lower()
                negative = self.punct(TokenType.DASH)
                if not negative:
                    self.punct(TokenType.PLUS)  # PostgreSQL's SignedIconst takes a +
                count = self.whole(f"a FETCH {word} count")
                count = -count if negative else count
        elif self.accept("ALL"):
            count = None
        elif not backward and self.accept("NEXT"):
            count = 1
        elif self.punct(TokenType.DASH):  # a negative count: the other way
            backward = not backward
            count = self.whole("a FETCH count")
        elif self.punct(TokenType.PLUS) or self.at_number():
            count = self.whole("a FETCH count")
        if not self.accept("FROM"):
            self.accept("IN")
        name = self.ident()
        timeout_s = None
        if self.accept("WITH"):
            options = self.options()
            timeout_s = _seconds(options.pop("timeout", None))
            if options:
                raise SqlError(
                    f"unknown FETCH options {sorted(options)}: it takes TIMEOUT", "22023"
                )
        self.end()
        return Fetch(name, count, timeout_s, backward, position)

    def positioned(self) -> bool:
        """Whether the word ahead is FETCH's direction FIRST, LAST, ABSOLUTE or RELATIVE,
        not a cursor of that name (``FETCH last WITH (TIMEOUT = 1)``): FIRST and LAST
        before FROM or IN, or before a name that ends the statement or comes before
        WITH; ABSOLUTE and RELATIVE before a number or its sign (``-``, ``+``)."""
        word = self.word()
        if word in ("FIRST", "LAST"):
            if self.word(1) in ("FROM", "IN"):
                return True
            following = self.peek(1)
            named = following is not None and (
                following.token_type == TokenType.IDENTIFIER or self.word(1) not in (None, "WITH")
            )
            return named and (self.peek(2) is None or self.word(2) == "WITH")
        if word in ("ABSOLUTE", "RELATIVE"):
            following = self.peek(1)
            return following is not None and (
                following.token_type in (TokenType.DASH, TokenType.PLUS)
                or self.at_number(self.i + 1)
            )
        return False

    def subscribe(self, inner: bool = False) -> Subscribe:
        self.accept("TO")
        name = self.name()
        as_of = up_to = None
        if self.accept("AS", "OF"):
            as_of = self.time()
        if self.accept("UP", "TO"):
            up_to = self.time()
        if not inner:
            self.end()
        return Subscribe(name, as_of, up_to)

    def query(self) -> Query:
        """A query, and its top-level ``AS OF t`` if it has one: at its end, as
        Materialize has it, or just before its ORDER BY, LIMIT or OFFSET."""
        depth = 0
        cut = None
        for k, t in enumerate(self.tokens):
            if t.token_type == TokenType.L_PAREN:
                depth += 1
            elif t.token_type == TokenType.R_PAREN:
                depth -= 1
            elif depth == 0 and t.token_type != TokenType.IDENTIFIER and t.text.upper() == "AS":
                following = self.tokens[k + 1 : k + 2]
                if (
                    len(following) == 1
                    and following[0].token_type != TokenType.IDENTIFIER
                    and following[0].text.upper() == "OF"
                    and self.at_number(k + 2)  # else ``AS of``: an alias
                ):
                    if cut is not None:
                        raise SqlError("AS OF is given twice")
                    cut = k
        if cut is None:
            return Query(self.sql.strip())
        self.i = cut + 2
        as_of = self.time()
        if not self.at_end() and (self.word() or "").split()[0:1] not in (
            ["ORDER"],
            ["LIMIT"],
            ["OFFSET"],
            ["FETCH"],
        ):
            raise self.error("AS OF goes at the end of the query, or before ORDER BY or LIMIT")
        before = self.sql[: self.tokens[cut].start]
        after = self.sql[self.tokens[self.i - 1].end + 1 :]
        # A newline, not a space: a line comment before AS OF must not swallow ORDER BY.
        return Query(f"{before.rstrip()}\n{after.lstrip()}".strip(), as_of)


def timeout_ms(value: Any) -> int:
    """A statement_timeout in milliseconds, as PostgreSQL reads it: a number of
    milliseconds, or a string of one and a unit (``'5s'``, ``'100ms'``, ``'1min'``,
    ``'1h'``, ``'1d'``, ``'500us'``), rounded to the millisecond (at least 1 unless 0);
    SqlError 22023 if it is none or out of 0 .. 2147483647."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SqlError(f'invalid value for parameter "{STATEMENT_TIMEOUT}": {value!r}', "22023")
    if isinstance(value, str):
        match = _TIME_SETTING.fullmatch(value)
        factor = _TIME_UNITS_MS.get(match[2] or "ms") if match is not None else None
        if match is None or factor is None:
            raise SqlError(
                f'invalid value for parameter "{STATEMENT_TIMEOUT}": {value!r} (a number of '
                f"milliseconds, or one and a unit of {list(_TIME_UNITS_MS)})",
                "22023",
            )
        number = float(match[1]) * factor
    else:
        number = float(value)
    ms = int(decimal.Decimal(number).quantize(decimal.Decimal(1), decimal.ROUND_HALF_EVEN))
    if ms == 0 and number > 0:  # a timeout asked for is never none
        ms = 1
    if not 0 <= ms <= _MAX_TIMEOUT_MS:
        raise SqlError(
            f'{value!r} is outside the valid range for parameter "{STATEMENT_TIMEOUT}" '
            f"(0 .. {_MAX_TIMEOUT_MS})",
            "22023",
        )
    return ms


def show_timeout(ms: int) -> str:
    """A statement_timeout as PostgreSQL's SHOW writes it: ``0``, or in the largest unit
    of ms, s, min, h and d that divides it (``1500ms``, ``5s``, ``1min``)."""
    if ms == 0:
        return "0"
    unit = next(u for u in ("d", "h", "min", "s", "ms") if ms % _TIME_UNITS_MS[u] == 0)
    return f"{ms // int(_TIME_UNITS_MS[unit])}{unit}"


def _seconds(value: Any) -> float | None:
    """A FETCH TIMEOUT in seconds: a duration (``'1s'``, ``'500ms'``) or a number of seconds."""
    from timeshard.spec import parse_duration

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SqlError(f"TIMEOUT is a duration such as '1s', got {value!r}", "22023")
    if isinstance(value, str):
        try:
            seconds = parse_duration(value.replace(" ", "")) / 1000
        except InvalidUsage:
            raise SqlError(
                f"TIMEOUT is a duration such as '1s' or '500ms', got {value!r}", "22023"
            ) from None
    else:
        seconds = float(value)
    if seconds < 0:
        raise SqlError(f"TIMEOUT must not be negative, got {value!r}", "22023")
    return seconds


__all__ = [
    "COLUMN_TYPES",
    "GENERATORS",
    "KAFKA_FORMATS",
    "KAFKA_METADATA",
    "MAX_DECIMAL_DIGITS",
    "SINK_OPTIONS",
    "SOURCE_NEEDS",
    "SOURCE_OPTIONS",
    "CloseCursor",
    "CreateSink",
    "CreateSource",
    "CreateView",
    "Deallocate",
    "Declare",
    "Drop",
    "Empty",
    "Explain",
    "Fetch",
    "Ignored",
    "Param",
    "Promote",
    "Query",
    "Setting",
    "Show",
    "ShowCreate",
    "ShowSetting",
    "SqlError",
    "Statement",
    "Subscribe",
    "TypedAs",
    "bind",
    "check_json",
    "decimal_digits",
    "described_oid",
    "interval_parameters",
    "numeric_text",
    "parameter_count",
    "parse",
    "placeholder",
    "show_timeout",
    "split",
    "timeout_ms",
]
