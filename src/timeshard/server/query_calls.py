"""Calls checked against PostgreSQL 15's functions: a call PostgreSQL has no function of
is its 42883, and a call of a form it answers but serve's Spark SQL would answer
otherwise is 0A000 (feature_not_supported). sqlglot reads a call into a node of the
slots its function has; what it has no slot for it dropped, and Spark answered the call
without it (``lpad(s, 3, 'x', 'y')`` ran as ``LPAD(s, 3, 'x')``).

- 42883 ("function lpad(text, integer, unknown, unknown) does not exist",
  :func:`_refuse_wrong_arity`) for a call of more or fewer arguments than PostgreSQL's
  function of the name takes (:data:`_ARITIES`), or by a quoted name not all lower case
  (:func:`_no_such_function`), whatever the arguments' types.
- 0A000 ("function trunc(numeric, integer) is not supported by serve in this form",
  :func:`_refuse_unsupported_form`) for a call PostgreSQL answers that Spark would run
  without one of its arguments (:data:`_UNSUPPORTED_FORMS`), ``regexp_replace`` of
  three (PostgreSQL replaces the first match, Spark every one), and ``date_trunc`` or
  ``date_part`` of a unit not a constant (:func:`_unit_not_constant`).

Each message names the function as PostgreSQL does (:func:`_function_name`) and its
arguments by PostgreSQL's types (:func:`_argument_type_name`,
:func:`_form_argument_name`), as the query's typer knows them (:class:`Typer`, which
:class:`~timeshard.server.query_comparisons._Typer` is).

Invariants:

1. :func:`_spell_out_wrong_arities` runs before the query is typed: each call refused
   here holds every argument written, those sqlglot dropped too, so their types can be
   named. Every call it spells out is refused: the Spark SQL of none is made.
2. Nothing here decides the order of the refusals: the walk of
   :func:`~timeshard.server.query_comparisons._refuse_text_number_mixes` calls
   :func:`_refuse_wrong_arity` and :func:`_refuse_unsupported_form` at each node, in the
   order PostgreSQL plans the query, before a comparison's or a common type's refusal of
   the same node.

:func:`~timeshard.server.query_rewrites._numeric_casts` runs these at the typing
rewrites' version 4 only. Pure Python, no Spark: all of it runs on the driver, where
serve plans a query.
"""

from __future__ import annotations

from typing import Protocol

from sqlglot import exp

from timeshard.server.dialect import (
    CALLED,
    DIALECT,
    DROPPED,
    GIVEN,
    NAMED,
    STANDARD,
    WRITTEN,
)
from timeshard.server.query_types import Kind, _type_name, _untyped
from timeshard.server.statements import SqlError

T = exp.DType


class Typer(Protocol):
    """What the checks here read of a query's typer: PostgreSQL's type of a value of it
    (:meth:`~timeshard.server.query_comparisons._Typer.kind`)."""

    def kind(self, node: exp.Expr) -> Kind:
        """PostgreSQL's type of ``node``; None where not known here."""
        ...


#: :data:`_ARITIES`' functions of one argument, and of two.
_ONE = (
    "upper lower initcap reverse md5 ascii chr char_length character_length octet_length "
    "bit_length quote_ident quote_literal quote_nullable to_hex sha224 sha256 sha384 sha512 abs "
    "sign ceil ceiling floor sqrt cbrt exp ln log10 degrees radians sin cos tan asin acos atan "
    "factorial"
)


_TWO = (
    "left right repeat strpos starts_with power pow mod div atan2 gcd lcm date_part to_char "
    "to_number"
)


#: PostgreSQL 15's least and most arguments of each of its functions of a fixed number of
#: them (its ``pg_catalog``'s ``pg_proc``, every form of the name), by name: a call of
#: another number is its 42883 (:func:`_refuse_wrong_arity`). sqlglot drops what its node
#: has no slot for (``lpad(s, 3, 'x', 'y')`` ran as Spark's ``LPAD(s, 3, 'x')``). Not
#: listed: ``coalesce`` and ``concat``, those of the standard's syntax (``position``,
#: ``extract``), and those Spark calls with other arities that sqlglot keeps
#: (``decode(x, 1, 'a', ...)``). ``to_date`` of one argument and ``random`` of one, Spark's
#: (``to_date(s)``, ``rand(7)``), are PostgreSQL's 42883. ``concat_ws`` is variadic: its separator
#: and one or more values (up to PostgreSQL's 100 arguments).
_ARITIES: dict[str, tuple[int, int]] = {
    **dict.fromkeys(_ONE.split(), (1, 1)),
    **dict.fromkeys(_TWO.split(), (2, 2)),
    **dict.fromkeys(("replace", "translate", "split_part", "make_date"), (3, 3)),
    **dict.fromkeys(("ltrim", "rtrim", "btrim", "round", "trunc", "log", "length"), (1, 2)),
    **dict.fromkeys(("lpad", "rpad", "substr", "substring", "date_trunc"), (2, 3)),
    "overlay": (3, 4),
    **dict.fromkeys(("string_agg", "array_length", "array_append", "array_prepend"), (2, 2)),
    **dict.fromkeys(("array_remove", "get_bit"), (2, 2)),
    "concat": (1, 100),
    "to_timestamp": (1, 2),
    "count": (0, 1),  # count(*) is of one; count() is PostgreSQL's 42809, left to Spark
    "regexp_replace": (3, 6),
    "regexp_like": (2, 3),
    "concat_ws": (2, 100),
    "gen_random_uuid": (0, 0),
    "to_date": (2, 2),
    "random": (0, 0),
}


#: Calls PostgreSQL 15 answers that serve's Spark SQL would run without an argument, by
#: name, of these numbers of arguments: sqlglot's node has no slot for it, or Spark's
#: SQL of the node leaves it out (``trunc(1.999, 2)`` ran as ``CAST(1.999 AS BIGINT)``,
#: 1, where PostgreSQL answers 1.99; ``date_trunc('day', ts, 'UTC')`` without its zone;
#: ``regexp_replace``'s start, N and flags; ``regexp_like``'s flags, ``array_length``'s
#: dimension). Refused (0A000, :func:`_refuse_unsupported_form`), never run so. And
#: ``regexp_replace`` of three: PostgreSQL replaces the first match ('aaa' -> 'baa'),
#: Spark's REGEXP_REPLACE every one ('bbb'); of four, its flags a constant 'g' (every
#: match: 'bbb') and its replacement a constant of no ``\`` or ``$`` (PostgreSQL's
#: ``\1`` is Java's ``$1``), it runs as Spark's of three (:func:`_replaces_every_match`).
_UNSUPPORTED_FORMS: dict[str, frozenset[int]] = {
    "trunc": frozenset({2}),
    "date_trunc": frozenset({3}),
    "regexp_replace": frozenset({3, 4, 5, 6}),
    "regexp_like": frozenset({3}),
    "array_length": frozenset({2}),
}


def _given(node: exp.Expr) -> int | None:
    """The number of arguments ``node`` was called with, where known here: as the parser
    kept it (:data:`~timeshard.server.dialect.GIVEN`), else those its node holds (a call of
    a function sqlglot does not know, or one it reads with its own parser: ``ceil``,
    ``chr``); None for one in the standard's syntax (``substring(s FROM 1)``)."""
    if node.meta.get(STANDARD):
        return None
    given = node.meta.get(GIVEN)
    return given if isinstance(given, int) else len(_called_with(node))


def _no_such_function(node: exp.Expr) -> bool:
    """Whether ``node`` calls a function PostgreSQL has not: one of its own of a number of
    arguments it has no form of (:func:`_wrong_arity`), or by a quoted name not all lower
    case, of any function (``"UPPER"(s)``, ``"SUM"(i)``, ``"NOW"()``, ``"UCASE"(s)``:
    PostgreSQL looks it up as written, and its functions' names are in lower case;
    Spark's are not told apart by case)."""
    named = node.meta.get(NAMED)
    if isinstance(named, str) and named != named.lower():
        return True
    return _wrong_arity(node)


def _wrong_arity(node: exp.Expr) -> bool:
    """Whether ``node`` calls a function of :data:`_ARITIES` with a number of arguments
    PostgreSQL has no form of (by the name called, :data:`~timeshard.server.dialect.NAMED`)."""
    arity = _ARITIES.get(node.meta.get(NAMED) or "")
    given = None if arity is None else _given(node)
    return arity is not None and given is not None and not arity[0] <= given <= arity[1]


def _unsupported_form(node: exp.Expr) -> bool:
    """Whether ``node`` calls PostgreSQL's function in a form serve does not run
    (:data:`_UNSUPPORTED_FORMS`): of a number of arguments PostgreSQL takes, one of which
    its Spark SQL would leave out."""
    named = node.meta.get(NAMED) or ""
    if _unit_not_constant(node):
        return True
    forms = _UNSUPPORTED_FORMS.get(named)
    if forms is None or _given(node) not in forms:
        return False
    return not (named == "regexp_replace" and _replaces_every_match(node))


#: PostgreSQL's functions of a unit or field first (``date_trunc('day', ts)``,
#: ``date_part('day', ts)``) whose unit serve runs a constant only.
_UNIT_FIRST = frozenset({"date_trunc", "date_part"})


def _unit_not_constant(node: exp.Expr) -> bool:
    """Whether ``node`` calls ``date_trunc`` or ``date_part`` (:data:`_UNIT_FIRST`) of
    two arguments, its unit one that reads a column (``date_trunc(s, ts)``,
    ``date_part(upper(s), ts)``). sqlglot read a column's name as the unit
    (``DATE_TRUNC('S', ts)``, ``EXTRACT(S FROM ts)``: seconds); Spark's DATE_TRUNC of a
    column answers NULL for PostgreSQL 15's 'millennium', 'century', 'decade',
    'milliseconds', 'microseconds', 's' and 'd' (and an unknown unit, PostgreSQL's
    22023), its EXTRACT takes none. ``extract(s FROM ts)``'s ``s`` is PostgreSQL's field
    (seconds), no column."""
    if node.meta.get(NAMED) not in _UNIT_FIRST or _given(node) != 2:
        return False
    written = _as_written(node)
    return bool(written) and written[0].find(exp.Column, exp.Query) is not None


def _replaces_every_match(node: exp.Expr) -> bool:
    """Whether ``node``, a call of ``regexp_replace``, is of four arguments, its flags the
    constant ``'g'`` and its replacement a constant of no ``\\`` or ``$``: PostgreSQL
    replaces every match, as Spark's REGEXP_REPLACE of the first three does, and Java
    reads such a replacement as PostgreSQL does (its ``\\1`` and ``\\&`` are Java's
    ``$1`` and ``$0``, a ``$`` its own literal one)."""
    written = _as_written(node)
    if len(written) != 4:
        return False
    replacement, flags = written[2], written[3]
    return (
        isinstance(flags, exp.Literal)
        and flags.is_string
        and flags.this == "g"
        and isinstance(replacement, exp.Literal)
        and replacement.is_string
        and not {"\\", "$"} & set(replacement.this)
    )


def _spell_out_wrong_arities(tree: exp.Expr) -> None:
    """Each call in ``tree`` of more or fewer arguments than PostgreSQL's function takes
    (:func:`_wrong_arity`) as a call of its name of all the arguments written, those its
    node dropped (:data:`~timeshard.server.dialect.DROPPED`) too: they are in the tree,
    and their columns typed, for :func:`_refuse_wrong_arity` to name (``lpad(s, i, s,
    s)``: "lpad(text, integer, text, text)"). So too each call of ``date_trunc`` or
    ``date_part`` of a unit not a constant (:func:`_unit_not_constant`: its node holds
    the column's name as the unit), for :func:`_refuse_unsupported_form`. Every such
    call is refused: the Spark SQL of none is made."""
    pending = [tree]
    while pending:  # a dropped argument's calls too, once it is in the tree
        for node in list(pending.pop().find_all(exp.Func, exp.Binary)):
            if _no_such_function(node) or _unit_not_constant(node):
                pending.extend(node.meta.get(DROPPED, []))
                arguments = [
                    a  # count(*) is of no argument, sum(DISTINCT i) of i, as PostgreSQL names them
                    for written in _as_written(node)
                    if not isinstance(written, exp.Star)
                    for a in (
                        written.expressions if isinstance(written, exp.Distinct) else [written]
                    )
                ]
                call = exp.Anonymous(this=node.meta[NAMED], expressions=arguments)
                call.meta.update({k: node.meta[k] for k in (NAMED, CALLED) if k in node.meta})
                if isinstance(node.parent, exp.Dot) and node.parent.expression is node:
                    # pg_catalog.lpad(...): PostgreSQL's 42883 names it so
                    call.meta[CALLED] = f"{node.parent.this.name}.{node.meta[NAMED]}"
                node.replace(call)


def _refuse_wrong_arity(function: exp.Expr, typer: Typer) -> None:
    """SqlError 42883 for a call of ``function`` that PostgreSQL has no function of
    (:func:`_no_such_function`): by a quoted name of upper case, named as written, or with
    more or fewer arguments than its function of the name takes (:data:`_ARITIES`), as
    PostgreSQL refuses it when it plans the query ("function lpad(text, integer, unknown,
    unknown) does not exist"), whatever their types: sqlglot's node dropped the arguments
    it has no slot for, and Spark answered the call without them (``btrim(s, 'x', 'y')``
    trimmed 'yx'). The message names the arguments' types as :func:`_no_function` does
    (``unknown`` for one not known here: ``now()``'s)."""
    raise _no_function(function, _called_with(function), typer)


def _refuse_unsupported_form(function: exp.Expr, typer: Typer) -> None:
    """SqlError 0A000 (feature_not_supported) for a call of ``function`` that PostgreSQL
    answers but serve's Spark SQL would run without one of its arguments
    (:func:`_unsupported_form`): "function trunc(numeric, integer) is not supported by
    serve in this form". Its arguments are named by PostgreSQL's types where known here,
    a string constant as the type PostgreSQL reads it as (:func:`_form_argument_name`).

    ``trunc`` of a double precision or real and a number of places is PostgreSQL's 42883
    ("function trunc(double precision, integer) does not exist"): it has trunc(numeric,
    integer) only, to which a float is not cast implicitly."""
    first = _called_with(function)[0]
    if function.meta.get(NAMED) == "trunc" and typer.kind(first) in (T.DOUBLE, T.FLOAT):
        raise _no_function(function, _called_with(function), typer)
    held = _called_with(function)  # typed: those of the tree
    arguments = [  # in the order written (date_trunc's unit first), each typed as held
        next((h for h in held if h is a), None) or next((h for h in held if h == a), a)
        for a in _as_written(function)
    ]
    given = len(arguments)
    signature = _FORM_SIGNATURES.get((function.meta.get(NAMED) or "", given), ())
    named = ", ".join(
        _form_argument_name(a, typer, signature[n] if n < len(signature) else None)
        for n, a in enumerate(arguments)
    )
    why = f"of {given} arguments: Spark would run it without one"
    if _unit_not_constant(function):
        why = (
            "its unit not a constant: Spark knows fewer units than PostgreSQL; "
            f"{function.meta.get(NAMED)}('day', ...) of a constant unit is supported"
        )
    if function.meta.get(NAMED) == "regexp_replace":
        why = (
            "PostgreSQL replaces the first match only, Spark every one"
            if given == 3
            else "Spark would run it without its flags, start or N"
        ) + (
            "; regexp_replace(source, pattern, replacement, 'g') is supported, its "
            "replacement a constant of no \\ or $"
        )
    raise SqlError(
        f"function {_function_name(function)}({named}) is not supported by serve in this "
        f"form ({why})",
        "0A000",
    )


#: PostgreSQL 15's one form of each call of :data:`_UNSUPPORTED_FORMS` (by name and number
#: of arguments), each argument's type where it is one type (None for ``anyarray``): a
#: string constant among them is read as that type (``date_trunc('day', ts, 'UTC')`` is
#: date_trunc(text, timestamp with time zone, text), ``trunc('1.5', 1)`` trunc(numeric,
#: integer); a fourth of ``regexp_replace`` its flags, of text).
_FORM_SIGNATURES: dict[tuple[str, int], tuple[str | None, ...]] = {
    ("trunc", 2): ("numeric", "integer"),
    ("date_trunc", 3): ("text", "timestamp with time zone", "text"),
    ("regexp_replace", 3): ("text", "text", "text"),
    ("regexp_replace", 4): ("text", "text", "text", "text"),
    ("regexp_replace", 5): ("text", "text", "text", "integer", "integer"),
    ("regexp_replace", 6): ("text", "text", "text", "integer", "integer", "text"),
    ("regexp_like", 3): ("text", "text", "text"),
    ("array_length", 2): (None, "integer"),
}


#: PostgreSQL's names of the types of dates and times, by sqlglot's: a shard's column of
#: an Arrow timestamp of a zone is TIMESTAMPTZ, of none TIMESTAMP_NTZ; PostgreSQL's
#: ``::timestamp`` is TIMESTAMP, without time zone.
_TIME_NAMES = {
    T.TIMESTAMPTZ: "timestamp with time zone",
    T.TIMESTAMPLTZ: "timestamp with time zone",
    T.TIMESTAMP: "timestamp without time zone",
    T.TIMESTAMPNTZ: "timestamp without time zone",
    T.DATE: "date",
}


def _form_argument_name(argument: exp.Expr, typer: Typer, expected: str | None) -> str:
    """The name of ``argument``'s type in serve's 0A000 of a call it does not run
    (:func:`_refuse_unsupported_form`): PostgreSQL's type of it where the typer knows it
    (:func:`~timeshard.server.query_types._type_name`, a date's or time's, ``now()``'s
    timestamp with time zone); of a string constant or NULL, ``expected``, the type
    PostgreSQL reads it as in the call's one form (:data:`_FORM_SIGNATURES`); else
    ``unknown``."""
    if _untyped(argument) or isinstance(argument.unnest(), exp.Null):
        return expected or "unknown"
    if isinstance(argument.unnest(), exp.CurrentTimestamp):
        return "timestamp with time zone"
    kind = typer.kind(argument)
    if isinstance(kind, T) and kind in _TIME_NAMES:
        return _TIME_NAMES[kind]
    return _type_name(kind) or "unknown"


def _no_function(function: exp.Expr, arguments: list[exp.Expr], typer: Typer) -> SqlError:
    """PostgreSQL's 42883 of a call of ``function`` of ``arguments`` it has no form of."""
    named = ", ".join(_argument_type_name(a, typer) for a in arguments)
    return SqlError(f"function {_function_name(function)}({named}) does not exist", "42883")


def _as_written(function: exp.Expr) -> list[exp.Expr]:
    """The arguments of the call ``function`` as written, in order, where the parser kept
    them (:data:`~timeshard.server.dialect.WRITTEN`: ``log10(f, 1)``'s ``f, 1``, where its
    node holds ``LOG(10, f)``; ``array_prepend(1, a, 3)``'s, which it holds swapped); else
    :func:`_called_with`'s."""
    written = function.meta.get(WRITTEN)
    return list(written) if isinstance(written, list) else _called_with(function)


def _called_with(function: exp.Expr) -> list[exp.Expr]:
    """The arguments ``function`` (of
    :data:`~timeshard.server.query_comparisons._TEXT_FUNCTIONS`) was called with, as
    PostgreSQL's 42883 names them: those its node holds, in order, but one sqlglot added
    (``initcap``'s default delimiters), then those it dropped (``lpad``'s fourth), as the
    parser kept them (:data:`~timeshard.server.dialect.GIVEN`,
    :data:`~timeshard.server.dialect.DROPPED`). A ``substring(s FOR 2)`` holds the start
    1 sqlglot adds: PostgreSQL's ``pg_catalog.substring(s, 1, 2)`` has it too."""
    held = [
        a
        for key, value in function.args.items()
        if not (key == "this" and isinstance(function, exp.Anonymous))  # its name
        for a in (value if isinstance(value, list) else [value])
        if isinstance(a, exp.Expr)
    ]
    dropped: list[exp.Expr] = function.meta.get(DROPPED, [])
    given = function.meta.get(GIVEN, len(held) + len(dropped))
    return [*held[: given - len(dropped)], *dropped]


def _argument_type_name(argument: exp.Expr, typer: Typer) -> str:
    """PostgreSQL's name of a function argument's type in its 42883 message: ``integer``,
    ``integer[]`` for an ``ARRAY[...]`` of integers, ``unknown`` for a string constant,
    NULL or a type not known here."""
    kind = None if _untyped(argument) else typer.kind(argument)
    return _type_name(kind) or "unknown"


def _function_name(function: exp.Expr) -> str:
    """The name of a text function as PostgreSQL's 42883 message gives it where sqlglot
    merges several: ``ltrim``, ``rtrim`` and ``btrim`` for a ``Trim`` by its side, the
    name it was called by (:data:`~timeshard.server.dialect.CALLED`: ``substr``;
    :data:`~timeshard.server.dialect.NAMED`: ``mod``, not sqlglot's ``%``), as written
    where it was quoted (``"UPPER"(i)``, ``"LTRIM"(i)``), else sqlglot's; after
    ``pg_catalog.`` where it was written in the standard's syntax
    (:data:`~timeshard.server.dialect.STANDARD`: ``trim(i)`` is PostgreSQL's
    ``pg_catalog.btrim(i)``, ``substring(i FROM 1)`` its ``pg_catalog.substring(i, 1)``)."""
    name = function.meta.get(CALLED)
    if not name and isinstance(function, exp.Trim):
        side = str(function.args.get("position") or "").upper()
        name = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(side, "btrim")
    if not name:
        name = function.meta.get(NAMED) or function.sql(DIALECT).split("(")[0].lower()
    return f"pg_catalog.{name}" if function.meta.get(STANDARD) else name
