"""The SQL of ``timeshard serve``: statements parsed, split and bound.

Each documented form parses to its dataclass with the right fields; each
refusal is a :class:`SqlError` whose SQLSTATE and message say what is wrong;
:func:`split` cuts only at top-level semicolons; :func:`bind` turns every
parameter into one literal, never into SQL text. Pure Python, no Spark.
"""

from __future__ import annotations

import dataclasses

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from timeshard.server.statements import (
    CloseCursor,
    CreateSink,
    CreateSource,
    CreateView,
    Declare,
    Drop,
    Empty,
    Explain,
    Fetch,
    Ignored,
    Param,
    Promote,
    Query,
    Setting,
    Show,
    ShowCreate,
    ShowSetting,
    SqlError,
    Subscribe,
    bind,
    interval_parameters,
    parameter_count,
    parse,
    placeholder,
    show_timeout,
    split,
)


def refused(sql: str, sqlstate: str, *in_message: str) -> SqlError:
    """The error ``parse(sql)`` raises, checked for its SQLSTATE and message parts."""
    with pytest.raises(SqlError) as info:
        parse(sql)
    assert info.value.sqlstate == sqlstate, str(info.value)
    for part in in_message:
        assert part in str(info.value)
    return info.value


def postgres(sql: str) -> exp.Expression:
    tree = sqlglot.parse_one(sql, read="postgres")
    assert tree is not None
    return tree


def literals(sql: str) -> list[exp.Literal]:
    return list(postgres(sql).find_all(exp.Literal))


# -- CREATE SOURCE ... FROM LOAD GENERATOR -----------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "kind", "options"),
    [
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER", "counter", {}),
        (
            "CREATE SOURCE s FROM LOAD GENERATOR COUNTER (RATE 100, MAX CARDINALITY 1000)",
            "counter",
            {"rate": 100, "max_cardinality": 1000},
        ),
        (
            "CREATE SOURCE s FROM LOAD GENERATOR AUCTION (RATE 50, USERS 500, ORGANIZATIONS 5)",
            "auction",
            {"rate": 50, "users": 500, "organizations": 5},
        ),
        (
            "CREATE SOURCE s FROM LOAD GENERATOR KEY VALUE "
            "(KEYS 1000, VALUE SIZE 32, PARTITIONS 2, DELETES 0.05)",
            "key_value",
            {"keys": 1000, "value_size": 32, "partitions": 2, "deletes": 0.05},
        ),
        (
            "CREATE SOURCE s FROM LOAD GENERATOR TPCH (SCALE FACTOR 0.01, TICK ORDERS 100)",
            "tpch",
            {"scale_factor": 0.01, "tick_orders": 100},
        ),
        ("create source s from load generator key value (keys 7)", "key_value", {"keys": 7}),
    ],
)
def test_load_generator_kinds_and_options(sql: str, kind: str, options: dict[str, object]) -> None:
    s = parse(sql)
    assert s == CreateSource("s", kind, options, sql=sql)


@pytest.mark.parametrize(
    ("option_text", "want"),
    [
        ("SEED 7", 7),
        ("SEED = 7", 7),
        ("SEED -3", -3),
        ("SEED = -3", -3),
        ("SEED - 3", -3),
        ("SEED -0.5", -0.5),
        ("SEED 1e3", 1000.0),
        ("SEED 'it''s'", "it's"),
        ("SEED TRUE", True),
        ("SEED = false", False),
        ('SEED "Quoted"', "Quoted"),
        ("SEED word", "word"),
    ],
)
def test_option_values(option_text: str, want: object) -> None:
    s = parse(f"CREATE SOURCE s FROM LOAD GENERATOR COUNTER ({option_text})")
    assert isinstance(s, CreateSource)
    assert s.options == {"seed": want}
    assert type(s.options["seed"]) is type(want)


def test_multi_word_option_names_join_with_underscores() -> None:
    s = parse(
        "CREATE SOURCE s FROM LOAD GENERATOR TPCH "
        "(SCALE FACTOR 0.01, TICK ORDERS = 5, SEED -3, SOME LONG NAME 'x', FLAG TRUE)"
    )
    assert isinstance(s, CreateSource)
    assert s.options == {
        "scale_factor": 0.01,
        "tick_orders": 5,
        "seed": -3,
        "some_long_name": "x",
        "flag": True,
    }


def test_the_statement_text_is_kept_without_surrounding_space() -> None:
    s = parse("  CREATE SOURCE s FROM LOAD GENERATOR COUNTER\n")
    assert isinstance(s, CreateSource)
    assert s.sql == "CREATE SOURCE s FROM LOAD GENERATOR COUNTER"


# -- CREATE SOURCE ... FROM FILE ---------------------------------------------------------------


def test_file_source_with_format_options_and_columns() -> None:
    s = parse(
        "CREATE SOURCE f (id bigint, x double precision, n text, ok boolean, raw bytea, i int) "
        "FROM FILE '/data/in.csv' (FORMAT CSV, HEADER TRUE, DELIMITER ';')"
    )
    assert isinstance(s, CreateSource)
    assert s.kind == "file"
    assert s.options == {"path": "/data/in.csv", "format": "csv", "header": True, "delimiter": ";"}
    assert list(s.columns.items()) == [
        ("id", "int64"),
        ("x", "float64"),
        ("n", "string"),
        ("ok", "bool"),
        ("raw", "binary"),
        ("i", "int32"),
    ]


@pytest.mark.parametrize(
    ("type_name", "want"),
    [
        ("bigint", "int64"),
        ("int8", "int64"),
        ("BIGINT", "int64"),
        ("integer", "int32"),
        ("int", "int32"),
        ("int4", "int32"),
        ("double precision", "float64"),
        ("DOUBLE PRECISION", "float64"),
        ("float8", "float64"),
        ("text", "string"),
        ("varchar", "string"),
        ("boolean", "bool"),
        ("bool", "bool"),
        ("bytea", "binary"),
    ],
)
def test_postgres_column_types(type_name: str, want: str) -> None:
    s = parse(f"CREATE SOURCE f (c {type_name}) FROM FILE '/x' (FORMAT json)")
    assert isinstance(s, CreateSource)
    assert s.columns == {"c": want}


@pytest.mark.parametrize(
    ("format_text", "want"),
    [("FORMAT json", "json"), ("FORMAT JSON", "json"), ("FORMAT = 'Avro'", "avro")],
)
def test_file_format_is_lower_cased(format_text: str, want: str) -> None:
    s = parse(f"CREATE SOURCE f FROM FILE '/x' ({format_text})")
    assert isinstance(s, CreateSource)
    assert s.options == {"path": "/x", "format": want}


def test_column_names_fold_unless_quoted() -> None:
    s = parse("CREATE SOURCE f (\"Id\" BIGINT, Name TEXT) FROM FILE '/x' (FORMAT csv)")
    assert isinstance(s, CreateSource)
    assert s.columns == {"Id": "int64", "name": "string"}


# -- CREATE SOURCE: envelope, retention, IF NOT EXISTS ------------------------------------------


def test_everything_at_once() -> None:
    sql = (
        'CREATE SOURCE IF NOT EXISTS "Kv" FROM LOAD GENERATOR KEY VALUE (KEYS 10) '
        "ENVELOPE UPSERT (KEY (Key, \"Other\")) WITH (RETAIN HISTORY FOR '1h')"
    )
    assert parse(sql) == CreateSource(
        name="Kv",
        kind="key_value",
        options={"keys": 10},
        envelope="upsert",
        key_columns=("key", "Other"),
        retain_history="1h",
        if_not_exists=True,
        sql=sql,
    )


@pytest.mark.parametrize(
    ("tail", "envelope", "keys"),
    [
        ("", "none", ()),
        ("ENVELOPE NONE", "none", ()),
        ("ENVELOPE UPSERT", "upsert", ()),
        ("ENVELOPE UPSERT (KEY (k))", "upsert", ("k",)),
        ("envelope upsert (key (a, b))", "upsert", ("a", "b")),
    ],
)
def test_envelopes(tail: str, envelope: str, keys: tuple[str, ...]) -> None:
    s = parse(f"CREATE SOURCE s FROM LOAD GENERATOR COUNTER {tail}")
    assert isinstance(s, CreateSource)
    assert (s.envelope, s.key_columns) == (envelope, keys)


@pytest.mark.parametrize(
    ("duration", "want"), [("'1h'", "1h"), ("'30 s'", "30s"), ("'500ms'", "500ms")]
)
def test_retain_history(duration: str, want: str) -> None:
    s = parse(f"CREATE SOURCE s FROM LOAD GENERATOR COUNTER WITH (RETAIN HISTORY FOR {duration})")
    assert isinstance(s, CreateSource)
    assert s.retain_history == want
    assert s.options == {}


def test_if_not_exists_defaults_to_false() -> None:
    s = parse("CREATE SOURCE s FROM LOAD GENERATOR COUNTER")
    assert isinstance(s, CreateSource)
    assert s.if_not_exists is False
    t = parse("CREATE SOURCE IF NOT EXISTS s FROM LOAD GENERATOR COUNTER")
    assert isinstance(t, CreateSource)
    assert (t.name, t.if_not_exists) == ("s", True)


# -- CREATE SOURCE: refusals -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "sqlstate", "in_message"),
    [
        ("CREATE SOURCE s FROM LOAD GENERATOR MQTT", "22023", ["'MQTT'", "KEY VALUE"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER extra", "22023", ["'COUNTER EXTRA'"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR", "22023", ["unknown load generator"]),
        (
            "CREATE SOURCE s FROM LOAD GENERATOR COUNTER WITH (RETAIN HISTORY FOR 'soon')",
            "22023",
            ["RETAIN HISTORY FOR", "'soon'"],
        ),
        (
            "CREATE SOURCE s FROM LOAD GENERATOR COUNTER WITH (RETAIN HISTORY FOR '1h', FOO 1)",
            "22023",
            ["'foo'"],
        ),
        ("CREATE SOURCE s FROM FILE '/x'", "22023", ["FORMAT"]),
        ("CREATE SOURCE s FROM FILE '/x' (HEADER TRUE)", "22023", ["FORMAT"]),
        ("CREATE SOURCE f (id foo) FROM FILE '/x' (FORMAT csv)", "42704", ["'id'", "'foo'"]),
        (
            "CREATE SOURCE f (a double precision extra) FROM FILE '/x' (FORMAT csv)",
            "42704",
            ["'double precision extra'"],
        ),
        ("CREATE SOURCE f (x varchar(10)) FROM FILE '/x' (FORMAT csv)", "42601", ["'('"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER (RATE 1, RATE 2)", "42601", ["RATE"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER (RATE -'a')", "42601", ["'-'"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER (RATE -TRUE)", "42601", ["'-'"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER ()", "42601", ["option name"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER (RATE)", "42601", ["'RATE'"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER (RATE 1 SEED 2)", "42601", ["'SEED'"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER (RATE 1", "42601", ["end of the statement"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER (RATE 1) extra", "42601", ["'extra'"]),
        ("CREATE SOURCE s FROM LOAD GENERATOR COUNTER ENVELOPE DEBEZIUM", "42601", ["'DEBEZIUM'"]),
        (
            "CREATE SOURCE s FROM LOAD GENERATOR COUNTER ENVELOPE UPSERT (KEYS (a))",
            "42601",
            ["'KEYS'"],
        ),
        ("CREATE SOURCE s FROM FILE path (FORMAT csv)", "42601", ["'path'", "string"]),
        ("CREATE SOURCE s FROM MQTT", "42601", ["'MQTT'", "LOAD GENERATOR, FILE, KAFKA"]),
        ("CREATE SOURCE FROM LOAD GENERATOR COUNTER", "42601", ["'LOAD'"]),
    ],
)
def test_create_source_refusals(sql: str, sqlstate: str, in_message: list[str]) -> None:
    refused(sql, sqlstate, *in_message)


# -- CREATE MATERIALIZED VIEW ------------------------------------------------------------------


def test_create_view_with_options() -> None:
    sql = (
        "CREATE MATERIALIZED VIEW IF NOT EXISTS v "
        "WITH (REFRESH EVERY '10s', RETAIN HISTORY FOR '1 h') "
        "AS SELECT k, count(*) FROM t GROUP BY k"
    )
    assert parse(sql) == CreateView(
        name="v",
        query="SELECT k, count(*) FROM t GROUP BY k",
        refresh_every="10s",
        retain_history="1h",
        if_not_exists=True,
        sql=sql,
    )


@pytest.mark.parametrize(
    "query",
    ["SELECT 1", "WITH x AS (SELECT 1) SELECT * FROM x", "VALUES (1), (2)", "TABLE t"],
)
def test_create_view_keeps_the_query_text(query: str) -> None:
    assert parse(f"CREATE MATERIALIZED VIEW v AS {query}") == CreateView(
        "v", query, sql=f"CREATE MATERIALIZED VIEW v AS {query}"
    )


@pytest.mark.parametrize(
    ("sql", "sqlstate", "in_message"),
    [
        ("CREATE MATERIALIZED VIEW v SELECT 1", "42601", ["'SELECT'", "AS"]),
        ("CREATE MATERIALIZED VIEW v AS", "42601", ["end of the statement", "query"]),
        ("CREATE MATERIALIZED VIEW v AS INSERT INTO t VALUES (1)", "42601", ["'INSERT'"]),
        (
            "CREATE MATERIALIZED VIEW v WITH (REFRESH EVERY 'often') AS SELECT 1",
            "22023",
            ["REFRESH EVERY", "'often'"],
        ),
        (
            "CREATE MATERIALIZED VIEW v WITH (RETAIN HISTORY FOR 5) AS SELECT 1",
            "22023",
            ["RETAIN HISTORY FOR", "'5'"],
        ),
        (
            "CREATE MATERIALIZED VIEW v WITH (REFRESH EVERY '1m', FOO 2) AS SELECT 1",
            "22023",
            ["'foo'"],
        ),
    ],
)
def test_create_view_refusals(sql: str, sqlstate: str, in_message: list[str]) -> None:
    refused(sql, sqlstate, *in_message)


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE VIEW v AS SELECT 1",
        "CREATE TABLE t (a int)",
        "CREATE INDEX i ON t (a)",
    ],
)
def test_other_creates_are_unsupported(sql: str) -> None:
    refused(sql, "0A000", "CREATE SOURCE", "CREATE MATERIALIZED VIEW", "CREATE SINK")


# -- CREATE SINK -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        (
            "CREATE SINK s FROM v INTO DELTA (URI '/tmp/d') KEY (k)",
            CreateSink("s", "v", "delta", {"table_uri": "/tmp/d"}, ("k",)),
        ),
        (
            "CREATE SINK IF NOT EXISTS s FROM shop.bids INTO KAFKA (BROKER 'h:9092', "
            "TOPIC 't', PROGRESS TOPIC 'p', KEY SCHEMA ID 3) KEY (id) FORMAT AVRO "
            "ENVELOPE DEBEZIUM WITH (VERSION 2)",
            CreateSink(
                "s",
                "shop.bids",
                "kafka",
                {
                    "bootstrap_servers": "h:9092",
                    "topic": "t",
                    "progress_topic": "p",
                    "key_schema_id": 3,
                    "format": "avro",
                },
                ("id",),
                "debezium",
                2,
                True,
            ),
        ),
        (
            "CREATE SINK s FROM v INTO POSTGRES (DSN 'host=h', TABLE 't', SCHEMA 'x') "
            "ENVELOPE APPEND",
            CreateSink(
                "s", "v", "postgres", {"dsn": "host=h", "table": "t", "schema": "x"}, (), "append"
            ),
        ),
    ],
)
def test_create_sink(sql: str, want: CreateSink) -> None:
    got = parse(sql)
    assert isinstance(got, CreateSink)
    assert dataclasses.replace(got, sql="") == want
    assert got.sql == sql


@pytest.mark.parametrize(
    ("sql", "sqlstate", "in_message"),
    [
        ("CREATE SINK s FROM v INTO S3 (URI 'x')", "22023", ["'S3'", "DELTA"]),
        ("CREATE SINK s FROM v INTO DELTA (TOPIC 'x')", "22023", ["'TOPIC'", "URI"]),
        ("CREATE SINK s FROM v INTO DELTA (URI 'x') ENVELOPE MERGE", "42601", ["'MERGE'"]),
        ("CREATE SINK s FROM v INTO DELTA (URI 'x') WITH (VERSION 'two')", "22023", ["'two'"]),
        ("CREATE SINK s INTO DELTA (URI 'x')", "42601", ["FROM"]),
    ],
)
def test_create_sink_refusals(sql: str, sqlstate: str, in_message: list[str]) -> None:
    refused(sql, sqlstate, *in_message)


# -- DROP --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("DROP SOURCE s", Drop("source", "s")),
        ("DROP SOURCE IF EXISTS a.b CASCADE", Drop("source", "a.b", True, True)),
        ("DROP SOURCE s RESTRICT", Drop("source", "s")),
        ("DROP MATERIALIZED VIEW v", Drop("view", "v")),
        ('DROP MATERIALIZED VIEW IF EXISTS "V" CASCADE', Drop("view", "V", True, True)),
        ("drop view v cascade", Drop("view", "v", False, True)),
    ],
)
def test_drop(sql: str, want: Drop) -> None:
    assert parse(sql) == want


@pytest.mark.parametrize(
    ("sql", "in_message"),
    [
        ("DROP TABLE t", ["'TABLE'", "SOURCE, SINK or MATERIALIZED VIEW"]),
        ("DROP SOURCE", ["end of the statement", "name"]),
        ("DROP SOURCE a b", ["'b'"]),
        ("DROP SOURCE a CASCADE RESTRICT", ["'RESTRICT'"]),
    ],
)
def test_drop_refusals(sql: str, in_message: list[str]) -> None:
    refused(sql, "42601", *in_message)


# -- SHOW, SHOW CREATE, EXPLAIN ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SHOW SOURCES", Show("sources")),
        ("SHOW MATERIALIZED VIEWS", Show("views")),
        ("SHOW VIEWS", Show("views")),
        ("SHOW SINKS", Show("sinks")),
        ("show objects", Show("objects")),
        ("SHOW CREATE SOURCE s", ShowCreate("source", "s")),
        ("SHOW CREATE MATERIALIZED VIEW a.b", ShowCreate("view", "a.b")),
        ('SHOW CREATE VIEW "My View"', ShowCreate("view", "My View")),
    ],
)
def test_show(sql: str, want: Show | ShowCreate) -> None:
    assert parse(sql) == want


@pytest.mark.parametrize(
    ("sql", "sqlstate", "in_message"),
    [
        ("SHOW TABLES", "0A000", ["SOURCES"]),
        ("SHOW SOURCES FROM x", "42601", ["'FROM'"]),
        ("SHOW CREATE TABLE k", "42601", ["'TABLE'"]),
        ("SHOW CREATE SOURCE", "42601", ["end of the statement"]),
    ],
)
def test_show_refusals(sql: str, sqlstate: str, in_message: list[str]) -> None:
    refused(sql, sqlstate, *in_message)


@pytest.mark.parametrize(
    ("sql", "name"),
    [
        ("EXPLAIN v", "v"),
        ("EXPLAIN MATERIALIZED VIEW v", "v"),
        ("EXPLAIN VIEW Auction.Bids", "auction.bids"),
        ('explain materialized view "V"', "V"),
    ],
)
def test_explain(sql: str, name: str) -> None:
    assert parse(sql) == Explain(name)


@pytest.mark.parametrize(
    ("sql", "in_message"), [("EXPLAIN", ["end of the statement"]), ("EXPLAIN v w", ["'w'"])]
)
def test_explain_refusals(sql: str, in_message: list[str]) -> None:
    refused(sql, "42601", *in_message)


# -- queries and AS OF -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SELECT 1", Query("SELECT 1")),
        ("  SELECT 1  ", Query("SELECT 1")),
        ("SELECT * FROM t AS OF 5", Query("SELECT * FROM t", 5)),
        ("SELECT * FROM t as of 42", Query("SELECT * FROM t", 42)),
        ("SELECT *\nFROM t\nAS OF 42", Query("SELECT *\nFROM t", 42)),
        ("TABLE t AS OF 3", Query("TABLE t", 3)),
        ("VALUES (1), (2)", Query("VALUES (1), (2)")),
        (
            "WITH x AS (SELECT 1) SELECT * FROM x AS OF 7",
            Query("WITH x AS (SELECT 1) SELECT * FROM x", 7),
        ),
        # before ORDER BY or LIMIT
        ("SELECT * FROM t AS OF 5 LIMIT 3", Query("SELECT * FROM t\nLIMIT 3", 5)),
        (
            "SELECT * FROM t AS OF 5\nORDER BY a LIMIT 3",
            Query("SELECT * FROM t\nORDER BY a LIMIT 3", 5),
        ),
        # not taken: inside parentheses, an alias named of, an incomplete AS OF
        ("SELECT * FROM (SELECT 1 AS of) s", Query("SELECT * FROM (SELECT 1 AS of) s")),
        (
            "SELECT * FROM (SELECT * FROM t AS OF 5) s",
            Query("SELECT * FROM (SELECT * FROM t AS OF 5) s"),
        ),
        ("SELECT 1 AS of", Query("SELECT 1 AS of")),
        ('SELECT 1 AS "of"', Query('SELECT 1 AS "of"')),
        ('SELECT a AS "of" FROM t', Query('SELECT a AS "of" FROM t')),
        ('SELECT 1 AS "of", 2', Query('SELECT 1 AS "of", 2')),
        ("SELECT a AS of FROM t", Query("SELECT a AS of FROM t")),
        ("SELECT a AS of FROM t AS OF 5", Query("SELECT a AS of FROM t", 5)),
        ("SELECT * FROM t AS OF", Query("SELECT * FROM t AS OF")),
        ("SELECT 'x AS OF 5'", Query("SELECT 'x AS OF 5'")),
    ],
)
def test_queries_and_as_of(sql: str, want: Query) -> None:
    assert parse(sql) == want


@pytest.mark.parametrize(
    ("sql", "in_message"),
    [
        ("SELECT * FROM t AS OF 1.5", ["'1.5'", "time"]),
        ("SELECT * FROM t AS OF 1e3", ["'1e3'", "time"]),
        ("SELECT * FROM t AS OF 1 AS OF 2", ["twice"]),
        ("SELECT * FROM t AS OF 1 LIMIT 2 AS OF 3", ["twice"]),
    ],
)
def test_bad_as_of(sql: str, in_message: list[str]) -> None:
    refused(sql, "42601", *in_message)


def test_a_line_comment_before_as_of_keeps_what_follows() -> None:
    q = parse("SELECT * FROM t -- newest first\nAS OF 5\nORDER BY a LIMIT 3")
    assert isinstance(q, Query)
    assert q.as_of == 5
    tree = postgres(q.query)
    assert tree.args.get("order") is not None
    assert tree.args.get("limit") is not None


@pytest.mark.parametrize(
    "sql", ["SELECT * FROM t AS OF 5 x", "SELECT * FROM t AS OF 5 WHERE a = 1"]
)
def test_as_of_elsewhere_is_refused(sql: str) -> None:
    refused(sql, "42601", "AS")


# -- SUBSCRIBE and COPY (SUBSCRIBE ...) TO STDOUT ----------------------------------------------


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SUBSCRIBE v", Subscribe("v")),
        ("SUBSCRIBE TO v", Subscribe("v")),
        ("SUBSCRIBE v AS OF 3", Subscribe("v", 3)),
        ("SUBSCRIBE v UP TO 9", Subscribe("v", None, 9)),
        ("SUBSCRIBE TO v AS OF 3 UP TO 9", Subscribe("v", 3, 9)),
        ('SUBSCRIBE "Auction.Bids" AS OF 0', Subscribe("Auction.Bids", 0)),
        ("COPY (SUBSCRIBE v) TO STDOUT", Subscribe("v")),
        ("COPY (SUBSCRIBE TO v AS OF 3 UP TO 9) TO STDOUT", Subscribe("v", 3, 9)),
        ("copy (subscribe to A.B up to 1) to stdout", Subscribe("a.b", None, 1)),
    ],
)
def test_subscribe(sql: str, want: Subscribe) -> None:
    assert parse(sql) == want


@pytest.mark.parametrize(
    ("sql", "sqlstate", "in_message"),
    [
        ("SUBSCRIBE v AS OF -1", "42601", ["'-'", "time"]),
        ("SUBSCRIBE v AS OF 'x'", "42601", ["'x'", "time"]),
        ("SUBSCRIBE v UP TO 1.5", "42601", ["'1.5'", "time"]),
        ("SUBSCRIBE v UP TO 9 AS OF 3", "42601", ["'AS'"]),
        ("SUBSCRIBE", "42601", ["end of the statement"]),
        ("COPY (SELECT 1) TO STDOUT", "0A000", ["SUBSCRIBE"]),
        ("COPY t TO STDOUT", "0A000", ["(SUBSCRIBE ...) TO STDOUT"]),
        ("COPY t FROM STDIN", "0A000", ["FROM STDIN", "timeshard copy"]),
        ("COPY (SUBSCRIBE v) TO 'out.txt'", "42601", ["TO STDOUT"]),
        ("COPY (SUBSCRIBE v TO STDOUT", "42601", ["')'"]),
        ("COPY (SUBSCRIBE v) TO STDOUT extra", "42601", ["'extra'"]),
    ],
)
def test_subscribe_refusals(sql: str, sqlstate: str, in_message: list[str]) -> None:
    refused(sql, sqlstate, *in_message)


# -- statements accepted and ignored; empty and unsupported ones --------------------------------


@pytest.mark.parametrize(
    ("sql", "tag"),
    [
        ("BEGIN", "BEGIN"),
        ("begin isolation level serializable", "BEGIN"),
        ("START TRANSACTION", "START TRANSACTION"),
        ("COMMIT", "COMMIT"),
        ("END", "COMMIT"),
        ("ROLLBACK", "ROLLBACK"),
        ("ABORT", "ROLLBACK"),
        ("SET extra_float_digits = 3", "SET"),
        ("SET application_name TO 'psql'", "SET"),
        ("DISCARD PLANS", "DISCARD"),
        ("RESET search_path", "RESET"),
    ],
)
def test_ignored_statements_answer_with_their_tag(sql: str, tag: str) -> None:
    assert parse(sql) == Ignored(tag)


@pytest.mark.parametrize(
    ("sql", "setting"),
    [
        ("SET statement_timeout = 100", Setting("statement_timeout", 100)),
        ("set session STATEMENT_TIMEOUT to '1.5s'", Setting("statement_timeout", 1500)),
        ("SET LOCAL statement_timeout = '2min'", Setting("statement_timeout", 120_000, True)),
        ("SET statement_timeout TO DEFAULT", Setting("statement_timeout", None)),
        ("SET statement_timeout = '400us'", Setting("statement_timeout", 1)),
        ("SET statement_timeout = 0", Setting("statement_timeout", 0)),
        ("RESET statement_timeout", Setting("statement_timeout", None, tag="RESET")),
        ("RESET ALL", Setting("all", None, tag="RESET")),
        ("DISCARD ALL", Setting("all", None, tag="DISCARD ALL")),
    ],
)
def test_statement_timeout_settings(sql: str, setting: Setting) -> None:
    assert parse(sql) == setting


def test_show_statement_timeout() -> None:
    assert parse("SHOW statement_timeout") == ShowSetting("statement_timeout")
    assert [show_timeout(ms) for ms in (0, 1500, 5000, 90_000, 3_600_000)] == [
        "0",
        "1500ms",
        "5s",
        "90s",
        "1h",
    ]


@pytest.mark.parametrize("sql", ["", "   \n", "-- a comment", "/* a comment */"])
def test_empty_statement(sql: str) -> None:
    assert parse(sql) == Empty()


@pytest.mark.parametrize(
    ("sql", "word"),
    [
        ("INSERT INTO t VALUES (1)", "'INSERT'"),
        ("update t set a = 1", "'UPDATE'"),
        ("DELETE FROM t", "'DELETE'"),
        ("ALTER SOURCE s RENAME TO t", "ALTER SOURCE is not supported"),
        ('"quoted"', "'quoted'"),
    ],
)
def test_unsupported_statements(sql: str, word: str) -> None:
    refused(sql, "0A000", word)


def test_unreadable_text_is_a_syntax_error() -> None:
    refused("SELECT 'unterminated", "42601", "cannot read")


# -- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("bids", "bids"),
        ("Bids", "bids"),
        ("BIDS", "bids"),
        ('"Bids"', "Bids"),
        ('"auction.bids"', "auction.bids"),
        ("auction.bids", "auction.bids"),
        ("Auction . Bids", "auction.bids"),
        ('"Auction".Bids', "Auction.bids"),
        ('"a""b"', 'a"b'),
        ('"select"', "select"),
        ("_x1", "_x1"),
    ],
)
def test_names(name: str, want: str) -> None:
    assert parse(f"DROP SOURCE {name}") == Drop("source", want)
    s = parse(f"CREATE SOURCE {name} FROM LOAD GENERATOR COUNTER")
    assert isinstance(s, CreateSource)
    assert s.name == want


@pytest.mark.parametrize("name", ["'s'", "1", "a.", "a.'b'"])
def test_bad_names(name: str) -> None:
    refused(f"DROP SOURCE {name}", "42601", "name")


# -- split -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SELECT 1", ["SELECT 1"]),
        ("SELECT 1; SELECT 2;", ["SELECT 1", "SELECT 2"]),
        ("SELECT ';'; SELECT 2", ["SELECT ';'", "SELECT 2"]),
        ("SELECT 'a'';b'; SELECT 2", ["SELECT 'a'';b'", "SELECT 2"]),
        ('SELECT "a;b"; SELECT 2', ['SELECT "a;b"', "SELECT 2"]),
        ("SELECT 1 -- x;y\n; SELECT 2", ["SELECT 1 -- x;y", "SELECT 2"]),
        ("SELECT 1 /* x;y */; SELECT 2", ["SELECT 1 /* x;y */", "SELECT 2"]),
        ("SELECT 1 /* a /* b */ ; */; SELECT 2", ["SELECT 1 /* a /* b */ ; */", "SELECT 2"]),
        ("SELECT $$a;b$$; SELECT 2", ["SELECT $$a;b$$", "SELECT 2"]),
        ("SELECT $t$a;b$t$; SELECT 2", ["SELECT $t$a;b$t$", "SELECT 2"]),
        ("SELECT E'a\\';b'; SELECT 2", ["SELECT E'a\\';b'", "SELECT 2"]),
        ("SELECT 'é'; SELECT 'ü;'", ["SELECT 'é'", "SELECT 'ü;'"]),
        (";;  ; \n", []),
        ("", []),
        ("-- only a comment\n;", []),
        ("SELECT 1;;; SELECT 2; -- done", ["SELECT 1", "SELECT 2"]),
        ("SELECT 1;\n-- c\nSELECT 2;", ["SELECT 1", "-- c\nSELECT 2"]),
    ],
)
def test_split(sql: str, want: list[str]) -> None:
    assert split(sql) == want


def test_split_pieces_parse() -> None:
    pieces = split(
        "BEGIN; CREATE SOURCE s FROM FILE 'a;b' (FORMAT csv); SELECT ';' AS OF 3; COMMIT"
    )
    assert [type(parse(p)) for p in pieces] == [Ignored, CreateSource, Query, Ignored]
    assert parse(pieces[2]) == Query("SELECT ';'", 3)


def test_split_refuses_unreadable_text() -> None:
    with pytest.raises(SqlError) as info:
        split("SELECT 1; SELECT 'unterminated")
    assert info.value.sqlstate == "42601"


# -- bind --------------------------------------------------------------------------------------


def test_bind_replaces_each_parameter() -> None:
    bound = bind("SELECT $2, $1, $2", [Param("a", 25), Param("7", 23)])
    assert bound == "SELECT CAST(7 AS INTEGER), 'a', CAST(7 AS INTEGER)"


def test_bind_reaches_beyond_nine() -> None:
    params = [Param(str(i), 23) for i in range(1, 12)]
    assert bind("SELECT $11, $10, $1", params) == (
        "SELECT CAST(11 AS INTEGER), CAST(10 AS INTEGER), CAST(1 AS INTEGER)"
    )


def test_bind_without_parameters_leaves_the_text() -> None:
    sql = "SELECT '$1' -- $2\n"
    assert bind(sql, []) == sql


@pytest.mark.parametrize(
    "value",
    [
        "it's",
        "''",
        "'; DROP SOURCE s; --",
        "a -- b",
        "x /* y",
        "$1",
        "$2 and $1",
        "semi;colon",
        'say "hi"',
        "back\\slash'",
        "$$",
        "line\nbreak",
        "",
    ],
)
def test_a_string_parameter_stays_one_literal(value: str) -> None:
    bound = bind("SELECT * FROM t WHERE name = $1 AS OF 5", [Param(value, 25)])
    assert split(bound) == [bound]
    q = parse(bound)
    assert isinstance(q, Query)
    assert q.as_of == 5
    found = literals(q.query)
    assert [(lit.this, lit.is_string) for lit in found] == [(value, True)]


def test_a_parameter_holding_placeholders_is_not_bound_again() -> None:
    bound = bind("SELECT $1, $2", [Param("$2", 25), Param("x", 25)])
    assert [lit.this for lit in literals(bound)] == ["$2", "x"]


def test_a_string_parameter_in_ddl() -> None:
    path = "/tmp/it's; -- here"
    s = parse(bind("CREATE SOURCE s FROM FILE $1 (FORMAT $2)", [Param(path, 25), Param("csv", 25)]))
    assert isinstance(s, CreateSource)
    assert s.options == {"path": path, "format": "csv"}


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SELECT '$1', $1", "SELECT '$1', 'v'"),
        ('SELECT "$1", $1', "SELECT \"$1\", 'v'"),
        ("SELECT $1 -- $1\n", "SELECT 'v' -- $1\n"),
        ("SELECT /* $1 */ $1", "SELECT /* $1 */ 'v'"),
        ("SELECT $$ $1 $$, $1", "SELECT $$ $1 $$, 'v'"),
        ("SELECT $q$ $1 $q$, $1", "SELECT $q$ $1 $q$, 'v'"),
        ("SELECT E'it\\'s $1', $1", "SELECT E'it\\'s $1', 'v'"),
    ],
)
def test_placeholders_in_strings_names_and_comments_stay(sql: str, want: str) -> None:
    assert bind(sql, [Param("v", 25)]) == want


@pytest.mark.parametrize(
    ("text", "oid", "want", "spark"),
    [
        ("42", 20, 42, "CAST(42 AS BIGINT)"),
        ("-7", 23, -7, "CAST(-7 AS INT)"),
        ("1.5", 701, 1.5, "CAST(1.5 AS DOUBLE)"),
        ("0.25", 700, 0.25, "CAST(0.25 AS FLOAT)"),
        ("-2.25", 1700, -2.25, "CAST(-2.25 AS DECIMAL(3, 2))"),
        ("1e3", 1700, 1000, "CAST(1000 AS DECIMAL(4, 0))"),
        ("1e3", 701, 1000.0, "CAST(1e3 AS DOUBLE)"),
        ("3", 21, 3, "CAST(3 AS SMALLINT)"),
        ("5", 26, 5, "CAST(5 AS BIGINT)"),
    ],
)
def test_numeric_parameters_become_numbers_of_their_type(
    text: str, oid: int, want: float, spark: str
) -> None:
    """A float8 bound as a bare literal, which Spark reads as a DECIMAL (``1.5``), and an
    int8 as whatever Spark made of its digits (an INT): the column's type followed the
    value, not the type the client declared."""
    bound = bind("SELECT $1", [Param(text, oid)])
    tree = postgres(bound)
    assert isinstance(tree, exp.Select)
    (value,) = tree.expressions
    assert isinstance(value, exp.Cast), bound
    assert not value.find(exp.Literal).is_string  # type: ignore[union-attr]
    assert value.this.to_py() == want
    assert sqlglot.transpile(bound, read="postgres", write="spark") == [f"SELECT {spark}"]


@pytest.mark.parametrize("oid", [20, 23, 701, 1700])
@pytest.mark.parametrize("text", ["abc", "", "1; DROP SOURCE s", "0x10", "1 2"])
def test_numeric_parameters_refuse_non_numbers(text: str, oid: int) -> None:
    with pytest.raises(SqlError) as info:
        bind("SELECT $1", [Param(text, oid)])
    assert info.value.sqlstate == "22P02"
    assert repr(text) in str(info.value)


def test_an_untyped_null_parameter_is_null() -> None:
    bound = bind("SELECT $1", [Param(None, 0)])
    assert bound == "SELECT NULL"
    assert isinstance(postgres(bound).expressions[0], exp.Null)


@pytest.mark.parametrize(
    ("oid", "spark"),
    [
        (16, "BOOLEAN"),
        (20, "BIGINT"),
        (23, "INT"),
        (25, "STRING"),
        (701, "DOUBLE"),
        (1700, "DECIMAL(38, 0)"),
    ],
)
def test_a_typed_null_parameter_is_a_null_of_its_type(oid: int, spark: str) -> None:
    bound = bind("SELECT $1", [Param(None, oid)])
    assert sqlglot.transpile(bound, read="postgres", write="spark") == [
        f"SELECT CAST(NULL AS {spark})"
    ]


@pytest.mark.parametrize(("text", "want"), [("t", "TRUE"), ("true", "TRUE"), ("f", "FALSE")])
def test_boolean_parameters(text: str, want: str) -> None:
    assert bind("SELECT $1", [Param(text, 16)]) == f"SELECT {want}"


def test_untyped_text_that_is_not_a_number_is_a_string() -> None:
    assert bind("SELECT $1", [Param("abc")]) == "SELECT 'abc'"


@pytest.mark.parametrize("text", ["007", "12", "1e3", "-5", ".5", " 3 "])
def test_untyped_parameters_are_strings_even_when_they_read_as_numbers(text: str) -> None:
    """OID 0 is PostgreSQL's ``unknown``, what psycopg sends for a ``str``: a string
    literal (``k = '007'`` must not compare with 7, nor ``SELECT '123'`` answer an int)."""
    tree = postgres(bind("SELECT $1", [Param(text)]))
    assert isinstance(tree, exp.Select)
    (value,) = tree.expressions
    assert isinstance(value, exp.Literal) and value.is_string, repr(value)
    assert value.this == text


@pytest.mark.parametrize(
    ("sql", "count", "in_message"),
    [
        ("SELECT $3", 2, "$3"),
        ("SELECT $0", 1, "$0"),
        ("SELECT $1", 0, "$1"),
        ("SELECT '$1', $2", 1, "$2"),
    ],
)
def test_a_parameter_beyond_those_given(sql: str, count: int, in_message: str) -> None:
    with pytest.raises(SqlError) as info:
        bind(sql, [Param("x", 25)] * count)
    assert info.value.sqlstate == "08P01"
    assert in_message in str(info.value)


def test_a_negative_number_after_a_minus_stays_a_number() -> None:
    bound = bind("SELECT 1-$1, 2", [Param("-5", 23)])
    tree = postgres(bound)
    assert isinstance(tree, exp.Select)
    assert len(tree.expressions) == 2
    sub = tree.expressions[0]
    assert isinstance(sub, exp.Sub)
    assert isinstance(sub.expression, exp.Cast)
    assert sub.expression.this.to_py() == -5


@pytest.mark.parametrize(
    ("sql", "params", "want"),
    [
        (
            "SUBSCRIBE v AS OF $1 UP TO $2",
            [Param("3", 20), Param("9", 1700)],
            Subscribe("v", 3, 9),
        ),
        (
            "SELECT * FROM t AS OF $1 ORDER BY k",
            [Param("7", 23)],
            Query("SELECT * FROM t\nORDER BY k", 7),
        ),
        ("FETCH $1 c", [Param("4", 21)], Fetch("c", 4)),
    ],
)
def test_typed_whole_number_parameters_are_times_and_counts(
    sql: str, params: list[Param], want: object
) -> None:
    """A typed parameter binds as a cast of its literal: AS OF, UP TO and a FETCH count
    read it as the number it holds."""
    assert parse(bind(sql, params)) == want


@pytest.mark.parametrize(
    ("param", "message"),
    [(Param("1.5", 701), "1.5"), (Param("-3", 20), "-3"), (Param("t", 16), "TRUE")],
)
def test_a_time_parameter_that_is_no_whole_number_is_refused(param: Param, message: str) -> None:
    with pytest.raises(SqlError, match=message) as refused:
        parse(bind("SUBSCRIBE v AS OF $1", [param]))
    assert refused.value.sqlstate in ("22023", "42601")


def test_typed_parameters_in_options_are_their_values() -> None:
    sql = "CREATE SOURCE s FROM LOAD GENERATOR COUNTER (RATE $1, KEYS $2, A $3, B $4, C $5)"
    params = [Param("0.5", 701), Param("-2", 20), Param("nan", 700), Param("2.50", 1700)]
    statement = parse(bind(sql, [*params, Param("t", 16)]))
    assert isinstance(statement, CreateSource)
    options = dict(statement.options)
    assert options.pop("a") != options.get("a")  # NaN
    assert options == {"rate": 0.5, "keys": -2, "b": 2.5, "c": True}


@pytest.mark.parametrize("oid", [0, 16, 20, 21, 23, 25, 26, 700, 701, 1700, 1082])
@pytest.mark.parametrize("value", ["0", "12345678901", "-1.5e3", "t", "", None])
def test_a_placeholder_binds_to_the_type_every_value_does(oid: int, value: str | None) -> None:
    """Describe binds placeholders, Execute the values: the SQL types must be the same."""

    def spark_type(param: Param) -> str | None:
        try:
            bound = bind("SELECT $1", [param])
        except SqlError:  # not a value of the type: Execute refuses it
            return None
        (select,) = sqlglot.transpile(bound, read="postgres", write="spark")
        cast = sqlglot.parse_one(select, read="spark").find(exp.Cast)
        if cast is None:
            literal = sqlglot.parse_one(select, read="spark").expressions[0]
            if isinstance(literal, exp.Null):
                return "NULL"
            return "BOOLEAN" if isinstance(literal, exp.Boolean) else "STRING"
        to = cast.to
        return "DECIMAL" if to.this == exp.DataType.Type.DECIMAL else to.sql("spark")

    got = spark_type(Param(value, oid))
    if got is None or (value is None and oid == 0) or (oid == 1700 and value == "12345678901" * 4):
        return
    assert got == spark_type(placeholder(oid)), (oid, value)


@pytest.mark.parametrize(
    ("text", "oid"),
    [("+inf", 701), ("-nan", 701), ("+Infinity", 0), ("1_000", 20), ("1_0", 0), ("١٢", 0)],
)
def test_a_number_parameter_never_becomes_a_name(text: str, oid: int) -> None:
    try:
        bound = bind("SELECT $1", [Param(text, oid)])
    except SqlError as e:
        assert e.sqlstate == "22P02"
        return
    tree = postgres(bound)
    assert isinstance(tree, exp.Select)
    assert len(tree.expressions) == 1
    assert tree.find(exp.Identifier) is None, repr(tree)


# -- properties --------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_parameter_is_exactly_one_string_literal(value: str) -> None:
    tree = postgres(bind("SELECT $1", [Param(value, 25)]))
    assert isinstance(tree, exp.Select)
    assert len(tree.expressions) == 1
    found = list(tree.find_all(exp.Literal))
    assert len(found) == 1
    assert found[0].is_string
    assert found[0].this == value


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(), max_size=5))
def test_bound_statements_split_back_apart(values: list[str]) -> None:
    statements = [bind("SELECT $1", [Param(v, 25)]) for v in values]
    assert split(";\n".join(statements)) == statements


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.sampled_from([20, 23, 1700]))
def test_any_integer_parameter_is_that_number(n: int, oid: int) -> None:
    tree = postgres(bind("SELECT $1", [Param(str(n), oid)]))
    assert isinstance(tree, exp.Select)
    assert isinstance(tree.expressions[0], exp.Cast)
    assert tree.expressions[0].this.to_py() == n


# -- CREATE SOURCE ... FROM KAFKA | POSTGRES | MYSQL -------------------------------------------


@pytest.mark.parametrize(
    ("sql", "options"),
    [
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:9092', TOPIC 'orders')",
            {"bootstrap_servers": "h:9092", "topic": "orders"},
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKERS 'a:1,b:2', TOPIC 't') FORMAT TEXT",
            {"bootstrap_servers": "a:1,b:2", "topic": "t", "value_format": "text"},
        ),
        (
            "create source k from kafka (bootstrap servers = 'h:1', topic = 't') format bytes",
            {"bootstrap_servers": "h:1", "topic": "t", "value_format": "bytes"},
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't', GROUP ID 'g', TIMEOUT S 2.5, "
            "SCHEMA REGISTRY URL 'http://r:8081', VALUE SCHEMA FILE 'v.avsc', "
            "KEY SCHEMA FILE 'k.avsc') KEY FORMAT AVRO VALUE FORMAT AVRO",
            {
                "bootstrap_servers": "h:1",
                "topic": "t",
                "group_id": "g",
                "timeout_s": 2.5,
                "schema_registry_url": "http://r:8081",
                "value_schema_file": "v.avsc",
                "key_schema_file": "k.avsc",
                "key_format": "avro",
                "value_format": "avro",
            },
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't', VALUE AVRO SCHEMA '{}') "
            "VALUE FORMAT AVRO INCLUDE PARTITION, OFFSET, TIMESTAMP, HEADERS",
            {
                "bootstrap_servers": "h:1",
                "topic": "t",
                "value_avro_schema": "{}",
                "value_format": "avro",
                "metadata": ["partition", "offset", "timestamp", "headers"],
            },
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') KEY FORMAT TEXT "
            "VALUE FORMAT BYTES",
            {
                "bootstrap_servers": "h:1",
                "topic": "t",
                "key_format": "text",
                "value_format": "bytes",
            },
        ),
    ],
)
def test_kafka_source_options(sql: str, options: dict[str, object]) -> None:
    assert parse(sql) == CreateSource("k", "kafka", options, sql=sql)


def test_kafka_source_with_json_key_value_columns_and_upsert() -> None:
    sql = (
        "CREATE SOURCE IF NOT EXISTS orders (status text, total double precision) "
        "FROM KAFKA (BROKER '127.0.0.1:9092', TOPIC 'orders') "
        'KEY FORMAT JSON (id bigint, "Region" text) VALUE FORMAT JSON INCLUDE OFFSET '
        "ENVELOPE UPSERT (KEY (id, \"Region\")) WITH (RETAIN HISTORY FOR '1h')"
    )
    assert parse(sql) == CreateSource(
        name="orders",
        kind="kafka",
        options={
            "bootstrap_servers": "127.0.0.1:9092",
            "topic": "orders",
            "key_format": "json",
            "key_schema": {"id": "int64", "Region": "string"},
            "value_format": "json",
            "metadata": ["offset"],
        },
        columns={"status": "string", "total": "float64"},
        envelope="upsert",
        key_columns=("id", "Region"),
        retain_history="1h",
        if_not_exists=True,
        sql=sql,
    )


@pytest.mark.parametrize(
    ("tables_sql", "tables"),
    [
        ("FOR TABLES (orders)", ["orders"]),
        (
            'FOR TABLES (orders, sales.items, "Mixed", "odd.name")',
            ["orders", "sales.items", "Mixed", "odd.name"],
        ),
        ("for tables (Orders)", ["orders"]),
        ("FOR ALL TABLES", None),
    ],
)
def test_postgres_source(tables_sql: str, tables: list[str] | None) -> None:
    sql = (
        "CREATE SOURCE shop FROM POSTGRES (DSN 'host=db user=repl dbname=shop', "
        f"PUBLICATION 'shop_pub', SLOT 'shop_slot', CONNECT TIMEOUT S 5) {tables_sql}"
    )
    options: dict[str, object] = {
        "dsn": "host=db user=repl dbname=shop",
        "publication": "shop_pub",
        "slot": "shop_slot",
        "connect_timeout_s": 5,
    }
    if tables is not None:  # FOR ALL TABLES: no ``tables``, every table of the publication
        options["tables"] = tables
    assert parse(sql) == CreateSource("shop", "postgres", options, sql=sql)


@pytest.mark.parametrize(
    ("tables_sql", "tables"),
    [("FOR TABLES (users, orders)", ["users", "orders"]), ("FOR ALL TABLES", None)],
)
def test_mysql_source(tables_sql: str, tables: list[str] | None) -> None:
    sql = (
        "CREATE SOURCE legacy FROM MYSQL (URL 'mysql://repl@db:3306/legacy', "
        f"CONNECT TIMEOUT S 3) {tables_sql} WITH (RETAIN HISTORY FOR '15m')"
    )
    options: dict[str, object] = {"url": "mysql://repl@db:3306/legacy", "connect_timeout_s": 3}
    if tables is not None:
        options["tables"] = tables
    assert parse(sql) == CreateSource("legacy", "mysql", options, retain_history="15m", sql=sql)


def test_a_postgres_dsn_is_kept_as_given() -> None:
    """A password is the engine's to refuse (it needs libpq's reading of the DSN)."""
    s = parse(
        "CREATE SOURCE p FROM POSTGRES (DSN 'postgresql://u:pw@h/db', PUBLICATION 'p') "
        "FOR ALL TABLES"
    )
    assert isinstance(s, CreateSource)
    assert s.options["dsn"] == "postgresql://u:pw@h/db"


@pytest.mark.parametrize(
    ("sql", "sqlstate", "in_message"),
    [
        ("CREATE SOURCE k FROM KAFKA", "42601", ["end of the statement", "'('"]),
        ("CREATE SOURCE k FROM KAFKA (BROKER 'h:1')", "22023", ["KAFKA", "needs TOPIC"]),
        ("CREATE SOURCE k FROM KAFKA (TOPIC 't')", "22023", ["needs BROKER"]),
        ("CREATE SOURCE k FROM KAFKA (GROUP ID 'g')", "22023", ["needs BROKER and TOPIC"]),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't', START OFFSET 5)",
            "22023",
            ["no option 'START_OFFSET'", "GROUP ID", "SCHEMA REGISTRY URL"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't', VALUE FORMAT 'json')",
            "22023",
            ["'VALUE_FORMAT'", "FORMAT f"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't', METADATA 'offset')",
            "22023",
            ["'METADATA'", "INCLUDE"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', BOOTSTRAP SERVERS 'h:2', TOPIC 't')",
            "42601",
            ["BOOTSTRAP_SERVERS", "twice"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't', TOPIC 'u')",
            "42601",
            ["TOPIC", "twice"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') FORMAT CSV",
            "22023",
            ["JSON, TEXT, BYTES, AVRO", "'CSV'"],
        ),
        ("CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') FORMAT", "22023", ["format"]),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') KEY FORMAT JSON",
            "42601",
            ["KEY FORMAT JSON (id bigint)"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') KEY FORMAT TEXT (k text)",
            "42601",
            ["only a JSON key"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') KEY FORMAT JSON (id foo)",
            "42704",
            ["'foo'"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') INCLUDE PARTITION, KEY",
            "22023",
            ["INCLUDE", "KEY"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') INCLUDE OFFSET, OFFSET",
            "22023",
            ["distinct"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') FORMAT JSON VALUE FORMAT JSON",
            "42601",
            ["'VALUE'"],
        ),
        (
            "CREATE SOURCE k FROM KAFKA (BROKER 'h:1', TOPIC 't') FOR ALL TABLES",
            "42601",
            ["'FOR'"],
        ),
        ("CREATE SOURCE p FROM POSTGRES (DSN 'x')", "22023", ["POSTGRES", "needs PUBLICATION"]),
        ("CREATE SOURCE p FROM POSTGRES (PUBLICATION 'p')", "22023", ["needs DSN"]),
        (
            "CREATE SOURCE p FROM POSTGRES (DSN 'x', PUBLICATION 'p')",
            "42601",
            ["end of the statement", "FOR TABLES (table, ...) or FOR ALL TABLES"],
        ),
        (
            "CREATE SOURCE p FROM POSTGRES (DSN 'x', PUBLICATION 'p') FOR TABLES ()",
            "42601",
            ["at least one table"],
        ),
        (
            "CREATE SOURCE p FROM POSTGRES (DSN 'x', PUBLICATION 'p') FOR TABLES",
            "42601",
            ["'('"],
        ),
        (
            "CREATE SOURCE p FROM POSTGRES (DSN 'x', PUBLICATION 'p') FOR TABLES (a, a)",
            "22023",
            ["twice"],
        ),
        (
            "CREATE SOURCE p FROM POSTGRES (DSN 'x', PUBLICATION 'p') FOR TABLES ('a')",
            "42601",
            ["name"],
        ),
        (
            "CREATE SOURCE p FROM POSTGRES (DSN 'x', PUBLICATION 'p') FOR ALL TABLES extra",
            "42601",
            ["'extra'"],
        ),
        (
            "CREATE SOURCE p FROM POSTGRES (DSN 'x', PUBLICATION 'p', TABLES 'a') FOR ALL TABLES",
            "22023",
            ["no option 'TABLES'", "FOR TABLES", "SLOT"],
        ),
        (
            "CREATE SOURCE p FROM POSTGRES (DSN 'x', PUBLICATION 'p', TOPIC 't') FOR ALL TABLES",
            "22023",
            ["no option 'TOPIC'"],
        ),
        ("CREATE SOURCE m FROM MYSQL (CONNECT TIMEOUT S 1) FOR ALL TABLES", "22023", ["URL"]),
        (
            "CREATE SOURCE m FROM MYSQL (URL 'mysql://h/db', DSN 'x') FOR ALL TABLES",
            "22023",
            ["no option 'DSN'", "CONNECT TIMEOUT S, URL"],
        ),
        ("CREATE SOURCE m FROM MYSQL (URL 'mysql://h/db') FOR TABLES ()", "42601", ["one table"]),
        ("CREATE SOURCE m FROM MYSQL (URL 'mysql://h/db') FOR SOME TABLES", "42601", ["'FOR'"]),
    ],
)
def test_connector_source_refusals(sql: str, sqlstate: str, in_message: list[str]) -> None:
    refused(sql, sqlstate, *in_message)


# -- cursors: DECLARE, FETCH and CLOSE ----------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("DECLARE c CURSOR FOR SUBSCRIBE v", Declare("c", Subscribe("v"))),
        (
            "declare C cursor without hold for subscribe to v as of 3 up to 9",
            Declare("c", Subscribe("v", 3, 9)),
        ),
        ('DECLARE "Cur" NO SCROLL CURSOR FOR SELECT 1', Declare("Cur", Query("SELECT 1"))),
        (
            "DECLARE q CURSOR FOR SELECT a FROM v AS OF 7 ORDER BY a",
            Declare("q", Query("SELECT a FROM v\nORDER BY a", 7)),
        ),
        ("DECLARE q CURSOR FOR VALUES (1), (2)", Declare("q", Query("VALUES (1), (2)"))),
    ],
)
def test_declare(sql: str, want: Declare) -> None:
    assert parse(sql) == want


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("FETCH c", Fetch("c", 1)),
        ("FETCH NEXT FROM c", Fetch("c", 1)),
        ("FETCH ALL c", Fetch("c", None)),
        ("fetch forward all from c", Fetch("c", None)),
        ("FETCH 100 IN c", Fetch("c", 100)),
        ("FETCH FORWARD 0 c", Fetch("c", 0)),
        ('FETCH 2 "Cur"', Fetch("Cur", 2)),
        ("FETCH ALL c WITH (TIMEOUT = '1s')", Fetch("c", None, 1.0)),
        ("FETCH ALL c WITH (TIMEOUT = '500ms')", Fetch("c", None, 0.5)),
        ("FETCH ALL c WITH (TIMEOUT = '0s')", Fetch("c", None, 0.0)),
        ("FETCH c WITH (timeout '2 m')", Fetch("c", 1, 120.0)),
        ("FETCH c WITH (TIMEOUT = 0.25)", Fetch("c", 1, 0.25)),
        ("FETCH c WITH (TIMEOUT 3)", Fetch("c", 1, 3.0)),
    ],
)
def test_fetch(sql: str, want: Fetch) -> None:
    assert parse(sql) == want


@pytest.mark.parametrize(
    ("sql", "want"),
    [("CLOSE c", CloseCursor("c")), ('close "C"', CloseCursor("C")), ("CLOSE ALL", None)],
)
def test_close(sql: str, want: CloseCursor | None) -> None:
    assert parse(sql) == (want or CloseCursor(None))


def test_a_timeout_bound_as_a_parameter_is_a_duration() -> None:
    sql = bind("FETCH ALL c WITH (TIMEOUT = $1)", [Param("'0s'; CLOSE c", 25)])
    refused(sql, "22023", "TIMEOUT", "CLOSE c")
    assert parse(bind("FETCH ALL c WITH (TIMEOUT = $1)", [Param("10s", 25)])) == Fetch(
        "c", None, 10.0
    )


@pytest.mark.parametrize(
    ("sql", "sqlstate", "in_message"),
    [
        ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", "0A000", ["WITH HOLD"]),
        ("DECLARE c SCROLL CURSOR FOR SELECT 1", "42601", ["'SCROLL'", "CURSOR"]),
        ("DECLARE c CURSOR SELECT 1", "42601", ["'SELECT'", "FOR"]),
        ("DECLARE c CURSOR FOR", "42601", ["end of the statement", "SUBSCRIBE"]),
        ("DECLARE c CURSOR FOR SHOW SOURCES", "42601", ["'SHOW'", "query"]),
        ("DECLARE c CURSOR FOR COPY (SUBSCRIBE v) TO STDOUT", "42601", ["'COPY'"]),
        ("DECLARE c CURSOR FOR SUBSCRIBE v extra", "42601", ["'extra'"]),
        ("DECLARE a.b CURSOR FOR SELECT 1", "42601", ["'.'", "CURSOR"]),
        ("FETCH", "42601", ["end of the statement", "name"]),
        ("FETCH ALL", "42601", ["end of the statement", "name"]),
        ("FETCH 1.5 c", "42601", ["'1.5'", "whole number"]),
        ("FETCH - c", "42601", ["'c'", "whole number"]),
        ("FETCH c extra", "42601", ["'extra'"]),
        ("FETCH c WITH (TIMEOUT = 'soon')", "22023", ["TIMEOUT", "'soon'"]),
        ("FETCH c WITH (TIMEOUT = -1)", "22023", ["TIMEOUT", "negative"]),
        ("FETCH c WITH (TIMEOUT = true)", "22023", ["TIMEOUT", "True"]),
        ("FETCH c WITH (LIMIT 3)", "22023", ["'limit'", "TIMEOUT"]),
        ("CLOSE", "42601", ["end of the statement"]),
        ("CLOSE a b", "42601", ["'b'"]),
    ],
)
def test_cursor_refusals(sql: str, sqlstate: str, in_message: list[str]) -> None:
    refused(sql, sqlstate, *in_message)


# -- ALTER SYSTEM PROMOTE ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql", ["ALTER SYSTEM PROMOTE", "alter system promote", " Alter System Promote\n"]
)
def test_promote(sql: str) -> None:
    assert parse(sql) == Promote()


@pytest.mark.parametrize(
    ("sql", "sqlstate", "in_message"),
    [
        ("ALTER SYSTEM", "42601", ["end of the statement", "PROMOTE"]),
        ("ALTER SYSTEM SET x = 1", "42601", ["'SET'", "PROMOTE"]),
        ("ALTER SYSTEM PROMOTE now", "42601", ["'now'"]),
        ("ALTER SYSTEM RESET ALL", "42601", ["'RESET'"]),
        ("ALTER", "0A000", ["ALTER SYSTEM PROMOTE"]),
        ("ALTER SINK s SET (x = 1)", "0A000", ["ALTER SINK", "ALTER SYSTEM PROMOTE"]),
    ],
)
def test_promote_refusals(sql: str, sqlstate: str, in_message: list[str]) -> None:
    refused(sql, sqlstate, *in_message)


def test_an_integer_parameter_that_is_no_integer_is_refused() -> None:
    """``1.5`` as an int8 was cast to BIGINT, silently 1; PostgreSQL answers 22P02."""
    from timeshard.server.statements import Param, bind

    for text in ("1.5", "1e3", "x"):
        with pytest.raises(SqlError) as info:
            bind("SELECT $1", [Param(text, 20)])
        assert info.value.sqlstate == "22P02"
    assert bind("SELECT $1", [Param(" +5 ", 20)]) == "SELECT CAST(5 AS BIGINT)"


def test_a_numeric_parameter_past_38_digits_is_the_nearest_double() -> None:
    """It was written out in full, a literal Spark refuses (before, Spark read the text
    ``1.5E+40`` as a DOUBLE)."""
    from timeshard.server.statements import Param, bind

    assert bind("SELECT $1", [Param("1.5E+40", 1700)]) == "SELECT CAST('1.5E+40' AS DOUBLE)"
    assert bind("SELECT $1", [Param("-1.5E+40", 1700)]) == "SELECT CAST('-1.5E+40' AS DOUBLE)"


def test_a_whole_numeric_limit_is_an_int() -> None:
    """``LIMIT $1`` bound with a numeric is ``LIMIT CAST(2 AS DECIMAL(1, 0))``, which Spark
    refuses (it worked before parameters were cast)."""
    from timeshard.server.engine import _int_limits

    tree = sqlglot.parse_one(
        "SELECT 1 LIMIT CAST(2 AS DECIMAL(1, 0)) OFFSET CAST(1 AS BIGINT)", read="spark"
    )
    _int_limits(tree)
    assert tree.sql("spark") == "SELECT 1 LIMIT CAST(2 AS INT) OFFSET CAST(1 AS INT)"
    fraction = sqlglot.parse_one("SELECT 1 LIMIT CAST(2.5 AS DECIMAL(2, 1))", read="spark")
    _int_limits(fraction)
    assert "DECIMAL(2, 1)" in fraction.sql("spark")  # not a whole number: Spark says so


def test_a_json_parameter_nested_past_the_recursion_limit_is_22p02() -> None:
    """Python's decoder raised RecursionError: an internal error (XX000)."""
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(SqlError, match="invalid input syntax for type json") as refused:
        bind("SELECT $1", [Param(deep, 114)])
    assert refused.value.sqlstate == "22P02"


@pytest.mark.parametrize(
    ("sql", "bound"),
    [
        ("SELECT $1, ''", "SELECT 'x', ''"),
        ("SELECT $1 || '' || $2", "SELECT 'x' || '' || 'y'"),
        ("SELECT $1, 'it''s'", "SELECT 'x', 'it''s'"),
        ("SELECT $1, $$a''b$$", "SELECT 'x', $$a''b$$"),
    ],
)
def test_a_parameter_before_a_doubled_quote_is_read(sql: str, bound: str) -> None:
    """sqlglot's tokenizer read ``$`` as a dollar quote's start and looked for its tag up
    to the next ``$``; the doubled quote it passed made it rewind to the wrong place, and
    the statement was refused (``cannot read the statement``)."""
    assert parameter_count(sql) == sql.count("$") - 2 * sql.count("$$")
    assert bind(sql, [Param("x"), Param("y")][: parameter_count(sql)]) == bound
    assert interval_parameters(sql.replace("$1", "$1::interval", 1)) == {1}
    assert parse(sql) == Query(sql)
