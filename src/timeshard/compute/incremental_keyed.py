"""The grouped class of :mod:`timeshard.compute.incremental`: plans by touched keys.

Which SELECTs are keyed (:func:`_keyed`), and their plans
(:func:`_keyed_plan`): each source's key (a GROUP BY's, a window's PARTITION
BY, a DISTINCT row, an outer or inner equi-join's key, or the whole row of a
query with scalar subqueries) and the query rewritten over the sources'
rows at every evaluation time ``__t``; a GROUP BY kept by per-group state
instead where its aggregates allow (:func:`_aggregate_plan`,
:func:`_joined_aggregate_plan` over inner joins).

Runs on the driver (sqlglot over the view's SQL, no Spark job).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from timeshard.compute.aggregate import state_queries
from timeshard.compute.incremental_linear import (
    _common_blockers,
    _delta_terms,
    _sources,
    _weighted_term,
)
from timeshard.compute.incremental_parameters import _parameters, _take_subqueries
from timeshard.compute.incremental_plan import (
    AT,
    AggregatePlan,
    Classification,
    KeyedSource,
    Plan,
    Term,
    _id_counter,
    _placeholder,
    _rename,
    full,
    with_aggregate,
    without_aggregate,
)


def _keyed(select: Any) -> bool:
    """Whether a SELECT is for the keyed recomputation (else it may be linear)."""
    from sqlglot import exp

    if select.args.get("group") or select.args.get("distinct"):
        return True
    if any(isinstance(n, exp.Window) for n in select.walk()):
        return True
    return any(
        (j.args.get("side") or "").upper() in ("LEFT", "RIGHT", "FULL")
        for j in select.args.get("joins") or []
    )


def _keyed_plan(select: Any, schemas: Mapping[str, pa.Schema], subqueries: bool = False) -> Plan:
    """GROUP BY, DISTINCT, windows with PARTITION BY over one input, an outer equi-join of
    two, or a GROUP BY over an equi-join of two by a join key.

    Every output row then belongs to one key (a group, a row, a window
    partition, a join key), whose input rows alone decide it: only the keys an
    update touched are recomputed. ``subqueries``: the WHERE compares with
    scalar subqueries (:class:`~timeshard.compute.incremental_plan.Parameters`); a
    SELECT over one input or an inner equi-join of two is then keyed too (by the
    row, by the join key).
    """
    from sqlglot import exp

    view_id = next(_id_counter)
    rewritten = select.copy()
    taken: list[tuple[Any, str]] = []
    if subqueries:
        found = _take_subqueries(rewritten, schemas)
        if isinstance(found, str):
            return full(found)
        taken = found
    why = _common_blockers(rewritten, windows=True)
    if why is not None:
        return full(why)
    tables, why = _sources(select, schemas, outer=True)
    if why is not None:
        return full(why)
    occurrences = [rewritten.args["from_"].this] + [
        j.this for j in rewritten.args.get("joins") or []
    ]
    aliases = [t.alias_or_name for t in tables]
    ats = [exp.column(AT, table=a, quoted=True) for a in aliases]
    if taken and not _keyed(select) and len(tables) == 1:
        keyed = _row_keys(rewritten, tables[0], schemas)
    else:
        keyed = _keys_and_rewrite(select, rewritten, aliases, ats)
    if isinstance(keyed, str):
        return full(keyed)
    keys, what = keyed
    group = rewritten.args.get("group")
    grouped_at = [e for e in (group.expressions if group else []) if e.name == AT]
    at: exp.Expression = (
        grouped_at[0].copy()
        if grouped_at
        else ats[0]
        if len(ats) == 1
        else exp.Coalesce(this=ats[0], expressions=ats[1:])
    )
    rewritten.select(exp.alias_(at, AT, quoted=True), copy=False)
    names: dict[str, tuple[str, str]] = {}
    sources = []
    for table, occurrence, key in zip(tables, occurrences, keys, strict=True):
        name = _placeholder(view_id, f"{table.name}.{table.alias_or_name}", "at")
        names[name] = (table.name, "at")
        sources.append(KeyedSource(name, table.name, table.alias_or_name, key))
        _rename(occurrence, name)
    parameters = None
    if taken:
        made = _parameters(rewritten, taken, aliases, at, view_id)
        if isinstance(made, str):
            return full(made)
        parameters = made
        n = len(taken)
        what += f"; {n} scalar subquer{'y' if n == 1 else 'ies'} evaluated at each change time"
    term = Term(rewritten.sql(dialect="spark"), names, None)
    plan = Plan(
        Classification("grouped", what), (term,), keyed=tuple(sources), parameters=parameters
    )
    if select.args.get("group") is None or len(tables) > 1:
        return plan
    if taken:
        return without_aggregate(plan, "the scalar subqueries keep no per-group state")
    aggregate = _aggregate_plan(select, view_id, extremes=True)  # one input: GROUP BY one table
    if isinstance(aggregate, str):
        return without_aggregate(plan, aggregate)
    return with_aggregate(plan, aggregate)


def _row_keys(
    rewritten: Any, table: Any, schemas: Mapping[str, pa.Schema]
) -> tuple[list[tuple[str, ...]], str] | str:
    """A SELECT over one input without GROUP BY: keyed by the whole row (its columns)."""
    from sqlglot import exp

    if any(isinstance(n, exp.AggFunc) for n in rewritten.walk()):
        return "aggregates without GROUP BY (a global aggregate) need the full path"
    alias = table.alias_or_name
    keys = tuple(
        exp.column(n, table=alias, quoted=True).sql(dialect="spark")
        for n in schemas[table.name].names
    )
    return [keys], "select/project/filter: recompute the touched rows"


def _joined_aggregate_plan(select: Any, schemas: Mapping[str, pa.Schema]) -> Plan:
    """GROUP BY over inner joins: kept by per-group state, or the full path."""
    why = _common_blockers(select)
    if why is None:
        _, why = _sources(select, schemas)
    if why is None:
        plan = _aggregate_plan(select, next(_id_counter))
        why = plan if isinstance(plan, str) else None
    if why is not None:
        return full(f"GROUP BY over a join: {why}")
    assert isinstance(plan, Plan)
    return plan


def _aggregate_plan(select: Any, view_id: int, *, extremes: bool = False) -> Plan | str:
    """A GROUP BY's plan by per-group state, or why not.

    ``extremes``: min and max are kept too, their groups recomputed by the
    plan's touched-groups term where a retraction may move them (one input).
    """
    state = _placeholder(view_id, "state", "state")
    queries = state_queries(select, state, extremes=extremes)
    if isinstance(queries, str):
        return queries
    contributions = queries.contributions
    n = 1 + len(contributions.args.get("joins") or [])
    aggregate = AggregatePlan(
        tuple(_delta_terms(contributions, view_id)),
        _weighted_term(contributions, view_id, ["old"] * n),
        state,
        queries.output,
        queries.keys,
        queries.summed,
        queries.lows,
        queries.highs,
        queries.averaged,
    )
    joins = f" over {n} inputs joined" if n > 1 else ""
    kept = "count/sum/avg/min/max" if any(queries.lows + queries.highs) else "count/sum/avg"
    reason = f"GROUP BY {queries.keys} key(s){joins}: per-group aggregate state ({kept})"
    return Plan(Classification("grouped", reason), aggregate=aggregate)


def _keys_and_rewrite(
    select: Any, rewritten: Any, aliases: list[str], ats: list[Any]
) -> tuple[list[tuple[str, ...]], str] | str:
    """Each source's key expressions and what is recomputed; ``__t`` joins the keys.

    Returns why not, as a string, when the query has no such key.
    """
    from sqlglot import exp

    group = select.args.get("group")
    windows = [n for n in rewritten.walk() if isinstance(n, exp.Window)]
    if len(aliases) > 1:
        if select.args.get("distinct") or windows:
            return "DISTINCT or windows over a join need the full path"
        joined = _join_keys(rewritten, aliases, ats)
        if isinstance(joined, str) or group is None:
            return joined
        return _grouped_join_keys(rewritten, joined, ats)
    if group is not None:
        if windows:
            return "windows over GROUP BY need the full path"
        keys = tuple(k.sql(dialect="spark") for k in group.expressions)
        if not keys:
            return "a global aggregate needs the full path"
        rewritten.args["group"].append("expressions", ats[0].copy())
        return [keys], f"GROUP BY {len(keys)} key(s): recompute the touched groups"
    if any(isinstance(n, exp.AggFunc) and not n.find_ancestor(exp.Window) for n in select.walk()):
        return "aggregates without GROUP BY (a global aggregate) need the full path"
    if windows:
        if select.args.get("distinct"):
            return "DISTINCT over windows needs the full path"
        partitions = {
            tuple(sorted(p.sql() for p in w.args.get("partition_by") or [])) for w in windows
        }
        if len(partitions) != 1 or not next(iter(partitions)):
            return "windows need one common PARTITION BY for the incremental path"
        first = windows[0].args["partition_by"]
        keys = tuple(p.sql(dialect="spark") for p in first)
        for w in windows:
            w.append("partition_by", ats[0].copy())
        return [keys], f"windows PARTITION BY {len(keys)} key(s): recompute the touched partitions"
    if select.args.get("distinct"):
        keys = tuple(p.unalias().sql(dialect="spark") for p in select.expressions)
        return [keys], "DISTINCT: recompute the touched rows"
    return "no key to recompute by"


def _join_keys(
    rewritten: Any, aliases: list[str], ats: list[Any]
) -> tuple[list[tuple[str, ...]], str] | str:
    """A join of two inputs on equalities (outer; inner where a GROUP BY or a scalar subquery
    keeps it off the linear path): each side's key columns, ``__t`` joined."""
    from sqlglot import exp

    if len(aliases) != 2:
        outer = any(j.args.get("side") for j in rewritten.args["joins"])
        what = "outer joins" if outer else "joins"
        return f"{what} of more than two inputs need the full path here"
    (join,) = rewritten.args["joins"]
    on = join.args.get("on")
    if on is None:
        return "an outer join without ON needs the full path"
    pairs: list[tuple[str, str]] = []
    for conjunct in on.flatten() if isinstance(on, exp.And) else [on]:
        if not isinstance(conjunct, exp.EQ):
            continue
        sides = [_only_table(conjunct.this), _only_table(conjunct.expression)]
        if sides == aliases:
            pairs.append((conjunct.this.sql(dialect="spark"), conjunct.expression.sql("spark")))
        elif sides == aliases[::-1]:
            pairs.append((conjunct.expression.sql(dialect="spark"), conjunct.this.sql("spark")))
    if not pairs:
        return "an outer join needs an equality between its two inputs"
    join.set("on", exp.and_(on, exp.EQ(this=ats[0].copy(), expression=ats[1].copy())))
    side = (join.args.get("side") or "").upper()
    keys = [tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)]
    kind = f"{side} OUTER" if side else "INNER"
    return keys, f"{kind} JOIN on {len(pairs)} key(s): recompute the touched join keys"


def _grouped_join_keys(
    rewritten: Any, joined: tuple[list[tuple[str, ...]], str], ats: list[Any]
) -> tuple[list[tuple[str, ...]], str] | str:
    """A GROUP BY over an equi-join of two inputs (``joined``: :func:`_join_keys`) whose
    keys hold one side's join key: every group then comes from the rows of one join key
    (a side an outer join null-extends cannot be that side). ``__t`` joins the GROUP BY."""
    group = rewritten.args["group"]
    keys, what = joined
    side = (rewritten.args["joins"][0].args.get("side") or "").upper()
    sides = {"": [0, 1], "LEFT": [0], "RIGHT": [1]}.get(side, [])
    grouped = {e.sql(dialect="spark") for e in group.expressions}
    for i in sides:
        if set(keys[i]) <= grouped:
            group.append("expressions", ats[i].copy())
            return keys, f"GROUP BY {len(grouped)} key(s) over {what}"
    kept = "the join key of a side it keeps whole" if side else "a side's join key"
    return f"a GROUP BY over a join needs {kept} among its keys for the incremental path"


def _only_table(node: Any) -> str | None:
    """The one table every column of ``node`` names, or None."""
    from sqlglot import exp

    tables = {c.table for c in node.find_all(exp.Column)}
    return tables.pop() if len(tables) == 1 else None
