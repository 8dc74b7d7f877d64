"""Incremental view maintenance: a view's changes computed from its inputs' changes.

A view's *delta* over ``[lower, upper)`` is the updates that turn its content
at ``lower - 1`` into its content at every time in the interval: at each time
``t`` the difference between desired at ``t`` and desired just before. For a
view in the incremental class, the delta is computed from the inputs'
*updates* in the interval (carrying ``_diff`` and ``_ts``), never from whole
snapshots at every change time. Which views are in the class follows from the
view's SQL, parsed in the Spark dialect with sqlglot (:func:`classify`):

**linear** -- SELECT / WHERE / scalar expressions / generators over input
tables, inner and cross joins of any number of inputs (theta conditions
included), and UNION ALL of such. These are multilinear in their inputs: every
output row comes from one row of each table occurrence, with the product of
their multiplicities. So the query is evaluated over *weighted* inputs (each
row carries ``_ts`` and ``_diff``; an output row gets the greatest ``_ts`` and
the product of the ``_diff`` of the rows it comes from), and the delta rule
splits it into one term per table occurrence ``i``::

    term i = occurrences before i: old   (the input at lower - 1, _ts < lower)
             occurrence i:          delta (the input's updates in [lower, upper))
             occurrences after i:   new   (old + delta)

Summing the terms counts every combination with at least one update exactly
once, at the time its last update happened: that is the delta, for any number
of change times in the interval at once. A term whose delta input has no
update in the interval is skipped (a join against a static input costs one
term).

An inner join of any number of inputs keeps its inputs *arranged* by join
key (:attr:`Plan.arranged`, :mod:`timeshard.compute.arranged_rows`): their
rows at ``lower - 1`` cached in Spark, hash-partitioned by the key. Each
term then runs as a :class:`JoinPath` (:func:`_join_paths`): it starts from
its delta occurrence and adds one occurrence at a time, joined on ON
equalities of its own columns (not floating point) with expressions of the
occurrences before it, and read from its input arranged by those columns (an
input joined on different columns has one arrangement per key). Each step
joins where the arrangement lies: no scan of the shard, no broadcast job.
The join order does not change the term: which occurrences are old, delta or
new follows the FROM order.

**grouped** -- queries whose every output row belongs to one *key* decided by
the input rows of that key alone: GROUP BY (any aggregates, HAVING) or SELECT
DISTINCT over one input, window functions sharing one PARTITION BY, and a
LEFT, RIGHT or FULL outer join of two inputs on equalities (the key: each
side's columns in them). Only the keys an update touched can change. Their
input rows are taken at every change time ``t`` of the interval (and at
``lower - 1``), tagged ``__t``; the query runs once over all of them with
``__t`` added to its grouping, window partitions or join condition; the delta
at ``t`` is the keys' rows at ``t`` minus their rows at the change time before.
A GROUP BY whose aggregates are all count and sum of integral columns and
avg of INT or narrower keeps per-group state instead (:mod:`timeshard.compute.aggregate`,
:attr:`Plan.aggregate`), over one input or inner joins of several: its tick
runs the delta terms of its FROM, joins and WHERE (over one input: its
updates alone, no stored rows) and adds them to the touched groups' cached
state. Over one input, min and max (of exactly ordered types) are kept in
the state too; a group whose extreme a retraction may remove is recomputed
in that tick by the touched-groups term, the others move by the state.
A GROUP BY over an equi-join of two inputs whose keys hold one side's join
key (a side the join keeps whole, for an outer join) is keyed by the join
key where no state fits (min, max, DISTINCT aggregates): each group comes
from the rows of one join key.

*Scalar subqueries* in the WHERE (:class:`Parameters`): each uncorrelated
subquery of one aggregate over one input is a parameter of the query, its
value computed at every evaluation time from its input's rows, which the
rewritten query joins on ``__t``. A parameter's change may move rows of keys
no update touched across the WHERE: the keys of every row whose comparison
with it (its conjunct: the columns of one input) differs between two
consecutive evaluation times are touched too. Such a query is keyed as above,
or, with no key of its own, by the join key of an inner join of two or by the
whole row of one input.

**full** -- everything else (other subqueries, ORDER BY or LIMIT, global
aggregates without GROUP BY, other GROUP BY over joins, windows over joins,
outer joins of three inputs, non-deterministic functions, Python function
views, REFRESH EVERY): the sink evaluates those from snapshots.
:attr:`Classification.reason` says why.

Errors. Err rows of an input are err rows of the view (as in the full path):
their updates pass into the delta unchanged. The view's SQL is classified as
the view runs it: under ANSI mode rewritten so that a row a division, cast or
arithmetic fails on carries its message in one more column
(:mod:`timeshard.compute.row_errors`), which is just another output column
here; the delta turns such rows into err rows of those rows. A query that
still fails on the data (SQLSTATE class 22, where the rewrite does not reach)
fails the delta's Spark job; the sink then evaluates that interval from
snapshots, which turns the failure into the view's err content at each time.
Input rows with a negative multiplicity (which no timeshard writer produces)
become err rows in the grouped class as in the full path; the linear class
carries them as negative multiplicities.

Invariants:

1. ``delta(lower, upper)`` holds updates at times in ``[lower, upper)`` only,
   and the content at ``lower - 1`` plus the delta's updates up to ``t``
   equals the full path's desired at ``t``, for every ``t`` in the interval.
2. A delta reads the inputs' updates in the interval and, for joins and
   touched groups, their snapshots at ``lower - 1``; nothing else.
3. The rewritten query keeps the view's column order and types (checked
   against Spark's analysis of the view before the class is accepted).

Modules. This one classifies (:func:`classify`) and re-exports the rest:
the plan's values (:mod:`~timeshard.compute.incremental_plan`), the linear
class and join paths (:mod:`~timeshard.compute.incremental_linear`), the
grouped class (:mod:`~timeshard.compute.incremental_keyed`) and its scalar
subqueries (:mod:`~timeshard.compute.incremental_parameters`), and the checks
of Spark's analysed plans (:mod:`~timeshard.compute.incremental_analysis`).

Runs on the driver (parsing, planning); the delta is a lazy DataFrame that
Spark tasks evaluate when the sink writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pyarrow as pa

from timeshard.compute.incremental_analysis import order_dependent, rewritten_expressions
from timeshard.compute.incremental_keyed import _joined_aggregate_plan, _keyed, _keyed_plan
from timeshard.compute.incremental_linear import (
    _delta_terms,
    _join_paths,
    _linear_reason,
    _not_linear,
    _union_all_leaves,
    qualified_by_structs,
)
from timeshard.compute.incremental_parameters import PAIRS
from timeshard.compute.incremental_plan import (
    AT,
    AggregatePlan,
    Classification,
    JoinPath,
    KeyedSource,
    Parameters,
    Path,
    Plan,
    Step,
    Term,
    _id_counter,
    full,
    with_aggregate,
    without_aggregate,
)

_NON_DETERMINISTIC = frozenset(
    {
        "rand",
        "random",
        "randn",
        "randstr",
        "uniform",
        "uuid",
        "shuffle",
        "aes_encrypt",  # GCM and CBC draw a random IV at every evaluation
        "now",
        "current_timestamp",
        "current_date",
        "localtimestamp",
        "current_time",
        "unix_timestamp",
        "monotonically_increasing_id",
        "spark_partition_id",
        "input_file_name",
        "input_file_block_start",
        "input_file_block_length",
        "reflect",  # a Java method's result: Spark marks these non-deterministic
        "java_method",
        "try_reflect",
    }
)


def classify(sql: str, schemas: Mapping[str, pa.Schema]) -> Plan:
    """The plan of a view ``sql`` over inputs named as in ``schemas`` (driver, no job)."""
    import sqlglot
    from sqlglot.errors import SqlglotError
    from sqlglot.optimizer.qualify import qualify

    try:
        parsed = sqlglot.parse(sql, dialect="spark")
    except SqlglotError as e:
        return full(f"the SQL did not parse in the Spark dialect ({str(e).splitlines()[0]})")
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
        # sqlglot's own failure on SQL it reads wrongly (``map(1, 2, 3)``: an IndexError).
        # Spark, not sqlglot, is the judge of the SQL: the full path runs it as written.
        reason = f"{type(e).__name__}: {e}".splitlines()[0]
        return full(f"the SQL did not parse in the Spark dialect (sqlglot failed: {reason})")
    if len(parsed) != 1 or parsed[0] is None:
        return full("the SQL is not one statement")
    tree = parsed[0]
    mapping: dict[str, object] = {
        alias: {n: "STRING" for n in s.names} for alias, s in schemas.items()
    }
    try:
        tree = qualify(
            tree,
            schema=mapping,
            dialect="spark",
            quote_identifiers=True,
            validate_qualify_columns=True,
        )
    except SqlglotError as e:
        return full(f"the columns could not be resolved ({str(e).splitlines()[0]})")
    why = _not_deterministic(tree)
    if why is not None:
        return full(why)
    qualified = tree.sql(dialect="spark")  # before the plan's rewrites change the tree
    plan = _plan_of(tree, schemas)
    if not plan.classification.incremental:
        return plan
    return replace(plan, qualified=qualified)


def _plan_of(tree: Any, schemas: Mapping[str, pa.Schema]) -> Plan:
    """The plan of a qualified query (:func:`classify`)."""
    from sqlglot import exp

    if isinstance(tree, exp.Select) and any(
        isinstance(n, exp.Subquery) for n in tree.walk() if n is not tree
    ):
        return _keyed_plan(tree, schemas, subqueries=True)
    if isinstance(tree, exp.Select) and _keyed(tree):
        if tree.args.get("group") is not None and tree.args.get("joins"):
            plan = _joined_aggregate_plan(tree, schemas)
            if plan.classification.incremental:
                return plan
            by_keys = _keyed_plan(tree, schemas)
            if by_keys.classification.incremental:
                return by_keys
            return full(f"{plan.classification.reason}; {by_keys.classification.reason}")
        return _keyed_plan(tree, schemas)
    leaves = _union_all_leaves(tree)
    if leaves is None:
        return full("set operations other than UNION ALL need the full path")
    for leaf in leaves:
        why = _not_linear(leaf, schemas)
        if why is not None:
            return full(why)
    view_id = next(_id_counter)
    terms: list[Term] = []
    for leaf in leaves:
        terms.extend(_delta_terms(leaf, view_id))
    reason = _linear_reason(leaves)
    paths = _join_paths(leaves[0], schemas) if len(leaves) == 1 else None
    if paths is None:
        return Plan(Classification("linear", reason), tuple(terms))
    terms = [replace(term, path=path) for term, path in zip(terms, paths, strict=True)]
    arranged = tuple(dict.fromkeys((s.input, s.key) for p in paths for s in p.steps if s.key))
    keys = "; ".join(f"{alias} by {', '.join(cols)}" for alias, cols in arranged)
    reason += f"; inputs arranged by join key ({keys})"
    return Plan(Classification("linear", reason), tuple(terms), arranged=arranged)


def _not_deterministic(tree: Any) -> str | None:
    from sqlglot import exp

    for node in tree.walk():
        if isinstance(node, exp.TableSample):  # a sample of each tick's rows, or a LIMIT
            return f"{node.sql(dialect='spark')} is not the same rows at each tick"
        if isinstance(node, exp.Rand | exp.Randn | exp.CurrentTimestamp | exp.CurrentDate):
            return f"{node.sql(dialect='spark')} is not deterministic"
        if isinstance(node, exp.Func):
            name = (node.sql_name() or "").lower()
            if isinstance(node, exp.Anonymous):
                name = str(node.name).lower()
            if name in _NON_DETERMINISTIC:
                return f"{name}() is not deterministic"
    return None


__all__ = [
    "AT",
    "PAIRS",
    "AggregatePlan",
    "Classification",
    "JoinPath",
    "KeyedSource",
    "Parameters",
    "Path",
    "Plan",
    "Step",
    "Term",
    "classify",
    "full",
    "order_dependent",
    "qualified_by_structs",
    "rewritten_expressions",
    "with_aggregate",
    "without_aggregate",
]
