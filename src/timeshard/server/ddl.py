"""The DDL ``timeshard serve`` speaks: CREATE SOURCE, CREATE MATERIALIZED VIEW and CREATE SINK.

The forms follow Materialize's:

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
  ``URI`` -- the run file's export options (``docs/run-spec.md``).

Each parses into a frozen value that keeps its statement's text (``sql``),
which the engine keeps in the catalog. The option tables here map SQL's
option names to the run file's. :func:`create_source`, :func:`create_view`
and :func:`create_sink` read a statement from a
:class:`~timeshard.server.sql_tokens.TokenReader` just past its ``CREATE
SOURCE``, ``CREATE MATERIALIZED VIEW`` or ``CREATE SINK``: no parser knows
this grammar, so it is parsed here, by hand; a view's query is left to
sqlglot. Pure Python, no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import TokenType

from timeshard.errors import InvalidUsage
from timeshard.server.sql_tokens import SqlError, TokenReader

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


def create_source(r: TokenReader) -> CreateSource:
    """A ``CREATE SOURCE`` statement, read from ``r`` just past ``SOURCE`` to its end."""
    if_not_exists = r.accept("IF", "NOT", "EXISTS")
    name = r.name()
    columns: dict[str, str] = {}
    if (t := r.peek()) is not None and t.token_type == TokenType.L_PAREN:
        columns = _column_list(r)
    r.expect("FROM")
    options: dict[str, Any]
    if r.accept("LOAD", "GENERATOR"):
        words = []
        while (w := r.word()) is not None and w not in ("ENVELOPE", "WITH"):
            words.append(w.lower())
            r.i += 1
        generator = " ".join(words)
        if generator not in GENERATORS:
            raise SqlError(
                f"unknown load generator {generator.upper()!r}; use one of "
                f"{', '.join(g.upper() for g in GENERATORS)}",
                "22023",
            )
        kind = GENERATORS[generator]
        options = {}
        if (t := r.peek()) is not None and t.token_type == TokenType.L_PAREN:
            options = r.options()
    elif r.accept("FILE"):
        t = r.peek()
        if t is None or t.token_type != TokenType.STRING:
            raise r.error("expected the file's path as a string")
        r.i += 1
        kind = "file"
        options = {"path": t.text}
        if (t := r.peek()) is not None and t.token_type == TokenType.L_PAREN:
            for key, value in r.options().items():
                _put(options, key, key, value)
        if "format" not in options:
            raise SqlError("a FILE source needs (FORMAT json|csv|text|bytes|avro)", "22023")
        options["format"] = str(options["format"]).lower()
    elif (kind := (r.word() or "").lower()) in SOURCE_OPTIONS:
        r.i += 1
        options = _source_options(r, kind)
        options |= _kafka_formats(r) if kind == "kafka" else _tables(r)
    else:
        raise r.error("expected LOAD GENERATOR, FILE, KAFKA, POSTGRES or MYSQL")
    envelope, keys = "none", tuple[str, ...]()
    if r.accept("ENVELOPE"):
        if r.accept("UPSERT"):
            envelope = "upsert"
            if (t := r.peek()) is not None and t.token_type == TokenType.L_PAREN:
                r.i += 1
                r.expect("KEY")
                keys = tuple(r.name_list())
                r.expect_punct(TokenType.R_PAREN, ")")
        else:
            r.expect("NONE")
    retain = None
    if r.accept("WITH"):
        with_options = r.options()
        retain = _duration_option(with_options, "retain_history_for")
        if with_options:
            raise SqlError(f"unknown WITH options {sorted(with_options)}", "22023")
    r.end()
    return CreateSource(
        name, kind, options, columns, envelope, keys, retain, if_not_exists, r.sql.strip()
    )


def _source_options(r: TokenReader, kind: str) -> dict[str, Any]:
    """A KAFKA, POSTGRES or MYSQL source's ``(option value, ...)``, in the run file's names."""
    names = SOURCE_OPTIONS[kind]
    options: dict[str, Any] = {}
    for key, value in r.options().items():
        if key not in names:
            raise SqlError(
                f"a {kind.upper()} source has no option {key.upper()!r}; it takes "
                f"{', '.join(sorted(k.upper().replace('_', ' ') for k in names))} "
                f"({_SOURCE_CLAUSES[kind]})",
                "22023",
            )
        _put(options, names[key], key, value)
    missing = [k for k in SOURCE_NEEDS[kind] if k not in options]
    if missing:
        wanted = {v: k for k, v in reversed(names.items())}  # its first SQL name
        raise SqlError(
            f"a {kind.upper()} source needs "
            f"{' and '.join(wanted[k].upper().replace('_', ' ') for k in missing)}",
            "22023",
        )
    return options


def _put(options: dict[str, Any], name: str, key: str, value: Any) -> None:
    """Set the run file's option ``name`` to ``value``, given in SQL as ``key``; SqlError if
    it is set already, under this or another of its SQL names (``BROKER`` and ``BROKERS``,
    ``URI`` and ``PATH``): the last would silently win."""
    if name in options:
        raise SqlError(f"option {key.upper()} is given twice")
    options[name] = value


def _kafka_formats(r: TokenReader) -> dict[str, Any]:
    """``[FORMAT f | KEY FORMAT f [(column type, ...)] VALUE FORMAT f] [INCLUDE m, ...]``."""
    out: dict[str, Any] = {}
    if r.accept("FORMAT"):
        out["value_format"] = _kafka_format(r)
    else:
        if r.accept("KEY", "FORMAT"):
            out["key_format"] = _kafka_format(r)
            if (t := r.peek()) is not None and t.token_type == TokenType.L_PAREN:
                if out["key_format"] != "json":
                    raise r.error("only a JSON key declares its columns")
                out["key_schema"] = _column_list(r)
            elif out["key_format"] == "json":
                raise SqlError("KEY FORMAT JSON needs its columns: KEY FORMAT JSON (id bigint)")
        if r.accept("VALUE", "FORMAT"):
            out["value_format"] = _kafka_format(r)
    if r.accept("INCLUDE"):
        metadata = [r.ident()]
        while r.punct(TokenType.COMMA):
            metadata.append(r.ident())
        unknown = [m for m in metadata if m not in KAFKA_METADATA]
        if unknown or len(set(metadata)) < len(metadata):
            raise SqlError(
                f"INCLUDE takes distinct ones of {', '.join(m.upper() for m in KAFKA_METADATA)}"
                f", got {', '.join(m.upper() for m in metadata)}",
                "22023",
            )
        out["metadata"] = metadata
    return out


def _kafka_format(r: TokenReader) -> str:
    fmt = (r.word() or "").lower()
    if fmt not in KAFKA_FORMATS:
        raise SqlError(
            f"a KAFKA source's format is one of "
            f"{', '.join(f.upper() for f in KAFKA_FORMATS)}, got {r.rest()[:20]!r}",
            "22023",
        )
    r.i += 1
    return fmt


def _tables(r: TokenReader) -> dict[str, Any]:
    """``FOR TABLES (name, ...)`` (``schema.name`` outside ``public``) or ``FOR ALL TABLES``."""
    if r.accept("FOR", "ALL", "TABLES"):
        return {}  # no ``tables``: every table of the publication or database
    if not r.accept("FOR", "TABLES"):
        raise r.error("expected FOR TABLES (table, ...) or FOR ALL TABLES")
    r.expect_punct(TokenType.L_PAREN, "(")
    if (t := r.peek()) is not None and t.token_type == TokenType.R_PAREN:
        raise r.error("FOR TABLES names at least one table (or say FOR ALL TABLES)")
    tables = [r.name()]
    while r.punct(TokenType.COMMA):
        tables.append(r.name())
    r.expect_punct(TokenType.R_PAREN, ")")
    if len(set(tables)) < len(tables):
        raise SqlError(f"FOR TABLES names a table twice: {tables}", "22023")
    return {"tables": tables}


def _column_list(r: TokenReader) -> dict[str, str]:
    """``(column type, ...)``: SqlError 42701 for a column named twice, or two whose names
    differ only in case (Spark resolves columns ignoring case: one column to it)."""
    r.expect_punct(TokenType.L_PAREN, "(")
    columns: dict[str, str] = {}
    while True:
        column = r.ident()
        if column.lower() in {c.lower() for c in columns}:
            raise SqlError(
                f"column {column!r} is named twice (Spark does not tell names apart by case)",
                "42701",
            )
        words = []
        while (w := r.word()) is not None:
            words.append(w.lower())
            r.i += 1
        type_name = " ".join(words)
        if type_name not in COLUMN_TYPES:
            raise SqlError(
                f"column {column!r}: unknown type {type_name!r}; use one of "
                f"{', '.join(sorted(COLUMN_TYPES))}",
                "42704",
            )
        columns[column] = COLUMN_TYPES[type_name]
        if r.punct(TokenType.R_PAREN):
            return columns
        r.expect_punct(TokenType.COMMA, ",")


def create_view(r: TokenReader) -> CreateView:
    """A ``CREATE MATERIALIZED VIEW`` statement, read from ``r`` just past ``VIEW``; its
    query is the rest of the statement, unread."""
    if_not_exists = r.accept("IF", "NOT", "EXISTS")
    name = r.name()
    refresh = retain = None
    if r.accept("WITH"):
        options = r.options()
        refresh = _duration_option(options, "refresh_every")
        retain = _duration_option(options, "retain_history_for")
        if options:
            raise SqlError(f"unknown WITH options {sorted(options)}", "22023")
    r.expect("AS")
    query = r.rest()
    if r.word() not in ("SELECT", "WITH", "VALUES", "TABLE"):
        raise r.error("expected a query (SELECT ...)")
    return CreateView(name, query, refresh, retain, if_not_exists, r.sql.strip())


def create_sink(r: TokenReader) -> CreateSink:
    """A ``CREATE SINK`` statement, read from ``r`` just past ``SINK`` to its end."""
    if_not_exists = r.accept("IF", "NOT", "EXISTS")
    name = r.name()
    r.expect("FROM")
    source = r.name()
    r.expect("INTO")
    kind = (r.word() or "").lower()
    if kind not in SINK_OPTIONS:
        raise SqlError(
            f"unknown sink kind {kind.upper() or r.rest()!r}; use KAFKA, POSTGRES or DELTA",
            "22023",
        )
    r.i += 1
    options: dict[str, Any] = {}
    if (t := r.peek()) is not None and t.token_type == TokenType.L_PAREN:
        for key, value in r.options().items():
            if key not in SINK_OPTIONS[kind]:
                raise SqlError(
                    f"a {kind.upper()} sink has no option {key.upper()!r}; it takes "
                    f"{', '.join(sorted(k.upper() for k in SINK_OPTIONS[kind]))}",
                    "22023",
                )
            _put(options, SINK_OPTIONS[kind][key], key, value)
    keys: tuple[str, ...] = ()
    if r.accept("KEY"):
        keys = tuple(r.name_list())
    if r.accept("FORMAT"):
        t = r.peek()
        fmt = t.text if t is not None and t.token_type == TokenType.STRING else r.word()
        if fmt is None:
            raise r.error("expected the format after FORMAT (JSON or AVRO)")
        options["format"] = fmt.lower()
        r.i += 1
    envelope = "upsert"
    if r.accept("ENVELOPE"):
        envelope = (r.word() or "").lower()
        if envelope not in ("upsert", "debezium", "append"):
            raise r.error("expected ENVELOPE UPSERT, DEBEZIUM or APPEND")
        r.i += 1
    version = 1
    if r.accept("WITH"):
        with_options = r.options()
        version = with_options.pop("version", 1)
        if with_options:
            raise SqlError(f"unknown WITH options {sorted(with_options)}", "22023")
        if not isinstance(version, int) or isinstance(version, bool):
            raise SqlError(f"VERSION must be a whole number, got {version!r}", "22023")
    r.end()
    return CreateSink(
        name, source, kind, options, keys, envelope, version, if_not_exists, r.sql.strip()
    )


def _duration_option(options: dict[str, Any], key: str) -> str | None:
    from timeshard.spec import parse_duration

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
    "CreateSink",
    "CreateSource",
    "CreateView",
    "create_sink",
    "create_source",
    "create_view",
]
