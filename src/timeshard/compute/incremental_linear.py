"""The linear class of :mod:`timeshard.compute.incremental`: a SELECT's delta terms.

Which SELECTs are linear (:func:`_not_linear`, with the checks the grouped
class shares: :func:`_common_blockers`, :func:`_sources`), their delta terms
over weighted inputs (:func:`_delta_terms`, one per table occurrence: old,
delta, new), and an inner join's terms as chains of joins over inputs
arranged by key (:func:`_join_paths`; :func:`qualified_by_structs` rewrites a
term's SQL for a merged join step).

Runs on the driver (sqlglot over the view's SQL, no Spark job).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from timeshard.compute.incremental_plan import JoinPath, Step, Term, _placeholder, _rename
from timeshard.persist._internal.parts import DIFF, TS


def _linear_reason(leaves: Sequence[Any]) -> str:
    joins = sum(len(leaf.args.get("joins") or []) for leaf in leaves)
    parts = ["select/project/filter"]
    if joins:
        parts.append(f"{joins} inner join(s) by the delta rule")
    if len(leaves) > 1:
        parts.append(f"UNION ALL of {len(leaves)}")
    return ", ".join(parts)


def _join_paths(select: Any, schemas: Mapping[str, pa.Schema]) -> list[JoinPath] | None:
    """Each delta term of a join of inputs (one SELECT, inner joins, as :func:`_delta_terms`
    orders them) as a chain of joins over arranged inputs, or None where one cannot be.

    Term ``i`` starts from occurrence ``i`` (its delta) and adds, one at a time,
    the first occurrence (in FROM order) that an ON equality joins on one of its
    own columns with an expression of the occurrences already joined: that
    occurrence is read from its input arranged by those columns. Every ON
    conjunct is applied at the first step where all of its tables are joined;
    the rest (no table) go to WHERE. None when some term cannot go on this way
    (no such equality), when a key column is a float (Spark joins -0.0 with
    0.0, which hash apart) or nested, or when an input has a map column
    (layers are consolidated by grouping on every column): the terms then read
    the shards' parts.
    """
    from sqlglot import exp

    joins = select.args.get("joins") or []
    if not joins or any(
        j.args.get("side") or (j.args.get("kind") or "INNER").upper() != "INNER" for j in joins
    ):
        return None
    tables = [select.args["from_"].this] + [j.this for j in joins]
    if not all(isinstance(t, exp.Table) and t.name in schemas for t in tables):
        return None
    aliases = [t.alias_or_name for t in tables]
    if len(set(aliases)) != len(aliases):
        return None
    if any(_has_map(f.type) for t in tables for f in schemas[t.name]):
        return None
    conjuncts: list[Any] = []
    for join in joins:
        on = join.args.get("on")
        if on is not None:
            conjuncts.extend(on.flatten() if isinstance(on, exp.And) else [on])
    refs = [{c.table for c in e.find_all(exp.Column)} for e in conjuncts]
    where = select.args.get("where")
    columns = tuple(e.sql(dialect="spark") for e in _weighted_columns(select, aliases))
    n = len(tables)
    paths = []
    for i in range(n):
        modes = ["old"] * i + ["delta"] + ["new"] * (n - i - 1)
        steps = [Step(tables[i].name, aliases[i], modes[i])]
        joined, used = {aliases[i]}, set()
        while len(steps) < n:
            for j in range(n):
                if aliases[j] in joined:
                    continue
                pairs = _key_columns(conjuncts, refs, aliases[j], joined, schemas[tables[j].name])
                if pairs:
                    break
            else:
                return None
            with_j = joined | {aliases[j]}
            on = [
                c for c, r in enumerate(refs) if c not in used and aliases[j] in r and r <= with_j
            ]
            used.update(on)
            condition = exp.and_(*(conjuncts[c] for c in on)).sql(dialect="spark")
            key, probe = (tuple(x) for x in zip(*pairs, strict=True))
            steps.append(Step(tables[j].name, aliases[j], modes[j], key, condition, probe))
            joined.add(aliases[j])
        rest = [conjuncts[c] for c in range(len(conjuncts)) if c not in used]
        if where is not None:
            rest.insert(0, where.this)
        filtered = exp.and_(*rest).sql(dialect="spark") if rest else None
        paths.append(JoinPath(tuple(steps), filtered, columns))
    return paths


def _key_columns(
    conjuncts: Sequence[Any],
    refs: Sequence[set[str]],
    alias: str,
    joined: set[str],
    schema: pa.Schema,
) -> tuple[tuple[str, str], ...]:
    """The columns of occurrence ``alias`` that ON equalities join with an expression of the
    ``joined`` occurrences (in ON order, each once; only columns that hash alike), each
    with the expression its first such equality pairs it with (Spark SQL)."""
    from sqlglot import exp

    key: dict[str, str] = {}
    for conjunct, r in zip(conjuncts, refs, strict=True):
        if not isinstance(conjunct, exp.EQ) or alias not in r or not r - {alias} <= joined:
            continue
        sides = (conjunct.this, conjunct.expression)
        for mine, other in (sides, sides[::-1]):
            if not isinstance(mine, exp.Column) or mine.table != alias:
                continue
            theirs = {c.table for c in other.find_all(exp.Column)}
            field = _field(schema, mine.name)
            if not theirs or alias in theirs or field is None:
                continue
            if _hash_partitionable(field.type) and field.name not in key:
                key[field.name] = other.sql(dialect="spark")
    return tuple(key.items())


def qualified_by_structs(sql: str, aliases: Sequence[str]) -> str | None:
    """``sql`` (Spark SQL over the occurrences ``aliases``, every column qualified) with
    each ``alias.column`` read from a struct column ``__alias`` instead (``__alias.column``):
    a merged join step carries each occurrence's row as one struct (delta.py). None if
    some column is not ``alias.column`` of one of them (unqualified, or a longer name)."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, dialect="spark")
    for column in list(tree.find_all(exp.Column)):
        if column.table not in aliases or column.args.get("db") or column.args.get("catalog"):
            return None
        column.set("table", exp.to_identifier(f"__{column.table}", quoted=True))
    return tree.sql(dialect="spark")


def _field(schema: pa.Schema, name: str) -> pa.Field | None:
    """The column ``name`` names (Spark resolves names regardless of case), if exactly one."""
    found = [f for f in schema if f.name.lower() == name.lower()]
    return found[0] if len(found) == 1 else None


def _hash_partitionable(t: pa.DataType) -> bool:
    """Whether equal values of Arrow type ``t`` always hash alike in Spark."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal(t)
    )


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    return any(_has_map(t.field(i).type) for i in range(t.num_fields))


def _union_all_leaves(tree: Any) -> list[Any] | None:
    from sqlglot import exp

    if isinstance(tree, exp.Subquery):
        return _union_all_leaves(tree.this)
    if isinstance(tree, exp.Union):
        if tree.args.get("distinct") or tree.args.get("order") or tree.args.get("limit"):
            return None
        left, right = _union_all_leaves(tree.left), _union_all_leaves(tree.right)
        return None if left is None or right is None else left + right
    if isinstance(tree, exp.Select):
        return [tree]
    return None


def _common_blockers(select: Any, *, windows: bool = False) -> str | None:
    """Why a SELECT (either class) needs the full path, or None (``windows``: allowed)."""
    from sqlglot import exp

    for arg, what in [
        ("order", "ORDER BY"),
        ("limit", "LIMIT"),
        ("offset", "OFFSET"),
        ("qualify", "QUALIFY"),
        ("laterals", "LATERAL VIEW"),
    ]:
        if select.args.get(arg):
            return f"{what} needs the full path"
    if select.args.get("with"):
        return "WITH (common table expressions) needs the full path"
    group = select.args.get("group")
    if group is not None and (
        any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets"))
        or any(isinstance(e, exp.Rollup | exp.Cube | exp.GroupingSets) for e in group.expressions)
    ):
        return "ROLLUP, CUBE and GROUPING SETS need the full path"
    for node in select.walk():
        if node is not select and isinstance(node, exp.Select | exp.Subquery):
            return "subqueries need the full path"
        if isinstance(node, exp.Window) and not windows:
            return "window functions need the full path"
    return None


def _sources(
    select: Any, schemas: Mapping[str, pa.Schema], *, outer: bool = False
) -> tuple[list[Any], str | None]:
    """The tables a SELECT reads (FROM, then joins), or why they are not plain inputs.

    Joins are inner or cross; with ``outer`` also LEFT, RIGHT and FULL (outer).
    """
    from sqlglot import exp

    from_ = select.args.get("from_")
    if from_ is None:
        return [], "a SELECT without FROM needs the full path"
    tables = [from_.this]
    for join in select.args.get("joins") or []:
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        allowed = ("", "LEFT", "RIGHT", "FULL") if outer else ("",)
        if side not in allowed or kind not in ("", "INNER", "CROSS", "OUTER"):
            return [], f"{' '.join(w for w in (side, kind) if w)} JOIN needs the full path"
        tables.append(join.this)
    for table in tables:
        if not isinstance(table, exp.Table) or table.args.get("db"):
            return [], f"{table.sql(dialect='spark')} is not an input of the view"
        if table.name not in schemas:
            return [], f"{table.name!r} is not an input of the view"
    return tables, None


def _not_linear(select: Any, schemas: Mapping[str, pa.Schema]) -> str | None:
    from sqlglot import exp

    why = _common_blockers(select)
    if why is not None:
        return why
    if select.args.get("distinct"):
        return "DISTINCT in a UNION branch needs the full path"
    if select.args.get("group") or select.args.get("having"):
        return "GROUP BY in a UNION branch needs the full path"
    if any(isinstance(n, exp.AggFunc) for n in select.walk()):
        return "aggregates without GROUP BY (a global aggregate) need the full path"
    _, why = _sources(select, schemas)
    return why


def _delta_terms(select: Any, view_id: int) -> list[Term]:
    """One term per table occurrence of a linear SELECT (module doc, "linear")."""
    n = 1 + len(select.args.get("joins") or [])
    modes = [["old"] * i + ["delta"] + ["new"] * (n - i - 1) for i in range(n)]
    return [_weighted_term(select, view_id, m) for m in modes]


def _weighted_term(select: Any, view_id: int, modes: list[str]) -> Term:
    """A linear SELECT over weighted inputs, its table occurrences in ``modes``.

    The term gives the SELECT's columns, then ``_ts`` (the greatest of its
    rows') and ``_diff`` (the product of theirs); it is the delta of the
    occurrence in mode ``delta``, if one is.
    """
    tables = [select.args["from_"].this] + [j.this for j in select.args.get("joins") or []]
    term = select.copy()
    term.set("expressions", _weighted_columns(select, [t.alias_or_name for t in tables]))
    occurrences = [term.args["from_"].this] + [j.this for j in term.args.get("joins") or []]
    names: dict[str, tuple[str, str]] = {}
    for table, mode in zip(occurrences, modes, strict=True):
        name = _placeholder(view_id, table.name, mode)
        names[name] = (table.name, mode)
        _rename(table, name)
    delta_of = [t.name for t, m in zip(tables, modes, strict=True) if m == "delta"]
    return Term(term.sql(dialect="spark"), names, delta_of[0] if delta_of else None)


def _weighted_columns(select: Any, aliases: Sequence[str]) -> list[Any]:
    """A linear SELECT's columns over weighted inputs (its table occurrences ``aliases``):
    its own, then ``_ts`` (the greatest of its rows') and ``_diff`` (the product of theirs)."""
    from sqlglot import exp

    ts = [exp.column(TS, table=a, quoted=True) for a in aliases]
    diffs = [exp.column(DIFF, table=a, quoted=True) for a in aliases]
    ts_expr: exp.Expression = (
        ts[0] if len(ts) == 1 else exp.Greatest(this=ts[0], expressions=ts[1:])
    )
    diff_expr: exp.Expression = diffs[0]
    for d in diffs[1:]:
        diff_expr = exp.Mul(this=diff_expr, expression=d)
    own = [e.copy() for e in select.expressions]
    return [*own, exp.alias_(ts_expr, TS, quoted=True), exp.alias_(diff_expr, DIFF, quoted=True)]


__all__ = [
    "qualified_by_structs",
]
