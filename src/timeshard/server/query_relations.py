"""The rewrites of the relations a client's query reads where Spark reads them otherwise
than PostgreSQL 15: a relation's column aliases fewer or more than its columns, and the
columns of a join ``USING`` (their type, a name twice on one side).

Each takes the sqlglot tree of the query and changes it in place or raises
:class:`~timeshard.server.sql_tokens.SqlError`;
:func:`~timeshard.server.query_rewrites._numeric_casts` runs them, gated on the version
of the typing rewrites each came with.

Pure Python, no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp

from timeshard.server.parameter_types import ColumnsOf
from timeshard.server.query_types import (
    _FLOAT_DIGITS,
    _POSTGRES_INTEGERS,
    _aliased_names,
    _column_aliases,
    _derived_branches,
    _relation_names,
)
from timeshard.server.statements import SqlError

T = exp.DType


def _using_stars(tree: exp.Expr) -> list[tuple[exp.Select, list[exp.Expr]]]:
    """The ``*`` of each SELECT of one join, ``USING`` columns (``SELECT * FROM a JOIN b
    USING (k)``), written as those columns and the rest (``k, * EXCEPT (k)``, in Spark's
    order and PostgreSQL's), so that :func:`_joined_columns` can type them; each SELECT
    with its select list as it was, which :func:`_joined_columns` puts back where it
    types none of them. Not for more joins: a later relation's column of the name is one
    ``* EXCEPT`` leaves out too."""
    out = []
    for select in tree.find_all(exp.Select):
        joins = select.args.get("joins") or []
        using = joins[0].args.get("using") if len(joins) == 1 else None
        star = [e for e in select.expressions if isinstance(e, exp.Star)]
        if not using or len(star) != 1 or joins[0].args.get("method"):
            continue
        before = list(select.expressions)
        names = [exp.Column(this=n.copy()) for n in using]
        rest = exp.Star(except_=[exp.Column(this=n.copy()) for n in using])
        at = before.index(star[0])
        select.set("expressions", [*before[:at], *names, rest, *before[at + 1 :]])
        out.append((select, before))
    return out


def _joined_columns(
    tree: exp.Expr, joined: Mapping[int, T], stars: list[tuple[exp.Select, list[exp.Expr]]]
) -> None:
    """An unqualified column a join is ``USING`` whose sides are integers or floats of
    different types (``joined``, :func:`~timeshard.server.query_types._shard_column_types`)
    is cast to PostgreSQL's common type of them (``SELECT i FROM t JOIN u USING (i)``
    of an int4 and an int8 is an int8), named as it was: Spark's is one side's (of an
    inner join the left's, int4). Then each ``*`` of :func:`_using_stars` whose columns
    none is cast is the ``*`` it was."""
    kinds = (*_POSTGRES_INTEGERS, *_FLOAT_DIGITS)
    cast_ids = set()
    for column in list(tree.find_all(exp.Column)):
        kind = joined.get(id(column))
        if kind not in kinds:
            continue
        cast = exp.Cast(this=exp.Null(), to=exp.DataType.build(kind))
        named = isinstance(column.parent, exp.Select) and column.arg_key == "expressions"
        name = column.this.copy()
        column.replace(exp.Alias(this=cast, alias=name) if named else cast)
        cast.set("this", column)  # moved, not copied: ``joined`` holds it
        cast_ids.add(id(column))
    for select, before in stars:
        if not any(id(c) in cast_ids for e in select.expressions for c in e.find_all(exp.Column)):
            select.set("expressions", before)


def _resolve_joins_using(
    tree: exp.Expr, columns_of: ColumnsOf, nested: bool = False, natural: bool = False
) -> None:
    """The joins ``USING`` names of ``tree`` as PostgreSQL resolves them: written out for a
    ``NATURAL`` join (with ``natural``, below), and refused where ambiguous.

    SqlError 42702 if a name a join is ``USING`` is the name of two columns of one of
    its sides, as PostgreSQL refuses it ("common column name appears more than once"):
    Spark joined on one of them and gave ``SELECT *`` both. A join's left side is every
    relation before it since the last comma (a comma binds looser than JOIN), a column
    an earlier join is ``USING`` counted once.

    Checked where the names of every relation a join reads are known here (a shard's, as
    ``columns_of`` names them, under its column aliases; a subquery's or CTE's,
    :func:`_derived_branches`), up to a ``NATURAL`` join; past it Spark's answer stands.
    With ``nested`` (the typing rewrites' version 4) a ``LATERAL`` subquery's names are
    known too, and a parenthesized join's (``(a JOIN b ON ...) JOIN c USING (k)``: its
    relations' names, checked as a join of its own); without, the check stops at them.

    With ``natural`` (version 4 too) a ``NATURAL`` join whose sides' names are known is
    written as the join ``USING`` the names common to both, in the left side's order,
    which is what PostgreSQL joins it on (and, none in common, left as it is: a cross
    join). Its common column then has PostgreSQL's type of a column joined ``USING``
    (:func:`_joined_columns`: an int4 and an int8 side make an int8), and a common name
    twice on one side is 42702 too; Spark's ``NATURAL`` join kept one side's type. A
    derived side's column of no alias is given PostgreSQL's name of it
    (:func:`_postgres_name`) as an alias, which Spark reads too; a name not known here
    leaves the join ``NATURAL``, to Spark."""
    from sqlglot.errors import OptimizeError
    from sqlglot.optimizer.scope import Scope, traverse_scope

    selects = [
        s
        for s in tree.find_all(exp.Select)
        if any(
            j.args.get("using") or (natural and _is_natural(j)) for j in s.args.get("joins") or []
        )
    ]
    if not selects:
        return
    try:
        scopes = {id(scope.expression): scope for scope in traverse_scope(tree)}
        sources = {k: dict(scope.selected_sources) for k, scope in scopes.items()}
    except OptimizeError:  # Spark refuses what sqlglot cannot scope
        return

    def names_of(relation: exp.Expr, select: exp.Select) -> Sequence[str | None] | None:
        inner = relation.this if isinstance(relation, exp.Subquery) else None
        if (
            nested
            and not relation.alias
            and isinstance(inner, exp.Expr)
            and inner.args.get("joins")
        ):
            return joined_names(inner, inner.args["joins"], select)  # a parenthesized join
        node, source = sources[id(select)].get(relation.alias_or_name, (None, None))
        if nested and isinstance(node, exp.Lateral) and isinstance(node.this, exp.Subquery):
            listed = _relation_names(node.this, columns_of, set())
            own = _column_aliases(node)
            if listed is None or None in listed or len(own) > len(listed):
                return None
            named = [n for n in listed if n is not None]
            named[: len(own)] = own
            return named
        if isinstance(source, Scope) and node is not None:
            derived = _derived_branches(node, source)
            if derived is None:
                return None
            derived_names: list[str | None] = list(derived[0])
            if natural:  # an unnamed expression: PostgreSQL's name, which Spark is told
                query = getattr(source, "expression", None)
                holders = (query.parent if query is not None else None, node)
                aliased = max(len(_column_aliases(h)) for h in holders)
                for i, e in enumerate(derived[1][0]):
                    if i >= aliased and not isinstance(e, exp.Alias | exp.Column):
                        name = _postgres_name(e)
                        derived_names[i] = name
                        if name is not None:  # e moved, not copied: scopes point at it
                            alias = exp.Alias(alias=exp.to_identifier(name, quoted=True))
                            e.replace(alias)
                            alias.set("this", e)
            return derived_names
        if not isinstance(source, exp.Table):
            return None
        shard = columns_of(".".join(p for p in (source.catalog, source.db, source.name) if p))
        if shard is None:
            return None
        return _aliased_names(source, shard)

    def joined_names(
        first: exp.Expr, joins: list[exp.Join], select: exp.Select
    ) -> Sequence[str | None] | None:
        """The names of the columns of ``first`` joined by ``joins`` since their last
        comma, each ``USING`` checked; None past a relation whose names are not known."""
        left = names_of(first, select)
        for join in joins:
            if not (join.args.get("kind") or join.args.get("side") or join.args.get("on")) and (
                not join.args.get("using") and not join.args.get("method")
            ):  # a comma: looser than JOIN, so the next join's left side starts here
                left = names_of(join.this, select)
                continue
            right = names_of(join.this, select) if left is not None else None
            if natural and _is_natural(join) and left is not None and right is not None:
                common = [n for n in dict.fromkeys(left) if n is not None and n in right]
                if common and None not in left and None not in right:
                    join.set("method", None)
                    join.set("using", [exp.to_identifier(n, quoted=True) for n in common])
            if left is None or right is None or join.args.get("method"):
                return None  # not known here, or NATURAL
            using = [n.name for n in join.args.get("using") or []]
            for name in using:
                for side, names in (("left", left), ("right", right)):
                    if names.count(name) > 1:
                        raise SqlError(
                            f'common column name "{name}" appears more than once in {side} table',
                            "42702",
                        )
            left = [*using, *(n for n in [*left, *right] if n not in using)]
        return left

    for select in selects:
        first = select.args.get("from_")
        if first is not None and id(select) in sources:
            joined_names(first.this, select.args.get("joins") or [], select)


#: The functions whose sqlglot name is PostgreSQL's name of the column they make (not
#: ``length``: sqlglot reads ``char_length`` and ``character_length`` as it too).
_NAMED_FUNCTIONS = frozenset(
    {
        *("abs", "avg", "coalesce", "concat", "count", "cume_dist", "dense_rank"),
        *("first_value", "greatest", "lag", "last_value", "lead", "least", "lower"),
        *("max", "min", "nth_value", "ntile", "nullif", "percent_rank", "rank", "round"),
        *("row_number", "sum", "upper"),
    }
)


def _postgres_name(node: exp.Expr) -> str | None:
    """PostgreSQL's name of a select list's column of no alias, where it is known here
    (:func:`_figured`). Spark names them otherwise (``sum(i)``, ``count(1)``), so a
    ``NATURAL`` join over them joined on other columns than PostgreSQL's."""
    return _figured(node)[0]


def _figured(node: exp.Expr) -> tuple[str | None, int]:
    """PostgreSQL's name of ``node`` and its strength, as its FigureColname gives them:
    a column's name or a function's (:data:`_NAMED_FUNCTIONS`, or one sqlglot does not
    know) is strong (2); a window's is its function's; a cast's is its operand's if
    strong, else its type's (not known here: None); a ``CASE``'s is its ELSE's if
    strong, else ``case`` (weak, 1); anything else is not known here (None, 0)."""
    node = node.unnest()
    if isinstance(node, exp.Column):
        return node.name, 2
    if isinstance(node, exp.Window):
        return _figured(node.this)
    if isinstance(node, exp.Cast):
        name, strength = _figured(node.this)
        return (name, 2) if strength == 2 else (None, 0)
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        name, strength = _figured(default) if default is not None else (None, 0)
        return (name, 2) if strength == 2 else ("case", 1)
    if isinstance(node, exp.Anonymous):
        return node.name.lower(), 2
    if isinstance(node, exp.Func) and node.sql_name().lower() in _NAMED_FUNCTIONS:
        return node.sql_name().lower(), 2
    return None, 0


def _is_natural(join: exp.Join) -> bool:
    """Whether ``join`` is a ``NATURAL`` join (of any side)."""
    return str(join.args.get("method") or "").upper() == "NATURAL"


def _complete_column_aliases(
    tree: exp.Expr, columns_of: ColumnsOf, cte_readers: bool = False
) -> None:
    """A relation's column aliases fewer than its columns (a subquery's ``(SELECT 1 AS x,
    2 AS y) AS q(a)``, a CTE's, a shard's ``t AS x(a)``) are completed with the names of
    the rest (``q(a, y)``, ``x(a, s)``), as PostgreSQL names them: Spark refused them
    (42802, ASSIGNMENT_ARITY_MISMATCH). More aliases than columns are SqlError 42P10, as
    PostgreSQL refuses them (Spark's error was 42802).

    With ``cte_readers`` (the typing rewrites' version 4), a table that names a CTE
    (``WITH z AS (SELECT 1 AS k, 2 AS m) SELECT * FROM z AS w(a)``) is completed with the
    CTE's names (:func:`_cte_names`: ``w(a, m)``) too; without, it is left to Spark.

    Left as they are where the columns are not known here (a ``*``, ``VALUES``, a table
    that names no shard), and not completed where a name of the rest is not (an
    expression with no alias, which PostgreSQL and Spark name otherwise): Spark refuses
    them then. ``columns_of`` is asked only for a shard read under column aliases."""
    ctes = {c.alias for c in tree.find_all(exp.CTE)}
    for alias in list(tree.find_all(exp.TableAlias)):
        holder = alias.parent
        names = _relation_names(holder, columns_of, ctes) if alias.columns else None
        if names is None and cte_readers and alias.columns and isinstance(holder, exp.Table):
            names = _cte_names(holder, columns_of, ctes)
        if names is None:
            continue
        if len(alias.columns) > len(names):
            what = "WITH query" if isinstance(holder, exp.CTE) else "table"
            raise SqlError(
                f'{what} "{alias.name}" has {len(names)} columns available but '
                f"{len(alias.columns)} columns specified",
                "42P10",
            )
        rest = names[len(alias.columns) :]
        if all(name is not None for name in rest):
            for name in rest:
                alias.append("columns", exp.to_identifier(name))


def _complete_subquery_aliases(tree: exp.Expr) -> None:
    """Version 2's :func:`_complete_column_aliases`: a subquery's or CTE's column aliases
    fewer than its columns (``(SELECT 1 AS x, 2 AS y) AS q(a)``) are completed with the
    names of the rest (``q(a, y)``); left as they are where a name is not known here (a
    ``*``, an expression with no alias, ``VALUES``). Kept so that a view recorded at
    version 2 resolves as it did."""
    for alias in list(tree.find_all(exp.TableAlias)):
        holder = alias.parent
        if not alias.columns or not isinstance(holder, exp.Subquery | exp.CTE):
            continue
        first = holder.this
        while isinstance(first, exp.SetOperation | exp.Subquery):
            first = first.this
        if not isinstance(first, exp.Select):
            continue
        rest = first.expressions[len(alias.columns) :]
        if any(not isinstance(e, exp.Alias | exp.Column) or e.is_star for e in rest):
            continue
        for value in rest:
            alias.append("columns", exp.to_identifier(value.alias_or_name))


def _cte_names(table: exp.Table, columns_of: ColumnsOf, ctes: set[str]) -> list[str | None] | None:
    """The names of the columns of the CTE that ``table`` reads (its column aliases, then
    its query's names past them, :func:`_relation_names`); None if ``table`` reads no CTE
    here (one of a ``WITH`` around it, defined before it), or a recursive one, or its
    names are not known here."""
    if table.db or table.catalog:
        return None
    path: list[exp.Expr] = [table]  # the table and its ancestors, the innermost first
    while path[-1].parent is not None:
        path.append(path[-1].parent)
    for at, node in enumerate(path):
        with_ = node.args.get("with_")
        if not isinstance(with_, exp.With) or isinstance(node, exp.With):
            continue
        if with_.args.get("recursive"):
            return None
        visible = list(with_.expressions)
        if at >= 2 and path[at - 1] is with_:  # in one of its CTEs: those before it
            visible = visible[: visible.index(path[at - 2])]
        for cte in visible:
            if cte.alias == table.name:
                names = _relation_names(cte, columns_of, ctes)
                own = _column_aliases(cte)
                if names is None or len(own) > len(names):
                    return None
                names[: len(own)] = own
                return names
    return None
