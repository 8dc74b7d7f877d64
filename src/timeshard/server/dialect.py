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
* ``INTERVAL '1 day' + '2020-01-01'::date`` adds the interval to the date, as in
  PostgreSQL: sqlglot's reader read a string after an interval (and an optional ``+``)
  as another interval to sum with it (``INTERVAL '1' DAY '2' HOUR``, which PostgreSQL
  has not), so the cast took the sum (``CAST(INTERVAL '1' DAY + INTERVAL '2020-01-01'
  AS DATE)``). A string cast, indexed, multiplied or divided there is no interval of a
  sum: the interval ends before the ``+``. (``INTERVAL '1 day' + '2 hours'`` stays a sum,
  as PostgreSQL reads the string as an interval there.)
* ``$`` before a digit is a parameter (``$1``), as PostgreSQL's lexer reads it, never
  the start of a dollar-quoted string's tag: sqlglot's tokenizer looked for a tag up to
  the next ``$``, and a doubled quote (``''``) after the parameter made it rewind to the
  wrong place and refuse the statement (``SELECT $1, ''``). Where sqlglot's tokenizer is
  compiled (sqlglotc), its core takes no subclass: serve then reads with the stock one,
  and says so once in its log (:func:`_parameter_core`).

A function's node keeps how it was called, in its ``meta``, for serve's 42883 of a text
function of a number, or of a call of more or fewer arguments than PostgreSQL's function
takes, to name the call as PostgreSQL does (:data:`CALLED`, :data:`NAMED`, :data:`GIVEN`,
:data:`DROPPED`, :data:`STANDARD`): sqlglot's node of ``lpad(s, 3, 'x', 'y')`` holds
three arguments (its Spark SQL has three, as before), of ``substr`` and ``substring`` one
class, of ``trim(s)`` and ``btrim(s)`` one. The tree and its SQL are as sqlglot reads them.

Every reader of a client's SQL in :mod:`timeshard.server` parses with
:data:`DIALECT`, so a statement means one thing to all of them; but a view's query
recorded before serve typed views' queries, which is read with
:data:`STORED_DIALECT` (an interval's text as sqlglot read it then).

Known limitation: a materialized view is recorded as its PostgreSQL text and re-read
with :data:`DIALECT` when a server restores it (``Engine._create(record=False)``). A
view recorded before ``map(k, v)`` was read as Spark's ``map`` ran as
``map_from_arrays`` (``map(ARRAY['a'], ARRAY[1])``: ``map<string,int>``); it now reads
as a map of one array to another (``map<array<string>,array<int>>``), and does not
restore: its shard's schema differs. Recreate such a view with ``map_from_arrays``
written out. (Restoring a recorded view from the Spark SQL it ran as, or retrying with
the former reading on a schema mismatch, would keep it; neither is done.)

Pure Python, no Spark.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from sqlglot import TokenType, exp, parser
from sqlglot.dialects.postgres import Postgres
from sqlglot.parsers.postgres import PostgresParser
from sqlglot.tokenizer_core import TokenizerCore
from sqlglot.tokens import SQLGLOTC_INSTALLED

log = logging.getLogger(__name__)


def _spark_map(args: list[Any]) -> exp.Expr:
    """Spark's ``map(k1, v1, ...)``: a map of its keys and values; a call of ``map`` as
    written when the arguments do not pair up."""
    if len(args) % 2:
        return exp.Anonymous(this="map", expressions=args)
    return parser.build_var_map(args)


def _parameter_core() -> type[TokenizerCore] | None:
    """sqlglot's tokenizer core, reading ``$`` before a digit as a parameter; None (logged)
    where its core is compiled (sqlglotc, sqlglot's ``c`` extra): a compiled class
    refuses an interpreted subclass, and its compiled methods would call their own
    ``_scan_string``. The stock core then reads the statements, all but one of a
    parameter before ``''`` (``SELECT $1, ''``), which it refuses."""
    if not SQLGLOTC_INSTALLED:
        try:

            class _ParameterCore(TokenizerCore):
                __slots__ = ()

                def _scan_string(self, start: str) -> bool:
                    if start == "$" and self._peek.isdigit():
                        self._add(TokenType.PARAMETER)  # its digits: the NUMBER that follows
                        return True
                    return bool(super()._scan_string(start))

            return _ParameterCore
        except TypeError:
            pass
    log.warning(
        "sqlglot's tokenizer is compiled (sqlglotc): a $n parameter before '' "
        "(SELECT $1, '') is refused"
    )
    return None


_PARAMETER_CORE = _parameter_core()


#: What binds a string after an interval to what follows it, ahead of a ``+`` before it
#: (``'2020-01-01'::date``, ``'2' * 3``): no interval, as sqlglot would sum it.
_OPERAND_OF = frozenset(
    {TokenType.DCOLON, TokenType.L_BRACKET, TokenType.STAR, TokenType.SLASH, TokenType.MOD}
)


#: The ``meta`` key of the name a text function was called by (``substr``, ``ltrim``).
CALLED = "serve_called"
#: The ``meta`` key of the number of arguments a text function was called with.
GIVEN = "serve_given"
#: The ``meta`` key of the arguments of a call its node does not hold (``lpad``'s fourth).
DROPPED = "serve_dropped"
#: The ``meta`` key of the arguments of a call as written, in order (``log10(f, 1)``'s
#: ``f`` and ``1``, where its node holds ``LOG(10, f)``).
WRITTEN = "serve_written"
#: The ``meta`` key of the name PostgreSQL looks a call's function up by: as written where
#: it is quoted (``"UPPER"(s)``: ``UPPER``), else folded to lower case (``LPAD``: ``lpad``).
NAMED = "serve_named"
#: The ``meta`` key of sqlglot's error for a call of more arguments than its node has
#: slots for (``upper(s, 1)``), or fewer than it requires (``lpad(s)``), which it
#: refused as it parsed: :func:`overfull`.
OVERFULL = "serve_overfull"
#: The ``meta`` key marking a ``NOT`` written inside the predicate it negates (``x NOT
#: BETWEEN a AND b``, ``x NOT IN (a, b)``), not before it (``NOT x BETWEEN a AND b``):
#: PostgreSQL resolves other operators for them (``x < a``, ``x <> a``).
NEGATED = "serve_negated"
#: The ``meta`` key marking a call in the SQL standard's syntax (``trim(leading from s)``,
#: ``substring(s FROM 1)``, ``overlay(s PLACING 'x' FROM 1)``), which PostgreSQL's
#: grammar makes a call of ``pg_catalog``'s function.
STANDARD = "serve_standard"

#: The text functions whose node's class is another's, or drops an argument, and Spark's
#: ``nvl`` and ``ifnull`` (sqlglot's ``COALESCE``): each call's node keeps its name and
#: arguments (:func:`_keeping_call`), as written where its name is quoted (``"SUBSTR"``).
_RENAMED_OR_DROPPING = ("LPAD", "RPAD", "LTRIM", "RTRIM", "BTRIM", "SUBSTR", "NVL", "IFNULL")


def _kept(node: exp.Expr, args: list[Any]) -> exp.Expr:
    """``node`` built of ``args``, with their number (:data:`GIVEN`) and those it does not
    hold (:data:`DROPPED`) in its ``meta``."""
    held = {id(v) for v in node.iter_expressions()}
    node.meta[GIVEN] = len(args)
    node.meta[WRITTEN] = [a for a in args if isinstance(a, exp.Expr)]
    dropped = [a for a in args if isinstance(a, exp.Expr) and id(a) not in held]
    if dropped:
        node.meta[DROPPED] = dropped
    return node


def _keeping_call(name: str, build: Any) -> Any:
    """sqlglot's builder ``build`` of the function ``name``, whose node keeps the name
    (:data:`CALLED`) and its arguments (:func:`_kept`)."""

    def built(args: list[Any]) -> exp.Expr:
        node = _kept(build(args), args)
        node.meta[CALLED] = name.lower()
        return node

    return built


def overfull(tree: exp.Expr) -> str | None:
    """sqlglot's error for the first call in ``tree`` of more arguments than its node has
    slots for (:data:`OVERFULL`: "The number of provided arguments (2) is greater than the
    maximum number of supported arguments (1). Line 1, Col: 18."), None if none is.

    :class:`ServePostgres` parses such a call, where sqlglot's parser refused it, so that
    serve's typing rewrites of version 4 refuse it as PostgreSQL does (42883, "function
    upper(text, integer) does not exist") where they know the function; its reader
    refuses what is left of them with this (as it refused them before: 42601), never
    running the call without its dropped arguments."""
    for node in tree.walk():
        if isinstance(node, exp.Expr) and node.meta.get(OVERFULL):
            return str(node.meta[OVERFULL])
    return None


class ServePostgres(Postgres):
    """PostgreSQL as ``timeshard serve`` reads it (see the module's docstring)."""

    class Tokenizer(Postgres.Tokenizer):
        def _init_core(self) -> TokenizerCore:
            core = super()._init_core()
            if _PARAMETER_CORE is not None:
                core.__class__ = _PARAMETER_CORE  # the same slots: only _scan_string differs
            return core

    class Parser(PostgresParser):
        FUNCTIONS: ClassVar[dict[str, Any]] = {
            **PostgresParser.FUNCTIONS,
            "MAP": _spark_map,
            **{n: _keeping_call(n, PostgresParser.FUNCTIONS[n]) for n in _RENAMED_OR_DROPPING},
        }

        def _parse_function_call(self, *args: Any, **kwargs: Any) -> exp.Expr | None:
            name = self._curr
            parenthesized = self._next is not None and self._next.token_type == TokenType.L_PAREN
            call = super()._parse_function_call(*args, **kwargs)
            node = call
            while isinstance(node, exp.Window | exp.Filter):  # f(x) FILTER (...) OVER (...)
                node = node.this
            quoted = name is not None and name.token_type == TokenType.IDENTIFIER
            if node is not None and parenthesized and name is not None:
                node.meta[NAMED] = name.text if quoted else name.text.lower()
            if node is not None and node.meta.get(CALLED) and quoted:
                node.meta[CALLED] = name.text  # "SUBSTR"(i, 1) is PostgreSQL's SUBSTR
            return call

        def validate_expression(self, expression: Any, args: list[Any] | None = None) -> Any:
            # coalesce(), greatest(), least(): PostgreSQL's grammar's syntax error, never
            # its 42883 of a function (sqlglot's error, as it parses).
            empty_grammar = isinstance(expression, exp.Coalesce | exp.Greatest | exp.Least)
            # A known function's node built of the arguments written: with their number,
            # and those it has no slot for (lpad's fourth), for serve's 42883 of a call of
            # more or fewer than PostgreSQL's function takes.
            if (
                args is not None
                and isinstance(expression, exp.Expr)
                and GIVEN not in expression.meta
            ):
                _kept(expression, args)
            if (
                args is not None
                and isinstance(expression, exp.Func)
                and not expression.is_var_len_args
                and len(args) > len(expression.arg_types)
            ):
                # sqlglot's error, kept for the call's reader (:func:`overfull`), who
                # refuses it as PostgreSQL does where it knows the function.
                token = self._curr or self._prev
                expression.meta[OVERFULL] = (
                    f"The number of provided arguments ({len(args)}) is greater than the "
                    f"maximum number of supported arguments ({len(expression.arg_types)}). "
                    f"Line {token.line}, Col: {token.col}."
                )
                args = None
            if args is not None and isinstance(expression, exp.Func) and not empty_grammar:
                missing = [m for m in expression.error_messages(args) if "Required" in m]
                if missing:
                    # Too few arguments (lpad(s), upper()): sqlglot's error, kept as for
                    # too many, for PostgreSQL's 42883 where serve knows the function.
                    token = self._curr or self._prev
                    where = f" Line {token.line}, Col: {token.col}." if token else ""
                    expression.meta[OVERFULL] = f"{missing[0]}.{where}"
                    return expression
            return super().validate_expression(expression, args)

        def _parse_date_part(self) -> exp.Expr:
            # date_part(s, ts): sqlglot reads a column's name as the field (EXTRACT(S FROM
            # ts), seconds). The arguments as written are kept, for serve's 0A000 of a
            # unit not a constant (typing version 4).
            # (sqlglot's _parse_date_part, the part kept.)
            written = self._parse_type()
            self._match(TokenType.COMMA)
            value = self._parse_bitwise()
            part = written
            if written and isinstance(written, exp.Column | exp.Literal):
                part = exp.var(written.name.upper())
            node = self.expression(exp.Extract(this=part, expression=value))
            if isinstance(written, exp.Expr) and isinstance(value, exp.Expr):
                node.meta[GIVEN] = 2
                node.meta[WRITTEN] = [written, value]
            return node

        def _negate_range(self, this: exp.Expr | None = None) -> exp.Expr | None:
            negated = super()._negate_range(this)
            if isinstance(negated, exp.Not):
                negated.meta[NEGATED] = True  # x NOT BETWEEN, x NOT IN
            return negated

        def _parse_types(self, *args: Any, **kwargs: Any) -> exp.Expr | None:
            # ARRAY[...] is PostgreSQL's array constructor, never a type: sqlglot read its
            # elements as a type's values first, then again as the constructor's, and so
            # each nested ARRAY[ at least twice (ARRAY[ARRAY[... 18 deep took 26 s).
            if (
                self._curr is not None
                and self._curr.token_type == TokenType.ARRAY
                and self._next is not None
                and self._next.token_type == TokenType.L_BRACKET
            ):
                return None
            return super()._parse_types(*args, **kwargs)  # type: ignore[no-any-return]

        def _parse_trim(self) -> exp.Trim:
            trim = super()._parse_trim()
            trim.meta[STANDARD] = True  # trim(...) is PostgreSQL's pg_catalog.btrim(...)
            return trim

        def _parse_substring(self) -> exp.Substring:
            start = self._index
            substring = super()._parse_substring()
            written = self._written(start)
            if any(t.token_type in (TokenType.FROM, TokenType.FOR) for t in written):
                substring.meta[STANDARD] = True
            return substring

        def _parse_overlay(self) -> exp.Overlay:
            start = self._index
            overlay = super()._parse_overlay()
            written = self._written(start)
            if any(t.token_type == TokenType.VAR and t.text.upper() == "PLACING" for t in written):
                overlay.meta[STANDARD] = True
            return overlay

        def _parse_initcap(self) -> exp.Initcap:
            # sqlglot's, keeping the arguments its node drops (a third) or that it adds
            # (the default delimiters, not PostgreSQL's second argument).
            args = self._parse_function_args()
            initcap = _kept(exp.Initcap.from_arg_list(args), args)
            if initcap.args.get("expression") is None:
                default = self.dialect.INITCAP_DEFAULT_DELIMITER_CHARS
                initcap.set("expression", exp.Literal.string(default))
            return initcap  # type: ignore[return-value]

        def _written(self, start: int) -> list[Any]:
            """The tokens from the ``start``-th to the current one that are outside any
            parentheses or brackets among them: the words of a call's own syntax."""
            depth = 0
            out = []
            for token in self._tokens[start : self._index]:
                if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
                    depth += 1
                elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
                    depth -= 1
                elif depth == 0:
                    out.append(token)
            return out

        def _parse_interval_span(
            self, this: exp.Expr, parse_function_unit: bool = True
        ) -> exp.Interval:
            # sqlglot reads '1 day 03:04:05' as '1' DAY and drops the rest: keep the text
            # whole (no unit), for serve's rewrites to read as PostgreSQL's interval input.
            if (
                this is not None
                and this.is_string
                and len(exp.INTERVAL_STRING_RE.findall(this.name)) == 1
                and not exp.INTERVAL_STRING_RE.fullmatch(this.name)
            ):
                return self.expression(exp.Interval(this=this))
            return super()._parse_interval_span(this, parse_function_unit)

        def _parse_interval(
            self, require_interval: bool = True, parse_function_unit: bool = True
        ) -> exp.Add | exp.Interval | None:
            if not require_interval and self._next and self._next.token_type in _OPERAND_OF:
                return exp.Null()  # type: ignore[return-value]  # no sum: taken back below
            interval = super()._parse_interval(require_interval, parse_function_unit)
            if isinstance(interval, exp.Add) and isinstance(interval.expression, exp.Null):
                if self._prev is not None and self._prev.token_type == TokenType.PLUS:
                    self._retreat(self._index - 1)  # the + is the caller's operator
                return interval.this.pop()  # type: ignore[no-any-return]
            return interval


class StoredPostgres(ServePostgres):
    """:class:`ServePostgres` as it read an interval's text before it kept it whole: the
    reading of a view's query recorded before serve typed views' queries
    (``Engine.resolve(stored=True)``), which must resolve to the Spark SQL it ran as
    (``interval '+1 day'`` as ``INTERVAL '1' DAY``): another text would be another query,
    a redefinition of the view, or one Spark refuses."""

    class Parser(ServePostgres.Parser):
        def _parse_interval_span(
            self, this: exp.Expr, parse_function_unit: bool = True
        ) -> exp.Interval:
            return PostgresParser._parse_interval_span(self, this, parse_function_unit)


#: The dialect every reader of a client's SQL parses with.
DIALECT = ServePostgres()
#: The dialect of a view's query recorded untyped (:class:`StoredPostgres`).
STORED_DIALECT = StoredPostgres()

__all__ = [
    "CALLED",
    "DIALECT",
    "DROPPED",
    "GIVEN",
    "NAMED",
    "NEGATED",
    "OVERFULL",
    "STANDARD",
    "STORED_DIALECT",
    "WRITTEN",
    "ServePostgres",
    "StoredPostgres",
    "overfull",
]
