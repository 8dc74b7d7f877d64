"""The SQL ``timeshard serve`` speaks: statements parsed into plain values.

The forms follow Materialize's where it has one:

* ``CREATE SOURCE [IF NOT EXISTS] name [(column type, ...)] FROM`` one of

  - ``LOAD GENERATOR {COUNTER | AUCTION | KEY VALUE | TPCH} [(option value, ...)]``;
  - ``FILE 'path' [(FORMAT json|csv|text|bytes|avro, option value, ...)]``;
  - ``KAFKA (BROKER 'host:port', TOPIC 'topic', option value, ...)
    [FORMAT f | KEY FORMAT f [(column type, ...)] VALUE FORMAT f]
    [INCLUDE {PARTITION | OFFSET | TIMESTAMP | HEADERS}, ...]``: ``f`` is
    JSON, TEXT, BYTES or AVRO; a JSON key's columns follow its KEY FORMAT,
    the JSON value's are the source's columns. The other options are the
    run file's (``GROUP ID``, ``TIMEOUT S``, ``SCHEMA REGISTRY URL``,
    ``VALUE SCHEMA FILE``, ...), but for its ``schemas`` map;
  - ``POSTGRES (DSN '...', PUBLICATION 'p' [, SLOT 's'] [, CONNECT TIMEOUT S n])``
    or ``MYSQL (URL 'mysql://...' [, CONNECT TIMEOUT S n])``, then
    ``FOR TABLES (table, ...)`` (``schema.table`` outside ``public``) or
    ``FOR ALL TABLES`` (every table of the publication, or of the database).
    The engine refuses a DSN or URL that holds a password: the statement is
    kept in the catalog;

  then ``[ENVELOPE NONE | ENVELOPE UPSERT (KEY (column, ...))]`` and
  ``[WITH (RETAIN HISTORY FOR 'duration')]``. An option's name is its words
  joined by ``_`` (``SCALE FACTOR 0.01`` is ``scale_factor``, ``BROKER`` is
  ``bootstrap_servers``); the options are the run file's
  (``docs/run-spec.md``). KAFKA, POSTGRES and MYSQL refuse options they do
  not take, and name the ones they need;
* ``CREATE MATERIALIZED VIEW [IF NOT EXISTS] name
  [WITH (REFRESH EVERY 'duration', RETAIN HISTORY FOR 'duration')] AS query``;
* ``CREATE SINK [IF NOT EXISTS] name FROM relation INTO {KAFKA | POSTGRES |
  DELTA} (option value, ...) [KEY (column, ...)] [FORMAT JSON | AVRO]
  [ENVELOPE UPSERT | DEBEZIUM | APPEND] [WITH (VERSION n)]``: KAFKA takes
  ``BROKER``, ``TOPIC``, ``PROGRESS TOPIC``, ``KEY SCHEMA ID`` and
  ``VALUE SCHEMA ID``; POSTGRES ``DSN``, ``TABLE`` and ``SCHEMA``; DELTA
  ``URI`` -- the run file's export options (``docs/run-spec.md``);
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
  (``t`` a duration such as ``'1s'``, ``'500ms'`` or ``'0s'``, or a number of
  seconds; no count is a count of 1) and ``CLOSE {name | ALL}``: cursors, as
  Materialize has them; the server's session keeps them, the engine never
  sees these three;
* ``ALTER SYSTEM PROMOTE``: a read-only server becomes a writer;
* ``DEALLOCATE [PREPARE] {name | ALL}`` (drivers send it for the statements
  they prepared);
* ``BEGIN``, ``START TRANSACTION``, ``COMMIT``, ``ROLLBACK``, ``SET`` and
  ``DISCARD``, accepted and ignored (drivers send them; every statement takes
  effect at once).

Names are PostgreSQL identifiers: bare ones fold to lower case, double-quoted
ones keep their case and may hold dots (``"auction.bids"``); a dotted bare
name (``auction.bids``) names the same shard. Parameters ``$1``, ``$2``, ...
may stand for any literal; :func:`bind` replaces them with literal tokens
before parsing, typed by what the client sent, so a value never becomes SQL
text by concatenation.

The tokens come from sqlglot's PostgreSQL tokenizer (strings, quoted
identifiers and comments are its business); the DDL grammar above is parsed
here, by hand, because no parser knows it; queries are left to sqlglot.
Pure Python, no Spark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sqlglot
from sqlglot import Token, TokenType
from sqlglot.errors import SqlglotError

from timeshard.errors import InvalidUsage

_POSTGRES = sqlglot.Dialect.get_or_raise("postgres")


class _Tokenizer(_POSTGRES.tokenizer_class):  # type: ignore[name-defined,misc]
    COMMANDS: ClassVar[set[TokenType]] = set()  # SHOW, EXPLAIN, ...: words, not one opaque string


#: A LOAD GENERATOR's name to the run file's source kind.
GENERATORS = {"counter": "counter", "auction": "auction", "key value": "key_value", "tpch": "tpch"}
#: PostgreSQL type names a FILE source's columns may use, to the run file's types.
COLUMN_TYPES = {
    "bigint": "int64",
    "int8": "int64",
    "int64": "int64",
    "integer": "int32",
    "int": "int32",
    "int4": "int32",
    "int32": "int32",
    "double precision": "float64",
    "double": "float64",
    "float8": "float64",
    "float64": "float64",
    "text": "string",
    "varchar": "string",
    "string": "string",
    "boolean": "bool",
    "bool": "bool",
    "bytea": "binary",
    "binary": "binary",
}


class SqlError(InvalidUsage):
    """A statement the server refuses, with its SQLSTATE (PostgreSQL's error codes)."""

    def __init__(self, message: str, sqlstate: str = "42601") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@dataclass(frozen=True)
class CreateSource:
    name: str
    kind: str
    options: dict[str, Any]
    columns: dict[str, str] = field(default_factory=dict)
    envelope: str = "none"
    key_columns: tuple[str, ...] = ()
    retain_history: str | None = None
    if_not_exists: bool = False
    sql: str = ""


@dataclass(frozen=True)
class CreateView:
    name: str
    query: str  # PostgreSQL text of the query
    refresh_every: str | None = None
    retain_history: str | None = None
    if_not_exists: bool = False
    sql: str = ""


@dataclass(frozen=True)
class CreateSink:
    name: str
    input: str  # the shard it exports
    kind: str  # "kafka" | "postgres" | "delta"
    options: dict[str, Any]
    key_columns: tuple[str, ...] = ()
    envelope: str = "upsert"
    version: int = 1
    if_not_exists: bool = False
    sql: str = ""


#: A sink's option names in SQL to the run file's (docs/run-spec.md, ``[[export]]``).
SINK_OPTIONS = {
    "kafka": {
        "broker": "bootstrap_servers",
        "brokers": "bootstrap_servers",
        "bootstrap_servers": "bootstrap_servers",
        "topic": "topic",
        "progress_topic": "progress_topic",
        "key_schema_id": "key_schema_id",
        "value_schema_id": "value_schema_id",
    },
    "postgres": {"dsn": "dsn", "table": "table", "schema": "schema"},
    "delta": {"uri": "table_uri", "path": "table_uri", "table_uri": "table_uri"},
}


#: A connector source's option names in SQL to the run file's (docs/run-spec.md,
#: ``[[source]]``); the formats, ``metadata`` and ``tables`` are clauses of their own.
SOURCE_OPTIONS: dict[str, dict[str, str]] = {
    "kafka": {
        "broker": "bootstrap_servers",
        "brokers": "bootstrap_servers",
        "bootstrap_servers": "bootstrap_servers",
        "topic": "topic",
        "group_id": "group_id",
        "timeout_s": "timeout_s",
        "schema_registry_url": "schema_registry_url",
        "key_schema_file": "key_schema_file",
        "value_schema_file": "value_schema_file",
        "key_avro_schema": "key_avro_schema",
        "value_avro_schema": "value_avro_schema",
    },
    "postgres": {k: k for k in ("dsn", "publication", "slot", "connect_timeout_s", "create_slot")},
    "mysql": {"url": "url", "connect_timeout_s": "connect_timeout_s"},
}
#: The options a connector source cannot do without, as the run file names them.
SOURCE_NEEDS = {
    "kafka": ("bootstrap_servers", "topic"),
    "postgres": ("dsn", "publication"),
    "mysql": ("url",),
}
#: Where a connector source's other run-file options go in SQL.
_SOURCE_CLAUSES = {
    "kafka": "formats go in FORMAT f or KEY FORMAT f VALUE FORMAT f, metadata in INCLUDE",
    "postgres": "tables go in FOR TABLES (...)",
    "mysql": "tables go in FOR TABLES (...)",
}
KAFKA_FORMATS = ("json", "text", "bytes", "avro")
KAFKA_METADATA = ("partition", "offset", "timestamp", "headers")


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


@dataclass(frozen=True)
class Query:
    query: str  # PostgreSQL text of the query, without its AS OF
    as_of: int | None = None


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
    """``FETCH [count | ALL] name [WITH (TIMEOUT = t)]``.

    ``count`` None is ALL; ``timeout_s`` None waits for a SUBSCRIBE cursor's
    first row as long as it takes, 0 takes only the rows that are ready.
    """

    name: str
    count: int | None = 1
    timeout_s: float | None = None


@dataclass(frozen=True)
class CloseCursor:
    """``CLOSE {name | ALL}`` (None: every cursor of the session)."""

    name: str | None


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
)


# -- tokens ----------------------------------------------------------------------------------


def tokenize(sql: str) -> list[Token]:
    try:
        return list(_Tokenizer(dialect=_POSTGRES).tokenize(sql))
    except SqlglotError as e:
        raise SqlError(f"cannot read the statement: {str(e).splitlines()[0]}") from None


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


_NUMERIC_OIDS = {20, 21, 23, 26, 700, 701, 1700}


def bind(sql: str, params: list[Param]) -> str:
    """``sql`` with ``$n`` replaced by the n-th parameter as a literal.

    A numeric parameter (by its type OID, or an untyped one that reads as a
    number) becomes a number, NULL stays NULL, anything else becomes a
    string literal written by sqlglot (quotes doubled), so no value becomes
    SQL syntax.
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


_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_TRUE, _FALSE = ("t", "true", "1", "on", "yes", "y"), ("f", "false", "0", "off", "no", "n")


def _literal(param: Param) -> str:
    """A parameter as one SQL literal (a negative number in parentheses: ``1-$1`` with
    ``-5`` must not become the comment ``1--5``)."""
    if param.text is None:
        return "NULL"
    text = param.text.strip()
    if param.oid in _NUMERIC_OIDS or (param.oid == 0 and _NUMBER.fullmatch(text)):
        if not _NUMBER.fullmatch(text):
            raise SqlError(f"parameter {param.text!r} is not a number", "22P02")
        return f"({text})" if text.startswith("-") else text.lstrip("+")
    if param.oid == 16:
        if text.lower() not in (*_TRUE, *_FALSE):
            raise SqlError(f"parameter {param.text!r} is not a boolean", "22P02")
        return "TRUE" if text.lower() in _TRUE else "FALSE"
    return sqlglot.exp.Literal.string(param.text).sql("postgres")


# -- parsing ---------------------------------------------------------------------------------


def parse(sql: str) -> Statement | Empty:
    """One statement (see the module doc); a :class:`SqlError` says what is wrong."""
    tokens = tokenize(sql)
    if not tokens:
        return Empty()
    p = _Parser(sql, tokens)
    return p.statement()


class _Parser:
    def __init__(self, sql: str, tokens: list[Token]) -> None:
        self.sql = sql
        self.tokens = tokens
        self.i = 0

    # -- token helpers

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def word(self, ahead: int = 0) -> str | None:
        """The upper-cased text of a bare word ahead (keyword or name), or None."""
        t = self.peek(ahead)
        if t is None or t.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
            return None
        if not (t.text[:1].isalpha() or t.text[:1] == "_"):
            return None
        return t.text.upper()

    def accept(self, *words: str) -> bool:
        if all(self.word(k) == w for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise self.error(f"expected {' '.join(words)}")

    def error(self, message: str) -> SqlError:
        t = self.peek()
        where = f"at {t.text!r}" if t is not None else "at the end of the statement"
        return SqlError(f"syntax error {where}: {message}")

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def end(self) -> None:
        if not self.at_end():
            raise self.error("unexpected text after the statement")

    def rest(self) -> str:
        t = self.peek()
        return "" if t is None else self.sql[t.start :].strip()

    def name(self) -> str:
        """An object name: identifiers joined by dots; bare parts fold to lower case."""
        parts = [self.ident()]
        while (t := self.peek()) is not None and t.token_type == TokenType.DOT:
            self.i += 1
            parts.append(self.ident())
        return ".".join(parts)

    def ident(self) -> str:
        t = self.peek()
        if t is None:
            raise self.error("expected a name")
        if t.token_type == TokenType.IDENTIFIER:
            self.i += 1
            return t.text
        bare = t.token_type not in (TokenType.STRING, TokenType.NUMBER)
        if not (bare and (t.text[:1].isalpha() or t.text[:1] == "_")):
            raise self.error("expected a name")
        self.i += 1
        return t.text.lower()

    def value(self) -> Any:
        t = self.peek()
        if t is None:
            raise self.error("expected a value")
        self.i += 1
        if t.token_type == TokenType.STRING:
            return t.text
        if t.token_type == TokenType.DASH:
            v = self.value()
            if not isinstance(v, int | float) or isinstance(v, bool):
                raise self.error("expected a number after '-'")
            return -v
        if t.token_type == TokenType.NUMBER:
            return int(t.text) if t.text.isdigit() else float(t.text)
        if t.text.upper() in ("TRUE", "FALSE"):
            return t.text.upper() == "TRUE"
        if t.token_type == TokenType.IDENTIFIER:
            return t.text
        return t.text.lower()

    def time(self) -> int:
        t = self.peek()
        if t is None or t.token_type != TokenType.NUMBER or not t.text.isdigit():
            raise self.error("expected a time: a whole number of milliseconds")
        self.i += 1
        return int(t.text)

    def punct(self, kind: TokenType) -> bool:
        t = self.peek()
        if t is not None and t.token_type == kind:
            self.i += 1
            return True
        return False

    def expect_punct(self, kind: TokenType, text: str) -> None:
        if not self.punct(kind):
            raise self.error(f"expected {text!r}")

    def options(self) -> dict[str, Any]:
        """``(name words [=] value, ...)``: names lower-cased, words joined by ``_``."""
        out: dict[str, Any] = {}
        self.expect_punct(TokenType.L_PAREN, "(")
        while True:
            words = []
            while (w := self.word()) is not None and self.peek(1) is not None:
                nxt = self.peek(1)
                assert nxt is not None
                if nxt.token_type in (TokenType.COMMA, TokenType.R_PAREN):
                    break  # w is the value of a word-valued option
                words.append(w.lower())
                self.i += 1
                if nxt.token_type in (TokenType.STRING, TokenType.NUMBER, TokenType.EQ):
                    break
                if nxt.token_type == TokenType.DASH:
                    break
            if not words:
                raise self.error("expected an option name")
            self.punct(TokenType.EQ)
            key = "_".join(words)
            if key in out:
                raise SqlError(f"option {key.upper()} is given twice")
            out[key] = self.value()
            if self.punct(TokenType.R_PAREN):
                return out
            self.expect_punct(TokenType.COMMA, ",")

    def name_list(self) -> list[str]:
        self.expect_punct(TokenType.L_PAREN, "(")
        names = [self.ident()]
        while self.punct(TokenType.COMMA):
            names.append(self.ident())
        self.expect_punct(TokenType.R_PAREN, ")")
        return names

    # -- statements

    def statement(self) -> Statement:
        first = self.word()
        if first == "CREATE":
            self.i += 1
            if self.accept("SOURCE"):
                return self.create_source()
            if self.accept("MATERIALIZED", "VIEW"):
                return self.create_view()
            if self.accept("SINK"):
                return self.create_sink()
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
        if first in ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SET", "DISCARD"):
            tags = {"START": "START TRANSACTION", "END": "COMMIT", "ABORT": "ROLLBACK"}
            return Ignored(tags.get(first, first))
        raise SqlError(f"statement {first or self.tokens[0].text!r} is not supported", "0A000")

    def create_source(self) -> CreateSource:
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = self.name()
        columns: dict[str, str] = {}
        if (t := self.peek()) is not None and t.token_type == TokenType.L_PAREN:
            columns = self.column_list()
        self.expect("FROM")
        options: dict[str, Any]
        if self.accept("LOAD", "GENERATOR"):
            words = []
            while (w := self.word()) is not None and w not in ("ENVELOPE", "WITH"):
                words.append(w.lower())
                self.i += 1
            generator = " ".join(words)
            if generator not in GENERATORS:
                raise SqlError(
                    f"unknown load generator {generator.upper()!r}; use one of "
                    f"{', '.join(g.upper() for g in GENERATORS)}",
                    "22023",
                )
            kind = GENERATORS[generator]
            options = {}
            if (t := self.peek()) is not None and t.token_type == TokenType.L_PAREN:
                options = self.options()
        elif self.accept("FILE"):
            t = self.peek()
            if t is None or t.token_type != TokenType.STRING:
                raise self.error("expected the file's path as a string")
            self.i += 1
            kind = "file"
            options = {"path": t.text}
            if (t := self.peek()) is not None and t.token_type == TokenType.L_PAREN:
                options |= self.options()
            if "format" not in options:
                raise SqlError("a FILE source needs (FORMAT json|csv|text|bytes|avro)", "22023")
            options["format"] = str(options["format"]).lower()
        elif (kind := (self.word() or "").lower()) in SOURCE_OPTIONS:
            self.i += 1
            options = self.source_options(kind)
            options |= self.kafka_formats() if kind == "kafka" else self.tables()
        else:
            raise self.error("expected LOAD GENERATOR, FILE, KAFKA, POSTGRES or MYSQL")
        envelope, keys = "none", tuple[str, ...]()
        if self.accept("ENVELOPE"):
            if self.accept("UPSERT"):
                envelope = "upsert"
                if (t := self.peek()) is not None and t.token_type == TokenType.L_PAREN:
                    self.i += 1
                    self.expect("KEY")
                    keys = tuple(self.name_list())
                    self.expect_punct(TokenType.R_PAREN, ")")
            else:
                self.expect("NONE")
        retain = None
        if self.accept("WITH"):
            with_options = self.options()
            retain = _duration_option(with_options, "retain_history_for")
            if with_options:
                raise SqlError(f"unknown WITH options {sorted(with_options)}", "22023")
        self.end()
        return CreateSource(
            name, kind, options, columns, envelope, keys, retain, if_not_exists, self.sql.strip()
        )

    def source_options(self, kind: str) -> dict[str, Any]:
        """A KAFKA, POSTGRES or MYSQL source's ``(option value, ...)``, in the run file's names."""
        names = SOURCE_OPTIONS[kind]
        options = {}
        for key, value in self.options().items():
            if key not in names:
                raise SqlError(
                    f"a {kind.upper()} source has no option {key.upper()!r}; it takes "
                    f"{', '.join(sorted(k.upper().replace('_', ' ') for k in names))} "
                    f"({_SOURCE_CLAUSES[kind]})",
                    "22023",
                )
            if names[key] in options:
                raise SqlError(f"option {key.upper()} is given twice")
            options[names[key]] = value
        missing = [k for k in SOURCE_NEEDS[kind] if k not in options]
        if missing:
            wanted = {v: k for k, v in reversed(names.items())}  # its first SQL name
            raise SqlError(
                f"a {kind.upper()} source needs "
                f"{' and '.join(wanted[k].upper().replace('_', ' ') for k in missing)}",
                "22023",
            )
        return options

    def kafka_formats(self) -> dict[str, Any]:
        """``[FORMAT f | KEY FORMAT f [(column type, ...)] VALUE FORMAT f] [INCLUDE m, ...]``."""
        out: dict[str, Any] = {}
        if self.accept("FORMAT"):
            out["value_format"] = self.kafka_format()
        else:
            if self.accept("KEY", "FORMAT"):
                out["key_format"] = self.kafka_format()
                if (t := self.peek()) is not None and t.token_type == TokenType.L_PAREN:
                    if out["key_format"] != "json":
                        raise self.error("only a JSON key declares its columns")
                    out["key_schema"] = self.column_list()
                elif out["key_format"] == "json":
                    raise SqlError("KEY FORMAT JSON needs its columns: KEY FORMAT JSON (id bigint)")
            if self.accept("VALUE", "FORMAT"):
                out["value_format"] = self.kafka_format()
        if self.accept("INCLUDE"):
            metadata = [self.ident()]
            while self.punct(TokenType.COMMA):
                metadata.append(self.ident())
            unknown = [m for m in metadata if m not in KAFKA_METADATA]
            if unknown or len(set(metadata)) < len(metadata):
                raise SqlError(
                    f"INCLUDE takes distinct ones of {', '.join(m.upper() for m in KAFKA_METADATA)}"
                    f", got {', '.join(m.upper() for m in metadata)}",
                    "22023",
                )
            out["metadata"] = metadata
        return out

    def kafka_format(self) -> str:
        fmt = (self.word() or "").lower()
        if fmt not in KAFKA_FORMATS:
            raise SqlError(
                f"a KAFKA source's format is one of "
                f"{', '.join(f.upper() for f in KAFKA_FORMATS)}, got {self.rest()[:20]!r}",
                "22023",
            )
        self.i += 1
        return fmt

    def tables(self) -> dict[str, Any]:
        """``FOR TABLES (name, ...)`` (``schema.name`` outside ``public``) or ``FOR ALL TABLES``."""
        if self.accept("FOR", "ALL", "TABLES"):
            return {}  # no ``tables``: every table of the publication or database
        if not self.accept("FOR", "TABLES"):
            raise self.error("expected FOR TABLES (table, ...) or FOR ALL TABLES")
        self.expect_punct(TokenType.L_PAREN, "(")
        if (t := self.peek()) is not None and t.token_type == TokenType.R_PAREN:
            raise self.error("FOR TABLES names at least one table (or say FOR ALL TABLES)")
        tables = [self.name()]
        while self.punct(TokenType.COMMA):
            tables.append(self.name())
        self.expect_punct(TokenType.R_PAREN, ")")
        if len(set(tables)) < len(tables):
            raise SqlError(f"FOR TABLES names a table twice: {tables}", "22023")
        return {"tables": tables}

    def column_list(self) -> dict[str, str]:
        self.expect_punct(TokenType.L_PAREN, "(")
        columns: dict[str, str] = {}
        while True:
            column = self.ident()
            words = []
            while (w := self.word()) is not None:
                words.append(w.lower())
                self.i += 1
            type_name = " ".join(words)
            if type_name not in COLUMN_TYPES:
                raise SqlError(
                    f"column {column!r}: unknown type {type_name!r}; use one of "
                    f"{', '.join(sorted(COLUMN_TYPES))}",
                    "42704",
                )
            columns[column] = COLUMN_TYPES[type_name]
            if self.punct(TokenType.R_PAREN):
                return columns
            self.expect_punct(TokenType.COMMA, ",")

    def create_view(self) -> CreateView:
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = self.name()
        refresh = retain = None
        if self.accept("WITH"):
            options = self.options()
            refresh = _duration_option(options, "refresh_every")
            retain = _duration_option(options, "retain_history_for")
            if options:
                raise SqlError(f"unknown WITH options {sorted(options)}", "22023")
        self.expect("AS")
        query = self.rest()
        if self.word() not in ("SELECT", "WITH", "VALUES", "TABLE"):
            raise self.error("expected a query (SELECT ...)")
        return CreateView(name, query, refresh, retain, if_not_exists, self.sql.strip())

    def create_sink(self) -> CreateSink:
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = self.name()
        self.expect("FROM")
        source = self.name()
        self.expect("INTO")
        kind = (self.word() or "").lower()
        if kind not in SINK_OPTIONS:
            raise SqlError(
                f"unknown sink kind {kind.upper() or self.rest()!r}; use KAFKA, POSTGRES or DELTA",
                "22023",
            )
        self.i += 1
        options = {}
        if (t := self.peek()) is not None and t.token_type == TokenType.L_PAREN:
            for key, value in self.options().items():
                if key not in SINK_OPTIONS[kind]:
                    raise SqlError(
                        f"a {kind.upper()} sink has no option {key.upper()!r}; it takes "
                        f"{', '.join(sorted(k.upper() for k in SINK_OPTIONS[kind]))}",
                        "22023",
                    )
                options[SINK_OPTIONS[kind][key]] = value
        keys: tuple[str, ...] = ()
        if self.accept("KEY"):
            keys = tuple(self.name_list())
        if self.accept("FORMAT"):
            options["format"] = (self.word() or "").lower()
            self.i += 1
        envelope = "upsert"
        if self.accept("ENVELOPE"):
            envelope = (self.word() or "").lower()
            if envelope not in ("upsert", "debezium", "append"):
                raise self.error("expected ENVELOPE UPSERT, DEBEZIUM or APPEND")
            self.i += 1
        version = 1
        if self.accept("WITH"):
            with_options = self.options()
            version = with_options.pop("version", 1)
            if with_options:
                raise SqlError(f"unknown WITH options {sorted(with_options)}", "22023")
            if not isinstance(version, int) or isinstance(version, bool):
                raise SqlError(f"VERSION must be a whole number, got {version!r}", "22023")
        self.end()
        return CreateSink(
            name, source, kind, options, keys, envelope, version, if_not_exists, self.sql.strip()
        )

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
        self.accept("FORWARD")
        count: int | None = 1
        if self.accept("ALL"):
            count = None
        elif self.accept("NEXT"):
            count = 1
        elif (t := self.peek()) is not None and t.token_type == TokenType.NUMBER:
            if not t.text.isdigit():
                raise self.error("a FETCH count is a whole number")
            count = int(t.text)
            self.i += 1
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
        return Fetch(name, count, timeout_s)

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
                following = self.tokens[k + 1 : k + 3]
                if (
                    len(following) == 2
                    and following[0].token_type != TokenType.IDENTIFIER
                    and following[0].text.upper() == "OF"
                    and following[1].token_type == TokenType.NUMBER  # else ``AS of``: an alias
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


def _seconds(value: Any) -> float | None:
    """A FETCH TIMEOUT in seconds: a duration (``'1s'``, ``'500ms'``) or a number of seconds."""
    from timeshard.cli.spec import parse_duration

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


def _duration_option(options: dict[str, Any], key: str) -> str | None:
    from timeshard.cli.spec import parse_duration

    value = options.pop(key, None)
    if value is None:
        return None
    text = str(value).replace(" ", "")
    try:
        parse_duration(text)
    except InvalidUsage as e:
        raise SqlError(f"{key.replace('_', ' ').upper()}: {e}", "22023") from None
    return text


__all__ = [
    "COLUMN_TYPES",
    "GENERATORS",
    "KAFKA_FORMATS",
    "KAFKA_METADATA",
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
    "Show",
    "ShowCreate",
    "SqlError",
    "Statement",
    "Subscribe",
    "bind",
    "parse",
    "split",
]
