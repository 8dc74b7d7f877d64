"""PostgreSQL 15's refusal of a text compared with a number, which Spark answers by
casting the text: SqlError 42883 ("operator does not exist: text = integer") for a
comparison of them, in whatever form PostgreSQL resolves a comparison operator for
(:func:`_comparisons`); 42804 ("JOIN/USING types text and integer cannot be matched")
for a join ``USING`` a text and a number (:func:`_refuse_mismatched_using`);
42883 ("function upper(integer) does not exist") for a text function of a number
(:func:`_refuse_text_function_of_number`), which Spark answers by casting the number;
and 42804 ("COALESCE types text and integer cannot be matched") for a ``COALESCE``,
``GREATEST``, ``LEAST`` or ``CASE`` of a text and a number
(:func:`_refuse_unmatched_common_type`), whose text Spark cast to a BIGINT. All are
refused in one walk, in the order PostgreSQL plans the query, with its 22P02 of a string
constant it reads as an integer (:func:`_refuse_text_number_mixes`), and the refusals of
:mod:`timeshard.server.query_calls` of a call PostgreSQL has no function of (42883) or
serve does not run in its form (0A000), each at its node. An array is of its
own type (:class:`_ArrayOf`: ``integer[]``), its elements' only where they are compared
(``= ANY``).

PostgreSQL refuses them when it plans the query, as it casts no text to a number
implicitly, nor a number to a text. Spark cast the text, and answered rows where each
text was a number and 22P02 (:func:`~timeshard.server.rows.spark_error`) where one was
not.

Invariants:

1. A side of PostgreSQL's unknown type (:func:`~timeshard.server.query_types._untyped`:
   a string constant, ``NULL``) is never refused: it takes the other side's type.
2. A side whose type is not known here for sure (a function not listed in
   :data:`_TEXT_FUNCTIONS`, a column of a relation whose columns are not known) is left
   to Spark: nothing is refused on a guess.

:func:`~timeshard.server.query_rewrites._numeric_casts` runs these at the typing
rewrites' version 4 only. Pure Python, no Spark: all of it runs on the driver, where
serve plans a query.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sqlglot import exp

from timeshard.server.dialect import CALLED, NEGATED
from timeshard.server.parameter_types import ColumnsOf
from timeshard.server.query_calls import (
    _called_with,
    _no_function,
    _no_such_function,
    _refuse_unsupported_form,
    _refuse_wrong_arity,
    _unsupported_form,
)
from timeshard.server.query_types import (
    _COMMON_ORDER,
    _TYPE_NAMES,
    Kind,
    TypeMemo,
    _aliased_names,
    _ArrayOf,
    _branch_type,
    _common_type_of,
    _derived_branches,
    _postgres_type,
    _string_constant,
    _type_name,
    _type_named,
    _untyped,
)
from timeshard.server.sql_tokens import integer_input_error
from timeshard.server.statements import SqlError

T = exp.DType

#: The comparisons PostgreSQL has no text and number form of, by their symbols
#: (:func:`_refuse_text_number_operators`; ``IS [NOT] DISTINCT FROM`` is resolved as ``=``).
_TEXT_NUMBER_OPERATORS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.NullSafeEQ: "=",
    exp.NullSafeNEQ: "=",
}

_TEXTS = frozenset({T.TEXT, T.VARCHAR})
_NUMBERS = frozenset(_TYPE_NAMES) - _TEXTS
#: The bits of each of PostgreSQL's integer types, by the Spark type of its values.
_INTEGER_BITS = {T.SMALLINT: 16, T.INT: 32, T.BIGINT: 64}

#: The functions PostgreSQL answers a text of when their first argument is a text (or a
#: string constant): ``upper``, ``lower``, ``initcap``, ``substr``/``substring``,
#: ``trim``/``ltrim``/``rtrim``/``btrim``, ``left``, ``right``, ``lpad``/``rpad``,
#: ``replace``, ``reverse``, ``repeat``, ``translate``, ``split_part``, ``md5``,
#: ``overlay``. Of another first argument they are another function or none (``lower``
#: of a range is its bound, ``substring`` of a bytea a bytea): not known here.
_TEXT_FUNCTIONS = (
    exp.Upper,
    exp.Lower,
    exp.Initcap,
    exp.Substring,
    exp.Trim,
    exp.Left,
    exp.Right,
    exp.Pad,
    exp.Replace,
    exp.Reverse,
    exp.Repeat,
    exp.Translate,
    exp.SplitPart,
    exp.MD5,
    exp.Overlay,
)


#: The constructs PostgreSQL gives their values a common type of (its
#: ``select_common_type``), by the name its 42804 gives each.
_COMMON_TYPED: dict[type[exp.Expr], str] = {
    exp.Coalesce: "COALESCE",
    exp.Greatest: "GREATEST",
    exp.Least: "LEAST",
    exp.Case: "CASE",
}


def _common_typed_values(node: exp.Expr) -> list[exp.Expr]:
    """The values PostgreSQL gives ``node`` (of :data:`_COMMON_TYPED`) a common type of, in
    the order it reads them: a ``CASE``'s ``ELSE`` (NULL without one) first, then its
    ``THEN``s (``CASE WHEN b THEN s ELSE i END`` is "CASE types integer and text"); a
    ``COALESCE``'s, ``GREATEST``'s or ``LEAST``'s arguments."""
    if isinstance(node, exp.Case):
        branches = [branch.args["true"] for branch in node.args.get("ifs") or []]
        return [node.args.get("default") or exp.Null(), *branches]
    return [node.this, *node.expressions]


def _category(kind: Kind) -> str:
    """PostgreSQL's category of a type known here (:func:`_type_name`): no common type
    has two of them."""
    return "array" if isinstance(kind, _ArrayOf) else "text" if kind in _TEXTS else "number"


def _scalar(kind: Kind) -> Kind:
    """``kind``, or its elements' type where it is an array's."""
    return kind.element if isinstance(kind, _ArrayOf) else kind


class _Typer:
    """PostgreSQL's types of the values of one query (:meth:`kind`), each computed once,
    so a query is typed in time linear in its size (a ``CASE`` nested in another's
    ``ELSE`` was typed again by each around it: review k37). It is an error to change
    the tree while its typer is in use."""

    def __init__(self, columns: Mapping[int, T]) -> None:
        self.columns = columns
        self._kinds: dict[int, Kind] = {}
        self.memo: TypeMemo = {}  # of _postgres_type: a value in many typed once

    def kind(self, node: exp.Expr) -> Kind:
        """PostgreSQL's type of ``node``: :func:`_postgres_type`'s, and a text (TEXT) for
        a text function of a text (:data:`_TEXT_FUNCTIONS`), a ``concat`` or ``concat_ws``
        (a text of any arguments), and a ``||`` of a text and a text or a number, or of a
        string constant and a text or a number (``i || 'x'``: PostgreSQL's ``anynonarray
        || text``; of two string constants, ``text || text``); an array's
        (:class:`_ArrayOf`) for an ``ARRAY[...]`` or ``ARRAY(SELECT ...)``, of the common
        type of its elements that are not string constants, where all are texts (the
        first's: ``ARRAY[v, s]`` of a varchar ``v`` is ``character varying[]``) or all
        numbers (the widest); and of a ``COALESCE``, ``GREATEST``, ``LEAST`` or ``CASE``,
        PostgreSQL's common type of its values (:meth:`common`). None where not known
        here."""
        node = node.unnest()
        key = id(node)
        if key not in self._kinds:
            self._kinds[key] = self._typed(node)
        return self._kinds[key]

    def _typed(self, node: exp.Expr) -> Kind:
        if isinstance(node, exp.Concat | exp.ConcatWs):
            return T.TEXT
        if isinstance(node, tuple(_COMMON_TYPED)):
            common, mismatched = self.common(node)
            texts = any(
                _string_constant(v.unnest()) is not None for v in _common_typed_values(node)
            )
            numeric = common in _NUMBERS and common not in _INTEGER_BITS
            return None if mismatched or (numeric and texts) else common
        if isinstance(node, _TEXT_FUNCTIONS):
            first = node.this
            return T.TEXT if _untyped(first) or self.kind(first) in _TEXTS else None
        if isinstance(node, exp.DPipe):
            sides = (node.this, node.expression)
            kinds = [None if _untyped(s) else self.kind(s) for s in sides]
            if any(isinstance(k, _ArrayOf) for k in kinds):
                return None  # an array's concatenation: an array (ARRAY[1] || '{2}' is int[])
            if any(k in _TEXTS for k in kinds) or (
                any(_untyped(s) and not isinstance(s.unnest(), exp.Null) for s in sides)
                and all(k in _NUMBERS or _untyped(s) for k, s in zip(kinds, sides, strict=True))
            ):
                return T.TEXT
            return None
        if isinstance(node, exp.Array):
            typed = [self.kind(e) for e in node.expressions if not _untyped(e)]
            if typed and all(k in _TEXTS for k in typed):
                return _ArrayOf(typed[0])  # type: ignore[arg-type]  # the first text's
            if typed and all(k in _NUMBERS for k in typed):
                return _ArrayOf(max(typed, key=_COMMON_ORDER.index))  # type: ignore[arg-type]
            return _ArrayOf(None)
        return _postgres_type(node, self.columns, self.memo)

    def common(self, node: exp.Expr) -> tuple[Kind, tuple[Kind, Kind] | None]:
        """PostgreSQL's common type of the values of ``node`` (of :data:`_COMMON_TYPED`,
        :func:`_common_typed_values`) that are not string constants or NULL, which take
        it; and the two types its 42804 names where they have none. It reads them in
        order and keeps the type so far: the first text's, the widest number's
        (:data:`~timeshard.server.query_types._COMMON_ORDER`), the first array's; a type
        of another category (:func:`_category`) is the mismatch. Text if all are string
        constants or NULL (PostgreSQL's common type of unknowns); None, and no mismatch,
        where a value's type is not known here."""
        kinds = [self.kind(v) for v in _common_typed_values(node) if not _untyped(v)]
        if not kinds:
            return T.TEXT, None
        if any(_type_name(k) is None for k in kinds):
            return None, None
        common = kinds[0]
        for kind in kinds[1:]:
            if _category(kind) != _category(common):
                return None, (common, kind)
            if kind in _NUMBERS and _COMMON_ORDER.index(kind) > _COMMON_ORDER.index(common):
                common = kind
            elif isinstance(kind, _ArrayOf) and kind != common:
                return None, None  # arrays of two types: PostgreSQL's choice not known here
        return common, None


def _row(node: exp.Expr) -> list[exp.Expr] | None:
    """The values of a row of two or more: ``(a, b)``, ``ROW(a, b)``, a subquery of two
    columns or more; None for anything else."""
    if isinstance(node, exp.Tuple) or (
        isinstance(node, exp.Anonymous) and node.name.lower() == "row"
    ):
        return list(node.expressions)
    query = node.this if isinstance(node, exp.Subquery) else node
    if isinstance(query, exp.Select) and len(query.expressions) > 1:
        return [e.unalias() for e in query.expressions]
    return None


def _paired(left: exp.Expr, right: exp.Expr) -> Iterator[tuple[exp.Expr, exp.Expr]]:
    """The sides PostgreSQL compares when it compares ``left`` and ``right``: each pair of
    columns of two rows of one length (:func:`_row`: ``(s, i) = (1, 2)`` as ``s = 1``
    and ``i = 2``), else the two."""
    rows = _row(left), _row(right)
    if rows[0] is not None and rows[1] is not None and len(rows[0]) == len(rows[1]):
        for pair in zip(rows[0], rows[1], strict=True):
            yield from _paired(*pair)
    else:
        yield left, right


def _quantified(value: exp.Expr) -> exp.Expr | None:
    """What ``x op ANY (value)`` / ``ALL`` compares ``x`` with the elements of: an
    ``ARRAY[...]`` or another array, a subquery's column (or row); None if no
    ``ANY``/``ALL``. (sqlglot reads ``ALL (ARRAY[...])`` and ``SOME (ARRAY[...])`` as
    calls of functions of those names.)"""
    if isinstance(value, exp.Anonymous) and value.name.lower() in ("all", "some"):
        return value.expressions[0].unnest() if len(value.expressions) == 1 else value
    if isinstance(value, exp.Any | exp.All):
        inner: exp.Expr = value.this.unnest()
        return inner.this if isinstance(inner, exp.Subquery) and inner.this else inner
    return None


#: A side PostgreSQL compares, with whether it compares the other with its elements
#: (``= ANY (ARRAY[...])``), the other side and the operator.
Comparison = tuple[exp.Expr, exp.Expr, str, bool]


def _comparisons_at(op: exp.Expr) -> Iterator[Comparison]:
    """The sides PostgreSQL compares at ``op``, with the operator it resolves for them:
    a comparison's (:data:`_TEXT_NUMBER_OPERATORS`), of ``ANY``/``SOME``/``ALL`` too
    (``x = ANY (ARRAY[a, b])``, ``x > ALL (SELECT a ...)``, :func:`_quantified`); ``x IN
    (a, b)`` as ``x = a`` and ``x = b`` (``<>`` for ``x NOT IN``, :func:`_negated`), ``x
    [NOT] IN (SELECT a ...)`` as ``x = a``; ``x BETWEEN a AND b`` as ``x >= a`` and ``x <=
    b`` (``x NOT BETWEEN`` as ``<`` and ``>``: :func:`_between_symbols`); a ``WHEN a`` of
    ``CASE x`` as ``x = a``. A comparison of rows is one of each pair of their columns
    (:func:`_paired`)."""
    pairs: list[tuple[exp.Expr, exp.Expr, str, bool]] = []
    if isinstance(op, exp.In):
        query = op.args.get("query")
        listed: list[exp.Expr] = list(op.expressions)
        symbol = "<>" if _negated(op) and listed else "="
        if not listed and isinstance(query, exp.Expr):
            listed = [query.this if isinstance(query, exp.Subquery) else query]
        pairs = [(op.this, value, symbol, False) for value in listed]
    elif isinstance(op, exp.Between):
        low, high = _between_symbols(op)
        pairs = [(op.this, op.args["low"], low, False), (op.this, op.args["high"], high, False)]
    elif isinstance(op, exp.If) and isinstance(op.parent, exp.Case):
        if op.parent.this is not None:
            pairs = [(op.parent.this, op.this, "=", False)]
    elif isinstance(op, tuple(_TEXT_NUMBER_OPERATORS)):
        symbol = _TEXT_NUMBER_OPERATORS[type(op)]
        quantified = _quantified(op.expression)
        pairs = [(op.this, quantified or op.expression, symbol, quantified is not None)]
    for left, right, symbol, elements in pairs:
        for sides in _paired(left, right):
            yield (*sides, symbol, elements)


def _negated(op: exp.Expr) -> bool:
    """Whether ``op`` (a ``BETWEEN`` or an ``IN``) was written negated: ``x NOT BETWEEN a
    AND b``, ``x NOT IN (a, b)`` (:data:`~timeshard.server.dialect.NEGATED`), not ``NOT x
    BETWEEN a AND b``, which PostgreSQL reads as the ``NOT`` of ``x BETWEEN a AND b``."""
    return isinstance(op.parent, exp.Not) and bool(op.parent.meta.get(NEGATED))


def _between_symbols(between: exp.Expr) -> tuple[str, str]:
    """The operators PostgreSQL resolves for ``between``'s ``x`` and its low bound, and its
    high one (``transformAExprBetween``): ``x >= a AND x <= b``; negated
    (:func:`_negated`), ``x < a OR x > b``. ``SYMMETRIC`` adds the same with the bounds
    swapped, after: its first error is of these."""
    return ("<", ">") if _negated(between) else (">=", "<=")


def _comparisons(tree: exp.Expr) -> Iterator[Comparison]:
    """The sides PostgreSQL compares in ``tree`` (:func:`_comparisons_at`)."""
    for op in tree.find_all(*_TEXT_NUMBER_OPERATORS, exp.In, exp.Between, exp.If):
        yield from _comparisons_at(op)


def _checks_columns(tree: exp.Expr) -> bool:
    """Whether :func:`_refuse_text_number_mixes` needs the type of a column of ``tree``:
    a side of one of its comparisons (:func:`_comparisons`) reads a column and the other
    is not of PostgreSQL's unknown type, a text function's first argument reads one, or
    a value of a ``COALESCE``, ``GREATEST``, ``LEAST`` or ``CASE`` does."""
    readers: set[int] = set()  # the nodes that read a column, found in one walk
    for node in _innermost_first(tree):
        if isinstance(node, exp.Column) or any(id(c) in readers for c in node.iter_expressions()):
            readers.add(id(node))

    def reads(node: exp.Expr | None) -> bool:
        return node is not None and id(node) in readers

    if any(any(map(reads, _called_with(f))) for f in tree.find_all(*_TEXT_FUNCTIONS)):
        return True  # a text function's every argument, each named in its 42883
    for node in tree.find_all(exp.Func, exp.Binary):
        refused = _no_such_function(node) or _unsupported_form(node)
        if refused and any(reads(a) for a in _called_with(node)):
            return True
    for node in tree.find_all(*_COMMON_TYPED):
        if any(reads(v) for v in _common_typed_values(node)):
            return True
    return any(
        reads(left) or reads(right)
        for left, right, _symbol, _elements in _comparisons(tree)
        if not (_untyped(left) or _untyped(right))
    )


#: The clauses of a ``SELECT`` in the order PostgreSQL's parse analysis reads them
#: (``transformSelectStmt``), ``OFFSET`` before ``LIMIT``; the others after them but its
#: named ``WINDOW`` clauses, read with its inline window specs after all else
#: (:func:`_refuse_text_number_mixes`).
_SELECT_ORDER = (
    "with_",
    "from_",
    "joins",
    "laterals",
    "expressions",
    "where",
    "having",
    "order",
    "group",
    "distinct",
    "offset",
    "limit",
    "qualify",
)
#: The parts of a ``UNION``, ``INTERSECT`` or ``EXCEPT`` in the order PostgreSQL reads
#: them (``transformSetOperationStmt``): its ``WITH`` before its branches.
_SET_OPERATION_ORDER = ("with_", "this", "expression", "order", "offset", "limit")
#: The parts of a window spec in the order PostgreSQL reads them
#: (``transformWindowDefinitions``): its ``ORDER BY`` before its ``PARTITION BY``.
_WINDOW_ORDER = ("this", "order", "partition_by", "spec")


def _parse_order(node: exp.Expr) -> list[exp.Expr]:
    """The nodes in ``node`` in the order PostgreSQL reads them: a ``SELECT``'s clauses
    by :data:`_SELECT_ORDER` (its named ``WINDOW`` clauses left out), a set operation's by
    :data:`_SET_OPERATION_ORDER`, a window's by :data:`_WINDOW_ORDER`, the subquery of an
    ``IN (SELECT ...)`` or ``op ANY``/``ALL (SELECT ...)`` before its left side
    (``transformSubLink``), else left to right."""
    first: tuple[str, ...] = ()
    if isinstance(node, exp.Select):
        first = _SELECT_ORDER
    elif isinstance(node, exp.SetOperation):
        first = _SET_OPERATION_ORDER
    elif isinstance(node, exp.Window):
        first = _WINDOW_ORDER
    elif (isinstance(node, exp.In) and node.args.get("query")) or _of_subquery(node):
        first = ("query", "expression")
    keys = [*(k for k in first if k in node.args), *(k for k in node.args if k not in first)]
    if isinstance(node, exp.Select):
        keys = [k for k in keys if k != "windows"]
    values = [node.args[k] for k in keys]
    return [
        v
        for vs in values
        for v in (vs if isinstance(vs, list) else [vs])
        if isinstance(v, exp.Expr)
    ]


def _of_subquery(node: exp.Expr) -> bool:
    """Whether ``node`` is a comparison with ``ANY``/``ALL`` of a subquery."""
    value = node.args.get("expression") if isinstance(node, tuple(_TEXT_NUMBER_OPERATORS)) else None
    return isinstance(value, exp.Any | exp.All) and isinstance(value.this.unnest(), exp.Query)


#: What the walk of :func:`_refuse_text_number_mixes` does at a node: read what is in it,
#: refuse it (:func:`_refused`), refuse a ``BETWEEN``'s ``x >= low`` (:func:`_refuse_low`),
#: or read a ``SELECT``'s window specs.
_WALK, _READ, _LOW, _WINDOWS = range(4)


def _refuse_text_number_mixes(tree: exp.Expr, columns: Mapping[int, T]) -> None:
    """PostgreSQL's refusals of a text and a number in ``tree`` (:func:`_refused`), in the
    order it plans the query: each construct after what is in it (a comparison after
    its sides, a ``COALESCE`` after its values), siblings left to right, a ``SELECT``'s
    clauses in its order (:func:`_parse_order`: ``FROM``, the select list, ``WHERE``
    ...), a ``WHEN``'s comparison of ``CASE x`` before its ``THEN``, a ``BETWEEN``'s ``x
    >= low`` before its ``high``. A ``SELECT``'s window specs are read after all else in
    it (``transformWindowDefinitions``, after ``LIMIT``): its named ``WINDOW`` clauses, then
    its inline specs as met; a window function's arguments where it is. One walk, each
    node's type computed once (:class:`_Typer`)."""
    typer = _Typer(columns)
    windows: dict[int, list[exp.Expr]] = {}  # per SELECT being read, the windows met in it
    pending: list[tuple[exp.Expr, int]] = [(tree, _WALK)]
    while pending:
        node, step = pending.pop()
        if step == _READ:
            _refused(node, typer)
        elif step == _LOW:
            _refuse_low(node, typer)
        elif step == _WINDOWS:
            specs = [*(node.args.get("windows") or []), *windows.pop(id(node))]
            parts = [(p, _WALK) for w in specs for p in _parse_order(w) if p is not w.this]
            pending.extend(reversed(parts))
        else:
            pending.extend(reversed(_steps(node, windows)))


def _steps(node: exp.Expr, windows: dict[int, list[exp.Expr]]) -> list[tuple[exp.Expr, int]]:
    """What :func:`_refuse_text_number_mixes` does at ``node``, in order; a window in a
    ``SELECT`` being read (of ``windows``) is added to its list, its spec left for later."""
    if isinstance(node, exp.If) and isinstance(node.parent, exp.Case):
        # CASE x WHEN a THEN r: x = a is resolved (at the WHEN) before r is read.
        then = node.args.get("true")
        return [(node.this, _WALK), (node, _READ), *([(then, _WALK)] if then else [])]
    if isinstance(node, exp.Between):
        low, high = node.args["low"], node.args["high"]
        return [(node.this, _WALK), (low, _WALK), (node, _LOW), (high, _WALK), (node, _READ)]
    if isinstance(node, exp.Window):
        query = node.find_ancestor(exp.Select, exp.SetOperation)
        if query is not None and id(query) in windows:
            windows[id(query)].append(node)
            return [(node.this, _WALK), (node, _READ)]
    steps = [(c, _WALK) for c in _parse_order(node)]
    if isinstance(node, exp.Select):
        windows[id(node)] = []
        steps.append((node, _WINDOWS))
    return [*steps, (node, _READ)]


def _refused(node: exp.Expr, typer: _Typer) -> None:
    """SqlError for ``node`` where PostgreSQL refuses it (what is in it passed):
    :func:`~timeshard.server.query_calls._refuse_wrong_arity` and
    :func:`~timeshard.server.query_calls._refuse_unsupported_form`,
    :func:`_refuse_text_number_operators`,
    :func:`_refuse_text_function_of_number`,
    :func:`_refuse_unmatched_common_type`, and 22P02/22003 for a string constant that
    PostgreSQL reads as an integer here (:func:`_refuse_integer_text`)."""
    if _no_such_function(node):
        _refuse_wrong_arity(node, typer)
    if _unsupported_form(node):
        _refuse_unsupported_form(node, typer)
    _refuse_text_number_operators(node, typer)
    if isinstance(node, _TEXT_FUNCTIONS):
        _refuse_text_function_of_number(node, typer)
    if isinstance(node, tuple(_COMMON_TYPED)):
        _refuse_unmatched_common_type(node, typer)
    _refuse_integer_text(node, typer)


def _refuse_text_number_operators(op: exp.Expr, typer: _Typer) -> None:
    """SqlError 42883 for a comparison at ``op`` (:func:`_comparisons_at`: ``= <> < <= >
    >=``, ``IS [NOT] DISTINCT FROM``, ``IN``, ``BETWEEN``, ``CASE x WHEN``, ``=
    ANY``/``ALL``, a comparison of rows) of a text and a number (:meth:`_Typer.kind`: a
    shard's string column or ``upper(s)`` and ``5``, ``s = 5``), as PostgreSQL refuses
    it when it plans the query ("operator does not exist: text = integer"). A string
    constant (``s = '5'``, ``i = '5'``) is of PostgreSQL's unknown type, which takes the
    other side's, and passes. A side compared with an array's elements (``= ANY``) is
    compared with their type; one with an array of texts or numbers is named as that
    array (``text = integer[]``)."""
    for comparison in _comparisons_at(op):
        _refuse_text_number_comparison(comparison, typer)


def _refuse_low(between: exp.Expr, typer: _Typer) -> None:
    """:func:`_refuse_text_number_operators` of a ``BETWEEN``'s ``x >= low`` (``x < low``
    negated) alone: it is resolved before its ``high`` is read (PostgreSQL's
    ``transformAExprBetween``)."""
    symbol = _between_symbols(between)[0]
    for left, right in _paired(between.this, between.args["low"]):
        _refuse_text_number_comparison((left, right, symbol, False), typer)


def _refuse_text_number_comparison(comparison: Comparison, typer: _Typer) -> None:
    """:func:`_refuse_text_number_operators` of one comparison."""
    left, right, symbol, elements = comparison
    if _untyped(left) or _untyped(right):
        return
    kinds = [typer.kind(left), typer.kind(right)]
    if elements:
        kinds[1] = _scalar(kinds[1])
    scalars = [_scalar(k) for k in kinds]
    if (scalars[0] in _TEXTS and scalars[1] in _NUMBERS) or (
        scalars[0] in _NUMBERS and scalars[1] in _TEXTS
    ):
        named = [_type_name(k) for k in kinds]
        raise SqlError(f"operator does not exist: {named[0]} {symbol} {named[1]}", "42883")


def _refuse_text_function_of_number(function: exp.Expr, typer: _Typer) -> None:
    """SqlError 42883 for a text function (:data:`_TEXT_FUNCTIONS`) whose first argument
    is a number or an array of numbers (:meth:`_Typer.kind`: ``upper(i)`` of an integer
    column, ``upper(5)``), as PostgreSQL refuses it when it plans the query ("function
    upper(integer) does not exist": it has none of a number, and casts no number to a
    text implicitly). Spark cast the number (``upper(i) = 5`` answered rows). An array of
    texts too: PostgreSQL has no text function of an array ("function reverse(text[])
    does not exist"; Spark reversed the array).

    The message names the arguments' types as PostgreSQL does where known here (a string
    constant's and NULL's, and one not known here, ``unknown``; an array's ``integer[]``),
    and the function as :func:`~timeshard.server.query_calls._function_name`
    gives it."""
    first = function.this
    if first is None or _untyped(first):  # initcap() with no argument: Spark's error
        return
    kind = typer.kind(first)
    if _scalar(kind) in _NUMBERS or (isinstance(kind, _ArrayOf) and kind.element in _TEXTS):
        raise _no_function(function, _called_with(function), typer)


def _refuse_unmatched_common_type(node: exp.Expr, typer: _Typer) -> None:
    """SqlError 42804 for a ``COALESCE``, ``GREATEST``, ``LEAST`` or ``CASE`` of a text
    and a number, or an array and either (``coalesce(s, i)``, ``CASE WHEN b THEN s ELSE
    5 END``), as PostgreSQL refuses it when it plans the query ("COALESCE types text and
    integer cannot be matched"): it has no common type of them (:meth:`_Typer.common`
    names the two). Spark cast the text to a BIGINT (22P02 "invalid input syntax for
    type bigint" at a text that is no number; ``greatest(i, s)`` its own 42K09).

    Of integers, a string constant is read as the common type, as PostgreSQL reads it
    when it plans: ``coalesce(i, 'a')`` is its 22P02 ("invalid input syntax for type
    integer"), a number past the type's range its 22003. Of an array, it is the array's
    text (``coalesce(ARRAY[i], '{}')``), not checked here.

    sqlglot reads Spark's ``nvl`` and ``ifnull`` as a ``COALESCE``; PostgreSQL has no
    function of those names, and refuses a call of one as 42883 ("function nvl(text,
    integer) does not exist"): where serve refuses one, it is with that. Where it does
    not, Spark answers it, as before."""
    common, mismatched = typer.common(node)
    error: SqlError | None = None
    if mismatched is not None:
        names = [_type_name(k) for k in mismatched]
        construct = _COMMON_TYPED[type(node)]
        error = SqlError(f"{construct} types {names[0]} and {names[1]} cannot be matched", "42804")
    elif common in _INTEGER_BITS:
        name, bits = _TYPE_NAMES[common], _INTEGER_BITS[common]
        for value in _common_typed_values(node):
            text = _string_constant(value.unnest())
            error = None if text is None else integer_input_error(text, name, bits)
            if error is not None:
                break
    if error is not None and node.meta.get(CALLED):  # nvl, ifnull
        raise _no_function(node, [node.this, *node.expressions], typer)
    if error is not None:
        raise error


#: The operators whose side of PostgreSQL's unknown type takes the other side's integer
#: type (:func:`_refuse_integer_text`).
_INTEGER_OPERATORS = (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.Div)


def _refuse_integer_text(node: exp.Expr, typer: _Typer) -> None:
    """PostgreSQL's 22P02 or 22003 (:func:`~timeshard.server.sql_tokens.
    integer_input_error`) for a string constant it reads as an integer at ``node``: a
    side of ``+ - * / %`` whose other side is an integer (``i + 'a'``), a cast of one to
    an integer type (``'a'::int``). The rewrites check these too, after
    (:func:`~timeshard.server.query_rewrites._integer_texts`); here they are refused in
    the order PostgreSQL reads the query, before what follows them (``SELECT i + 'a',
    coalesce(i, 'b')`` names "a")."""
    checked: list[tuple[exp.Expr, T | None]] = []
    if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
        checked = [(node.this, node.to.this)]
    elif isinstance(node, _INTEGER_OPERATORS):
        sides = (node.this, node.expression)
        for text, other in (sides, sides[::-1]):
            if not isinstance(text.unnest(), exp.Null) and _untyped(text) and not _untyped(other):
                checked.append((text, _postgres_type(other, typer.columns, typer.memo)))
    for text, kind in checked:
        constant = _string_constant(text.unnest())
        if constant is not None and kind in _INTEGER_BITS:
            error = integer_input_error(constant, _TYPE_NAMES[kind], _INTEGER_BITS[kind])
            if error is not None:
                raise error


def _innermost_first(tree: exp.Expr) -> Iterator[exp.Expr]:
    """The nodes of ``tree``, each after those in it, the earlier ones of the query first."""
    pending: list[tuple[exp.Expr, bool]] = [(tree, False)]
    while pending:
        node, visited = pending.pop()
        if visited:
            yield node
            continue
        pending.append((node, True))
        pending.extend((c, False) for c in reversed(list(node.iter_expressions())))


def _refuse_mismatched_using(
    tree: exp.Expr, columns_of: ColumnsOf, columns: Mapping[int, T]
) -> None:
    """SqlError 42804 for a join ``USING`` a name that is a text on one side and a number
    on the other (``t JOIN u USING (k)``, a ``NATURAL`` join written as one by
    :func:`~timeshard.server.query_relations._resolve_joins_using`), as PostgreSQL
    refuses it when it plans the query ("JOIN/USING types text and integer cannot be
    matched"). Spark joined them, casting the text.

    A side's column's type is its shard's (under its column aliases) or its subquery's
    or CTE's (:func:`~timeshard.server.query_types._branch_type` over ``columns``,
    PostgreSQL's types of the query's columns); the left side is each relation since the
    last comma, a name an earlier join is ``USING`` their common type. Where a side's
    columns are not known here (a ``LATERAL`` subquery, a parenthesized join, a
    ``NATURAL`` join left as one, a ``*``), the join is Spark's."""
    from sqlglot.errors import OptimizeError
    from sqlglot.optimizer.scope import Scope, traverse_scope

    if not any(j.args.get("using") for j in tree.find_all(exp.Join)):
        return
    try:
        scopes = traverse_scope(tree)
    except OptimizeError:
        return

    def kinds_of(
        relation: exp.Expr, sources: Mapping[str, tuple[exp.Expr, object]], name: str
    ) -> list[T] | None:
        """The types of the columns ``name`` of ``relation``; None if not known here (a
        shard's column of a type not known here among them too)."""
        if relation.alias_or_name not in sources:
            return None
        node, source = sources[relation.alias_or_name]
        if isinstance(source, Scope):
            derived = _derived_branches(node, source)
            if derived is None or name not in derived[0]:
                return None if derived is None else []
            kind = _branch_type(*derived, name, columns)
            return None if kind is None else [kind]
        if not isinstance(source, exp.Table):
            return None
        shard = columns_of(".".join(p for p in (source.catalog, source.db, source.name) if p))
        if shard is None:
            return None
        names = _aliased_names(source, shard)
        if len(names) > len(shard):  # more aliases than columns: PostgreSQL's 42P10
            return None
        kinds = [_type_named(t) for n, t in zip(names, shard.values(), strict=True) if n == name]
        if None in kinds:
            return None
        return [T.SMALLINT if k == T.TINYINT else k for k in kinds if k is not None]

    for scope in scopes:
        select = scope.expression
        first = select.args.get("from_") if isinstance(select, exp.Select) else None
        if first is None:
            continue
        try:
            sources = dict(scope.selected_sources)
        except OptimizeError:  # a name two relations take: Spark refuses it
            continue
        left: list[exp.Expr] = [first.this]
        for join in select.args.get("joins") or []:
            if join.args.get("method"):
                break  # NATURAL, its names not known here: Spark's, and so is what follows
            if not any(join.args.get(k) for k in ("kind", "side", "on", "using")):
                left = [join.this]  # a comma: looser than JOIN
                continue
            for identifier in join.args.get("using") or []:
                name = identifier.name
                sides = [kinds_of(r, sources, name) for r in left]
                right = kinds_of(join.this, sources, name)
                if right is None or len(right) != 1 or any(k is None for k in sides):
                    continue
                kinds = [k for ks in sides if ks is not None for k in ks]
                kind = _common_type_of(list(kinds)) if kinds else None
                if (kind in _TEXTS and right[0] in _NUMBERS) or (
                    kind in _NUMBERS and right[0] in _TEXTS
                ):
                    raise SqlError(
                        f"JOIN/USING types {_TYPE_NAMES[kind]} and {_TYPE_NAMES[right[0]]} "
                        "cannot be matched",
                        "42804",
                    )
            left.append(join.this)
