"""A grouped plan's scalar subqueries as its parameters (:class:`Parameters`).

Each uncorrelated scalar subquery of one aggregate over one input in the
WHERE is taken out of the query (:func:`_take_subqueries`), replaced by its
value's column of ``__pv``, and computed at every evaluation time from its
input's rows (:func:`_parameters`); ``PAIRS`` names a parameter's values at
consecutive evaluation times, over which the rows a change moves across the
WHERE are found.

Runs on the driver (sqlglot over the view's SQL, no Spark job).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from timeshard.compute.incremental_plan import AT, Parameters, _placeholder, _rename

#: The alias of a grouped plan's parameter values in its rewritten query.
_VALUES = "__pv"
#: The alias of the evaluation times in the parameters' query.
_TIMES = "__timeshard_times"
#: The alias of a parameter's values at consecutive evaluation times (Parameters.moved).
PAIRS = "__pairs"


def _take_subqueries(select: Any, schemas: Mapping[str, pa.Schema]) -> list[tuple[Any, str]] | str:
    """Replace each scalar subquery of ``select``'s WHERE by its value's column
    (``__pv.__p<j>``): the subqueries (each a SELECT of one global aggregate over one input,
    not correlated) and the inputs they read; or why the query's subqueries need the full
    path. The WHERE's conjuncts keep their order; a subquery elsewhere stays (and
    :func:`~timeshard.compute.incremental_linear._common_blockers` says so)."""
    from sqlglot import exp

    where = select.args.get("where")
    if where is None:
        return "subqueries outside WHERE need the full path"
    conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    taken: list[tuple[Any, str]] = []
    for conjunct in conjuncts:
        for sub in list(conjunct.find_all(exp.Subquery)):
            if sub.find_ancestor(exp.Subquery) is not None:
                continue  # nested in another subquery: that one is refused
            if isinstance(sub.parent, exp.In | exp.Exists | exp.Any | exp.All):
                return "IN, EXISTS, ANY and ALL subqueries need the full path"
            why = _not_scalar_aggregate(sub.this, schemas)
            if why is not None:
                return f"a subquery needs the full path unless it is {why}"
            value = exp.column(f"__p{len(taken)}", table=_VALUES, quoted=True)
            taken.append((sub.this.copy(), sub.this.args["from_"].this.name))
            sub.replace(value)
    return taken or "subqueries outside WHERE need the full path"


def _not_scalar_aggregate(query: Any, schemas: Mapping[str, pa.Schema]) -> str | None:
    """What a scalar subquery must be, if ``query`` is not: one aggregate (exactly one row)
    over one input, its columns the input's own (not correlated)."""
    from sqlglot import exp

    what = "one aggregate over one input, without GROUP BY, not correlated"
    if not isinstance(query, exp.Select) or len(query.expressions) != 1:
        return what
    for arg in ("joins", "group", "having", "order", "limit", "offset", "distinct", "with"):
        if query.args.get(arg):
            return what
    if query.args.get("laterals") or query.args.get("qualify"):
        return what
    if any(n is not query and isinstance(n, exp.Select | exp.Subquery) for n in query.walk()):
        return what
    if any(isinstance(n, exp.Window) for n in query.walk()):
        return what
    from_ = query.args.get("from_")
    table = from_.this if from_ is not None else None
    if not isinstance(table, exp.Table) or table.args.get("db") or table.name not in schemas:
        return what
    (value,) = query.expressions
    if not any(isinstance(n, exp.AggFunc) for n in value.walk()):
        return what
    for column in value.find_all(exp.Column):
        if column.find_ancestor(exp.AggFunc) is None:
            return what
    where = query.args.get("where")
    if where is not None and any(isinstance(n, exp.AggFunc) for n in where.walk()):
        return what
    alias = table.alias_or_name
    if any(c.table != alias for c in query.find_all(exp.Column)):
        return what
    return None


def _null_supplying(select: Any, aliases: Sequence[str]) -> set[str]:
    """The aliases (FROM, then each join's) whose columns an outer join fills with NULL."""
    out: set[str] = set()
    for i, join in enumerate(select.args.get("joins") or [], start=1):
        side = (join.args.get("side") or "").upper()
        if side in ("LEFT", "FULL"):
            out.add(aliases[i])
        if side in ("RIGHT", "FULL"):
            out.update(aliases[:i])
    return out


def _parameters(
    rewritten: Any, taken: Sequence[tuple[Any, str]], aliases: list[str], at: Any, view_id: int
) -> Parameters | str:
    """The plan's parameters (:class:`Parameters`): ``rewritten`` (the keyed term, its
    subqueries replaced) joins their values on ``at``; or why not."""
    from sqlglot import exp

    table = _placeholder(view_id, "parameters", "at")
    times = _placeholder(view_id, "times", "at")
    rows: dict[str, str] = {}
    columns: dict[str, tuple[str, ...]] = {}
    values = [exp.alias_(exp.column(AT, table=_TIMES, quoted=True), AT, quoted=True)]
    for j, (query, source) in enumerate(taken):
        query = query.copy()
        occurrence = query.args["from_"].this
        name = _placeholder(view_id, f"{source}.__p{j}", "at")
        rows[name] = source
        columns[name] = tuple(sorted({c.name for c in query.find_all(exp.Column)}))
        alias = occurrence.alias_or_name
        _rename(occurrence, name)
        same_time = exp.EQ(
            this=exp.column(AT, table=alias, quoted=True),
            expression=exp.column(AT, table=_TIMES, quoted=True),
        )
        query.where(same_time, copy=False)
        values.append(exp.alias_(exp.Subquery(this=query), f"__p{j}", quoted=True))
    source_times = exp.Table(
        this=exp.to_identifier(times, quoted=True),
        alias=exp.TableAlias(this=exp.to_identifier(_TIMES, quoted=True)),
    )
    sql = exp.select(*values).from_(source_times).sql(dialect="spark")
    moved: dict[int, list[str]] = {}
    nullable = _null_supplying(rewritten, aliases)
    where = rewritten.args["where"].this
    conjuncts = list(where.flatten()) if isinstance(where, exp.And) else [where]
    for conjunct in conjuncts:
        refs = list(conjunct.find_all(exp.Column))
        if not any(c.table == _VALUES for c in refs):
            continue
        used = {c.table for c in refs if c.table != _VALUES}
        if len(used) != 1:
            what = "no column of" if not used else "columns of more than one of"
            return f"a scalar subquery compared with {what} the query's inputs needs the full path"
        alias = used.pop()
        if alias in nullable:  # its NULL-filled rows flip too, and no row of it touches them
            return (
                f"a scalar subquery compared with columns of {alias!r}, which an outer join "
                "fills with NULL, needs the full path"
            )
        before, after = conjunct.copy(), conjunct.copy()
        for copy, prefix in ((before, "__b"), (after, "__a")):
            for c in list(copy.find_all(exp.Column)):
                if c.table == _VALUES:
                    j = c.name[len("__p") :]
                    c.replace(exp.column(f"{prefix}{j}", table=PAIRS, quoted=True))
        same = exp.NullSafeEQ(this=exp.paren(before), expression=exp.paren(after))
        changed = exp.Not(this=exp.paren(same))
        moved.setdefault(aliases.index(alias), []).append(changed.sql(dialect="spark"))
    join = exp.Join(
        this=exp.Table(
            this=exp.to_identifier(table, quoted=True),
            alias=exp.TableAlias(this=exp.to_identifier(_VALUES, quoted=True)),
        ),
        on=exp.EQ(this=exp.column(AT, table=_VALUES, quoted=True), expression=at.copy()),
    )
    rewritten.append("joins", join)
    conditions = tuple((i, " OR ".join(f"({c})" for c in cs)) for i, cs in sorted(moved.items()))
    return Parameters(table, times, rows, sql, conditions, columns)


__all__ = [
    "PAIRS",
]
