"""PostgreSQL 15's refusal of a text compared with a number, which Spark answers by
casting the text: SqlError 42883 ("operator does not exist: text = integer") for a
comparison of them, in whatever form PostgreSQL resolves a comparison operator for
(:func:`_comparisons`); 42804 ("JOIN/USING types text and integer cannot be matched")
for a join ``USING`` a text and a number (:func:`_refuse_mismatched_using`);
42883 ("function upper(integer) does not exist") for a text function of a number
(:func:`_refuse_text_functions_of_numbers`), which Spark answers by casting the number;
and 42804 ("COALESCE types text and integer cannot be matched") for a ``COALESCE``,
``GREATEST``, ``LEAST`` or ``CASE`` of a text and a number
(:func:`_refuse_unmatched_common_types`), whose text Spark cast to a BIGINT.

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
rewrites' version 4 only. Pure Python, no Spark.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sqlglot import exp

from timeshard.server.dialect import CALLED, DIALECT, DROPPED, GIVEN, STANDARD
from timeshard.server.parameter_types import ColumnsOf
from timeshard.server.query_types import (
    _COMMON_ORDER,
    _aliased_names,
    _branch_type,
    _common_type_of,
    _derived_branches,
    _postgres_type,
    _string_constant,
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

#: PostgreSQL's name of each of its types of text and numbers, by the Spark type of its values.
_TYPE_NAMES = {
    T.TEXT: "text",
    T.VARCHAR: "character varying",
    T.SMALLINT: "smallint",
    T.INT: "integer",
    T.BIGINT: "bigint",
    T.DECIMAL: "numeric",
    T.DOUBLE: "double precision",
    T.FLOAT: "real",
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


def _comparison_type(node: exp.Expr, columns: Mapping[int, T]) -> T | None:
    """PostgreSQL's type of a side of a comparison: :func:`_postgres_type`'s, and a text
    (TEXT) for a text function of a text (:data:`_TEXT_FUNCTIONS`), a ``concat`` or
    ``concat_ws`` (a text of any arguments), and a ``||`` of a text and a text or a
    number, or of a string constant and a text or a number (``i || 'x'``: PostgreSQL's
    ``anynonarray || text``; of two string constants, ``text || text``); the common type
    of an ``ARRAY[...]``'s elements that are not string constants (for ``= ANY``), where
    all are texts or all numbers; and of a ``COALESCE``, ``GREATEST``, ``LEAST`` or
    ``CASE``, PostgreSQL's common type of its values (:func:`_common_typed_values`) that
    are not string constants or NULL, which take it: the first one's where all are texts
    (text if none: PostgreSQL's common type of unknowns), the widest where all are
    numbers (``coalesce(i, '5')`` is an integer, its string constants checked by
    :func:`_refuse_unmatched_common_types`; of a numeric or a float, not known here, as
    PostgreSQL's input of them is not checked here). None where not known here."""
    node = node.unnest()
    if isinstance(node, exp.Concat | exp.ConcatWs):
        return T.TEXT
    if isinstance(node, tuple(_COMMON_TYPED)):
        values = _common_typed_values(node)
        typed = [_comparison_type(v, columns) for v in values if not _untyped(v)]
        if all(k in _TEXTS for k in typed):
            return typed[0] if typed else T.TEXT
        if all(k in _NUMBERS for k in typed) and typed:
            widest = max(typed, key=lambda k: _COMMON_ORDER.index(k))  # type: ignore[arg-type]
            texts = any(_string_constant(v.unnest()) is not None for v in values)
            return widest if widest in _INTEGER_BITS or not texts else None
        return None
    if isinstance(node, _TEXT_FUNCTIONS):
        first = node.this
        return T.TEXT if _untyped(first) or _comparison_type(first, columns) in _TEXTS else None
    if isinstance(node, exp.DPipe):
        sides = (node.this, node.expression)
        if any(isinstance(side.unnest(), exp.Array) for side in sides):
            return None  # an array's concatenation: an array (ARRAY[1] || '{2}' is int[])
        kinds = [None if _untyped(s) else _comparison_type(s, columns) for s in sides]
        if any(k in _TEXTS for k in kinds) or (
            any(_untyped(s) and not isinstance(s.unnest(), exp.Null) for s in sides)
            and all(k in _NUMBERS or _untyped(s) for k, s in zip(kinds, sides, strict=True))
        ):
            return T.TEXT
        return None
    if isinstance(node, exp.Array):
        typed = [_comparison_type(e, columns) for e in node.expressions if not _untyped(e)]
        if typed and all(k in _TEXTS for k in typed):
            return T.TEXT
        if typed and all(k in _NUMBERS for k in typed):
            return max(typed, key=lambda k: _COMMON_ORDER.index(k))  # type: ignore[arg-type]
        return None
    return _postgres_type(node, columns)


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


def _quantified(value: exp.Expr) -> exp.Expr:
    """What ``x op ANY (value)`` / ``ALL`` compares ``x`` with: an ``ARRAY[...]`` (typed by
    its elements, :func:`_comparison_type`), a subquery's column (or row), an array's
    value of a type not known here; ``value`` itself if no ``ANY``/``ALL``. (sqlglot reads
    ``ALL (ARRAY[...])`` and ``SOME (ARRAY[...])`` as calls of functions of those names.)"""
    if isinstance(value, exp.Anonymous) and value.name.lower() in ("all", "some"):
        return value.expressions[0].unnest() if len(value.expressions) == 1 else value
    if isinstance(value, exp.Any | exp.All):
        inner: exp.Expr = value.this.unnest()
        return inner.this if isinstance(inner, exp.Subquery) and inner.this else inner
    return value


def _comparisons(tree: exp.Expr) -> Iterator[tuple[exp.Expr, exp.Expr, str]]:
    """The sides PostgreSQL compares in ``tree``, with the operator it resolves for them:
    each comparison's (:data:`_TEXT_NUMBER_OPERATORS`), of ``ANY``/``SOME``/``ALL``
    too (``x = ANY (ARRAY[a, b])``, ``x > ALL (SELECT a ...)``, :func:`_quantified`);
    ``x IN (a, b)`` as ``x = a`` and ``x = b`` (``<>`` under ``NOT``), ``x IN (SELECT a
    ...)`` as ``x = a``; ``x BETWEEN a AND b`` as ``x >= a`` and ``x <= b``; ``CASE x
    WHEN a`` as ``x = a``. A comparison of rows is one of each pair of their columns
    (:func:`_paired`)."""
    for op in tree.find_all(*_TEXT_NUMBER_OPERATORS, exp.In, exp.Between, exp.Case):
        pairs: list[tuple[exp.Expr, exp.Expr, str]] = []
        if isinstance(op, exp.In):
            symbol = "<>" if isinstance(op.parent, exp.Not) else "="
            query = op.args.get("query")
            listed: list[exp.Expr] = list(op.expressions)
            if not listed and isinstance(query, exp.Expr):
                listed = [query.this if isinstance(query, exp.Subquery) else query]
            pairs = [(op.this, value, symbol) for value in listed]
        elif isinstance(op, exp.Between):
            pairs = [(op.this, op.args["low"], ">="), (op.this, op.args["high"], "<=")]
        elif isinstance(op, exp.Case):
            if op.this is not None:
                pairs = [(op.this, branch.this, "=") for branch in op.args.get("ifs") or []]
        else:
            symbol = _TEXT_NUMBER_OPERATORS[type(op)]
            pairs = [(op.this, _quantified(op.expression), symbol)]
        for left, right, symbol in pairs:
            for sides in _paired(left, right):
                yield (*sides, symbol)


def _checks_columns(tree: exp.Expr) -> bool:
    """Whether :func:`_refuse_text_number_operators`,
    :func:`_refuse_text_functions_of_numbers` or :func:`_refuse_unmatched_common_types`
    needs the type of a column of ``tree``: a side of one of its comparisons
    (:func:`_comparisons`) reads a column and the other is not of PostgreSQL's unknown
    type, a text function's first argument reads one, or a value of a ``COALESCE``,
    ``GREATEST``, ``LEAST`` or ``CASE`` does."""
    if any(_reads_column(f.this) for f in tree.find_all(*_TEXT_FUNCTIONS)):
        return True
    for node in tree.find_all(*_COMMON_TYPED):
        if any(_reads_column(v) for v in _common_typed_values(node)):
            return True
    for left, right, _symbol in _comparisons(tree):
        if _untyped(left) or _untyped(right):
            continue
        if left.find(exp.Column) is not None or right.find(exp.Column) is not None:
            return True
    return False


def _reads_column(node: exp.Expr | None) -> bool:
    """Whether ``node`` (a function's first argument, None if it has none) reads a column."""
    return node is not None and node.find(exp.Column) is not None


def _refuse_text_number_operators(tree: exp.Expr, columns: Mapping[int, T]) -> None:
    """SqlError 42883 for a comparison (:func:`_comparisons`: ``= <> < <= > >=``, ``IS
    [NOT] DISTINCT FROM``, ``IN``, ``BETWEEN``, ``CASE x WHEN``, ``= ANY``/``ALL``, a
    comparison of rows) of a text and a number (:func:`_comparison_type`: a shard's
    string column or ``upper(s)`` and ``5``, ``s = 5``), as PostgreSQL refuses it when it
    plans the query ("operator does not exist: text = integer"). A string constant (``s =
    '5'``, ``i = '5'``) is of PostgreSQL's unknown type, which takes the other side's,
    and passes."""
    for left, right, symbol in _comparisons(tree):
        if _untyped(left) or _untyped(right):
            continue
        kinds = [_comparison_type(side, columns) for side in (left, right)]
        if (kinds[0] in _TEXTS and kinds[1] in _NUMBERS) or (
            kinds[0] in _NUMBERS and kinds[1] in _TEXTS
        ):
            named = [_TYPE_NAMES[k] for k in kinds if k is not None]
            raise SqlError(f"operator does not exist: {named[0]} {symbol} {named[1]}", "42883")


def _refuse_text_functions_of_numbers(tree: exp.Expr, columns: Mapping[int, T]) -> None:
    """SqlError 42883 for a text function (:data:`_TEXT_FUNCTIONS`) whose first argument
    is a number (:func:`_comparison_type`: ``upper(i)`` of an integer column,
    ``upper(5)``), wherever it stands, as PostgreSQL refuses it when it plans the query
    ("function upper(integer) does not exist": it has none of a number, and casts no
    number to a text implicitly). Spark cast the number (``upper(i) = 5`` answered rows).

    The message names the arguments' types as PostgreSQL does where known here (a string
    constant's and NULL's, and one not known here, ``unknown``; an array's ``integer[]``),
    and the function as :func:`_function_name` gives it."""
    for function in tree.find_all(*_TEXT_FUNCTIONS):
        first = function.this
        if first is None:  # initcap() with no argument: Spark's error
            continue
        if _untyped(first) or _comparison_type(first, columns) not in _NUMBERS:
            continue
        named = ", ".join(_argument_type_name(a, columns) for a in _called_with(function))
        raise SqlError(f"function {_function_name(function)}({named}) does not exist", "42883")


def _called_with(function: exp.Expr) -> list[exp.Expr]:
    """The arguments ``function`` (of :data:`_TEXT_FUNCTIONS`) was called with, as
    PostgreSQL's 42883 names them: those its node holds, in order, but one sqlglot added
    (``initcap``'s default delimiters), then those it dropped (``lpad``'s fourth), as the
    parser kept them (:data:`~timeshard.server.dialect.GIVEN`,
    :data:`~timeshard.server.dialect.DROPPED`). A ``substring(s FOR 2)`` holds the start
    1 sqlglot adds: PostgreSQL's ``pg_catalog.substring(s, 1, 2)`` has it too."""
    held = [a for a in function.args.values() if isinstance(a, exp.Expr)]
    dropped: list[exp.Expr] = function.meta.get(DROPPED, [])
    given = function.meta.get(GIVEN, len(held) + len(dropped))
    return [*held[: given - len(dropped)], *dropped]


def _argument_type_name(argument: exp.Expr, columns: Mapping[int, T]) -> str:
    """PostgreSQL's name of a function argument's type in its 42883 message: ``integer``,
    ``integer[]`` for an ``ARRAY[...]`` of integers, ``unknown`` for a string constant,
    NULL or a type not known here."""
    kind = None if _untyped(argument) else _comparison_type(argument, columns)
    name = "unknown" if kind is None else _TYPE_NAMES.get(kind, "unknown")
    array = isinstance(argument.unnest(), exp.Array) and name != "unknown"
    return f"{name}[]" if array else name


def _function_name(function: exp.Expr) -> str:
    """The name of a text function as PostgreSQL's 42883 message gives it where sqlglot
    merges several: ``ltrim``, ``rtrim`` and ``btrim`` for a ``Trim`` by its side, the
    name it was called by (:data:`~timeshard.server.dialect.CALLED`: ``substr``), else
    sqlglot's; after ``pg_catalog.`` where it was written in the standard's syntax
    (:data:`~timeshard.server.dialect.STANDARD`: ``trim(i)`` is PostgreSQL's
    ``pg_catalog.btrim(i)``, ``substring(i FROM 1)`` its ``pg_catalog.substring(i, 1)``)."""
    if isinstance(function, exp.Trim):
        side = str(function.args.get("position") or "").upper()
        name = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(side, "btrim")
    else:
        name = function.meta.get(CALLED) or function.sql(DIALECT).split("(")[0].lower()
    return f"pg_catalog.{name}" if function.meta.get(STANDARD) else name


def _refuse_unmatched_common_types(tree: exp.Expr, columns: Mapping[int, T]) -> None:
    """SqlError 42804 for a ``COALESCE``, ``GREATEST``, ``LEAST`` or ``CASE`` of a text
    and a number (``coalesce(s, i)``, ``CASE WHEN b THEN s ELSE 5 END``), as PostgreSQL
    refuses it when it plans the query ("COALESCE types text and integer cannot be
    matched"): it has no common type of them. Spark cast the text to a BIGINT (22P02
    "invalid input syntax for type bigint" at a text that is no number; ``greatest(i,
    s)`` its own 42K09).

    PostgreSQL reads the values (:func:`_common_typed_values`) in order, passing string
    constants and NULLs (of its unknown type, which takes the common type: ``coalesce(s,
    'a')`` and ``coalesce(i, '5')`` pass), and keeps the type so far: the first text's,
    or the widest number's (:data:`~timeshard.server.query_types._COMMON_ORDER`); the
    message names it and the first value of the other kind. Where a value's type is not
    known here (:func:`_comparison_type`), the construct is Spark's. Of integers, a
    string constant is read as the common type, as PostgreSQL reads it when it plans:
    ``coalesce(i, 'a')`` is its 22P02 ("invalid input syntax for type integer"), a
    number past the type's range its 22003 (Spark cast the text to a BIGINT).

    The innermost constructs first, each after the 42883s of the values in it
    (:func:`_refuse_text_functions_of_numbers`, :func:`_refuse_text_number_operators`),
    as PostgreSQL reads a construct's values before it types it."""
    for node in _innermost_first(tree):
        if not isinstance(node, tuple(_COMMON_TYPED)):
            continue
        _refuse_text_functions_of_numbers(node, columns)
        _refuse_text_number_operators(node, columns)
        values = [v for v in _common_typed_values(node) if not _untyped(v)]
        kinds = [_comparison_type(v, columns) for v in values]
        known = [k for k in kinds if k in _TYPE_NAMES]
        if len(known) < len(kinds) or not known:
            continue
        common = known[0]
        for kind in known[1:]:
            if (kind in _TEXTS) != (common in _TEXTS):
                raise SqlError(
                    f"{_COMMON_TYPED[type(node)]} types {_TYPE_NAMES[common]} and "
                    f"{_TYPE_NAMES[kind]} cannot be matched",
                    "42804",
                )
            if kind in _NUMBERS and _COMMON_ORDER.index(kind) > _COMMON_ORDER.index(common):
                common = kind
        if common in _INTEGER_BITS:
            for value in _common_typed_values(node):
                text = _string_constant(value.unnest())
                name, bits = _TYPE_NAMES[common], _INTEGER_BITS[common]
                error = None if text is None else integer_input_error(text, name, bits)
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
