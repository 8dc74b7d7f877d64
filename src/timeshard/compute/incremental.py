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

Runs on the driver (parsing, planning); the delta is a lazy DataFrame that
Spark tasks evaluate when the sink writes it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import pyarrow as pa

from timeshard.compute.aggregate import state_extremes, state_queries, state_sums, state_values
from timeshard.persist._internal.parts import DIFF, TS

Path = Literal["linear", "grouped", "full"]

#: The evaluation time column of the grouped class's rewritten query.
AT = "__t"
#: Placeholder table names in rewritten queries: ``__tsv<view>_<input>_<mode>``.
_MODES = ("old", "delta", "new", "at", "state")
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
_id_counter = itertools.count()


@dataclass(frozen=True)
class Classification:
    """Which path a view takes, and why."""

    path: Path
    reason: str

    @property
    def incremental(self) -> bool:
        return self.path != "full"


@dataclass(frozen=True)
class Term:
    """One query of a delta: SQL over placeholder tables, and what each one is.

    ``tables`` maps each placeholder name to ``(input alias, mode)``; ``delta_of``
    is the input whose updates this term needs (the term is empty without them).
    """

    sql: str
    tables: Mapping[str, tuple[str, str]]
    delta_of: str | None
    #: A join over arranged inputs: the same term as joins in order from the delta, each
    #: table occurrence read from its input's arrangement by the columns it is joined on.
    path: JoinPath | None = None


@dataclass(frozen=True)
class Step:
    """One table occurrence of a :class:`JoinPath`: read from ``input``'s rows in ``mode``,
    as ``alias``; after the first, arranged by ``key`` (columns of the input) and joined
    with the occurrences before it on ``on`` (Spark SQL over their aliases), whose
    equalities pair each key column with an expression of those occurrences: ``probe``,
    one per key column (Spark SQL)."""

    input: str
    alias: str
    mode: str
    key: tuple[str, ...] = ()
    on: str | None = None
    probe: tuple[str, ...] = ()


@dataclass(frozen=True)
class JoinPath:
    """A linear term as a chain of hash joins that starts from its delta occurrence: each
    step joins the rows so far (the build side) with an arrangement that streams through
    where it lies; then ``where`` (Spark SQL, or None) and the term's ``columns`` (Spark SQL
    select expressions: the view's columns, ``_ts``, ``_diff``)."""

    steps: tuple[Step, ...]
    where: str | None
    columns: tuple[str, ...]


@dataclass(frozen=True)
class KeyedSource:
    """A table of a grouped plan: its placeholder, input, alias, and key expressions (SQL
    over the alias). Its rows of one key decide the output rows of that key alone."""

    placeholder: str
    input: str
    alias: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class AggregatePlan:
    """A GROUP BY kept by per-group state (:mod:`timeshard.compute.aggregate`).

    ``terms`` are the delta terms of the contributions query (the view's
    FROM, joins and WHERE with the group keys ``__g<i>`` and the aggregates'
    arguments ``__a<j>`` as columns, plus ``_ts`` and ``_diff``); ``snapshot``
    is that query over every input at ``lower - 1`` (mode ``old``), which
    rebuilds the state. ``output`` reads the state rows (placeholder
    ``state``) and gives the view's columns, ``_ts`` and ``_diff``.
    """

    terms: tuple[Term, ...]
    snapshot: Term
    state: str
    output: str
    keys: int
    summed: tuple[bool, ...]
    #: Per argument: whether its min, its max is kept (one input only: see
    #: "Extremes" in :mod:`timeshard.compute.aggregate`).
    lows: tuple[bool, ...] = ()
    highs: tuple[bool, ...] = ()
    #: Per argument: whether its sum gives an avg (whose type must be exact in double).
    averaged: tuple[bool, ...] = ()

    @property
    def values(self) -> list[str]:
        """The state columns, in the arrangement's order."""
        return state_values(self.summed, self.lows, self.highs)

    @property
    def sums(self) -> list[str]:
        """The state columns that are sums (counts BIGINT, sums DECIMAL(38, 0))."""
        return state_sums(self.summed)

    @property
    def extremes(self) -> list[str]:
        """The state columns that are a min (``__lo<j>``) or a max (``__hi<j>``)."""
        return state_extremes(self.lows, self.highs)

    @property
    def summed_arguments(self) -> list[str]:
        """The argument columns whose type must be integral."""
        return [f"__a{j}" for j, s in enumerate(self.summed) if s]

    @property
    def averaged_arguments(self) -> list[str]:
        """The argument columns of avg, whose double sum in Spark must be exact."""
        return [f"__a{j}" for j, a in enumerate(self.averaged) if a]

    @property
    def extreme_arguments(self) -> list[str]:
        """The argument columns whose min or max is kept."""
        kept = zip(self.lows, self.highs, strict=True)
        return [f"__a{j}" for j, (lo, hi) in enumerate(kept) if lo or hi]

    @property
    def inputs(self) -> list[str]:
        """The inputs the contributions read."""
        return sorted({alias for alias, _mode in self.snapshot.tables.values()})


@dataclass(frozen=True)
class Parameters:
    """The uncorrelated scalar subqueries of a grouped plan's WHERE, each a global
    aggregate over one input: *parameters* of the query, evaluated at every evaluation time.

    The rewritten query joins their values (``table``, aliased ``__pv``: ``__t`` and
    ``__p<j>`` per subquery ``j``) on its evaluation time. ``sql`` computes them from
    ``times`` (one column ``__t``) and, per subquery, its input's rows at each ``__t``
    (``rows``: placeholder -> input). A key is touched where a parameter's change may
    move a row of it across the WHERE: ``moved`` pairs a keyed source (index) with SQL
    over that source's alias and ``__pairs`` (``__b<j>``, ``__a<j>``: a parameter's value
    at one evaluation time and at the next) that holds for such a row.
    """

    table: str
    times: str
    rows: Mapping[str, str]
    sql: str
    moved: tuple[tuple[int, str], ...]
    #: Per ``rows`` placeholder: the input's columns its subquery reads (the rows are
    #: counted on those alone).
    columns: Mapping[str, tuple[str, ...]]

    @property
    def inputs(self) -> list[str]:
        """The inputs the subqueries read."""
        return sorted(set(self.rows.values()))


@dataclass(frozen=True)
class Plan:
    """A view's incremental plan: the class, and the rewritten queries it runs."""

    classification: Classification
    terms: tuple[Term, ...] = ()
    #: grouped: each table the query reads, with its key expressions.
    keyed: tuple[KeyedSource, ...] = ()
    #: grouped by per-group state (count, sum, avg), when the query allows it.
    aggregate: AggregatePlan | None = None
    #: linear, a join whose every term has a :class:`JoinPath`: each (input, key columns) it
    #: is kept arranged by (an input joined on different columns has one per key).
    arranged: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: grouped: the scalar subqueries of its WHERE, if any.
    parameters: Parameters | None = None
    #: incremental: the query as sqlglot writes it in Spark SQL, as the rewritten queries
    #: are written (:func:`rewritten_expressions` tells where it means something else).
    qualified: str = ""


def full(reason: str) -> Plan:
    return Plan(Classification("full", reason))


def classify(sql: str, schemas: Mapping[str, pa.Schema]) -> Plan:
    """The plan of a view ``sql`` over inputs named as in ``schemas`` (driver, no job)."""
    import sqlglot
    from sqlglot.errors import SqlglotError
    from sqlglot.optimizer.qualify import qualify

    try:
        parsed = sqlglot.parse(sql, dialect="spark")
    except SqlglotError as e:
        return full(f"the SQL did not parse in the Spark dialect ({str(e).splitlines()[0]})")
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


def _placeholder(view_id: int, source: str, mode: str) -> str:
    assert mode in _MODES, mode
    return f"__tsv{view_id}_{source.encode().hex()}_{mode}"


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


def _rename(table: Any, name: str) -> None:
    """Point a table reference at ``name``, keeping the alias its columns use."""
    from sqlglot import exp

    alias = table.alias_or_name
    table.set("this", exp.to_identifier(name, quoted=True))
    table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))


def _keyed_plan(select: Any, schemas: Mapping[str, pa.Schema], subqueries: bool = False) -> Plan:
    """GROUP BY, DISTINCT, windows with PARTITION BY over one input, an outer equi-join of
    two, or a GROUP BY over an equi-join of two by a join key.

    Every output row then belongs to one key (a group, a row, a window
    partition, a join key), whose input rows alone decide it: only the keys an
    update touched are recomputed. ``subqueries``: the WHERE compares with
    scalar subqueries (:class:`Parameters`); a SELECT over one input or an
    inner equi-join of two is then keyed too (by the row, by the join key).
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
    :func:`_common_blockers` says so)."""
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


def with_aggregate(plan: Plan, aggregate: Plan) -> Plan:
    """``plan`` (touched groups) kept instead by the state of ``aggregate``."""
    return replace(plan, classification=aggregate.classification, aggregate=aggregate.aggregate)


def without_aggregate(plan: Plan, why: str) -> Plan:
    """A GROUP BY ``plan`` without per-group state, and ``why``.

    It recomputes its touched groups if it has that term, else (a GROUP BY
    over a join) it takes the full path.
    """
    if not plan.terms:
        return full(f"GROUP BY over a join: {why}")
    reason = f"{plan.classification.reason} ({why})"
    if plan.aggregate is not None:
        keys = plan.aggregate.keys
        reason = f"GROUP BY {keys} key(s): recompute the touched groups ({why})"
    return replace(plan, classification=Classification("grouped", reason), aggregate=None)


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


#: Aggregates whose result is a function of the multiset of their input rows (Spark's
#: class names): a touched group recomputed gives the row that was written.
_ORDERLESS_AGGREGATES = frozenset(
    {
        "Count",
        "CountIf",
        "HyperLogLogPlusPlus",
        "Sum",
        "TrySum",
        "Average",
        "TryAverage",
        "Min",
        "Max",
        "Median",
        "BitAndAgg",
        "BitOrAgg",
        "BitXorAgg",
        "BoolAnd",
        "BoolOr",
    }
)
#: ... and of those, the ones whose result is one of their values or a count: no rounding
#: (the rest, over floating point values, round in the order of their terms).
_EXACT = frozenset({"Count", "CountIf", "HyperLogLogPlusPlus", "Min", "Max"})
#: ... and of those, the ones that sum in double whatever their argument's type (Spark's
#: Average): exact, so as a function of the multiset, only for the argument types below
#: (INT and narrower, below 2**22 rows a group; decimals and intervals sum exactly).
_DOUBLE_SUMS = frozenset({"Average", "TryAverage"})
_EXACT_IN_DOUBLE = ("integer", "short", "byte", "decimal", "interval")
#: Window functions that give tied rows the same value.
_TIE_FREE_WINDOWS = frozenset({"Rank", "DenseRank", "PercentRank", "CumeDist"})


def order_dependent(analysed: str) -> str | None:
    """Why a query's result may depend on the order of its input rows, or None: from
    Spark's analysed plan as JSON (``LogicalPlan.toJSON``), subqueries included.

    The grouped class recomputes a touched key's rows at ``lower - 1`` and
    retracts them: that is the row written earlier only if the query gives the
    same rows for the same multiset in any order. Not so for aggregates that
    keep an order (collect_list, first, max_by with ties, ...), for floating
    point sums, averages and moments (their rounding follows the order of the
    terms), for averages of BIGINT (Spark sums them in double, which rounds
    past 2**53), and for window functions that tell tied rows apart
    (row_number, lag, a ROWS frame).
    """
    import json

    found: list[str] = []

    def end(nodes: list[Any], i: int) -> int:
        j = i + 1
        for _ in range(int(nodes[i].get("num-children", 0))):
            j = end(nodes, j)
        return j

    def name(node: Any) -> str:
        return str(node.get("class", "")).rsplit(".", 1)[-1]

    def floats(nodes: list[Any]) -> bool:
        return any(n.get("dataType") in ("double", "float") for n in nodes)

    def exact_in_double(argument: list[Any]) -> bool:
        """Whether an argument's values sum exactly in double: its type if its root
        names one, else (an operator) every type in it."""
        types = [n["dataType"] for n in argument[:1] if "dataType" in n] or [
            n["dataType"] for n in argument if "dataType" in n
        ]
        return all(str(t).startswith(_EXACT_IN_DOUBLE) for t in types)

    def check(nodes: list[Any]) -> None:
        for i, node in enumerate(nodes):
            kind = name(node)
            if kind == "AggregateExpression" and i + 1 < len(nodes):
                function = name(nodes[i + 1])
                if function not in _ORDERLESS_AGGREGATES:
                    found.append(f"the aggregate {function} depends on the order of its rows")
                elif function not in _EXACT and floats(nodes[i + 1 : end(nodes, i + 1)]):
                    found.append(f"{function} of floating point values depends on their order")
                elif function in _DOUBLE_SUMS and not exact_in_double(
                    nodes[i + 2 : end(nodes, i + 1)]
                ):
                    found.append(
                        f"{function} of a type wider than INT sums in double, whose rounding "
                        "past 2**53 depends on the order of the rows (sum(x) / count(x) does not)"
                    )
            elif kind == "WindowExpression" and i + 1 < len(nodes):
                function = name(nodes[i + 1])
                if function != "AggregateExpression":
                    if function not in _TIE_FREE_WINDOWS:
                        found.append(f"the window function {function} tells tied rows apart")
                    continue
                window = nodes[i : end(nodes, i)]
                for j, frame in enumerate(window):  # an aggregate over a ROWS frame
                    if name(frame) == "SpecifiedWindowFrame" and "RowFrame" in json.dumps(
                        frame.get("frameType")
                    ):
                        bounds = [name(n) for n in window[j + 1 : end(window, j)]]
                        if bounds != ["UnboundedPreceding$", "UnboundedFollowing$"]:
                            found.append("a ROWS window frame tells tied rows apart")

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            if value and all(isinstance(v, dict) and "num-children" in v for v in value):
                check(value)
            for v in value:
                visit(v)

    visit(json.loads(analysed))
    return "; ".join(dict.fromkeys(found)) or None


#: Plan nodes and expressions sqlglot's qualified SQL adds or renames without changing what
#: the query computes (table aliases, column aliases and qualifiers).
_NAMING = frozenset({"AttributeReference", "Alias", "SubqueryAlias", "Project"})


def rewritten_expressions(analysed: str, qualified: str) -> str | None:
    """What Spark's analysed plan of sqlglot's SQL of a query (``qualified``) holds that
    its plan of the query itself (``analysed``) does not, or the other way round; None if
    nothing but names. Both are ``LogicalPlan.toJSON``.

    The incremental terms are written by sqlglot, the full path runs the query: where
    sqlglot writes a function as another (``log10(x)`` as ``LOG(10, x)``, which rounds
    otherwise) or drops an argument (``to_char``'s format), the two paths disagree.
    """
    import json
    from collections import Counter

    def classes(plan: str) -> Counter[str]:
        out: Counter[str] = Counter()

        def visit(value: Any) -> None:
            if isinstance(value, dict):
                kind = str(value.get("class", "")).rsplit(".", 1)[-1]
                if kind and kind not in _NAMING:
                    out[kind] += 1
                for v in value.values():
                    visit(v)
            elif isinstance(value, list):
                for v in value:
                    visit(v)

        visit(json.loads(plan))
        return out

    mine, theirs = classes(analysed), classes(qualified)
    lost, gained = sorted(mine - theirs), sorted(theirs - mine)
    if not lost and not gained:
        return None
    return (
        "sqlglot writes the query with other expressions "
        f"({', '.join(lost) or 'nothing'} became {', '.join(gained) or 'nothing'})"
    )


def _only_table(node: Any) -> str | None:
    """The one table every column of ``node`` names, or None."""
    from sqlglot import exp

    tables = {c.table for c in node.find_all(exp.Column)}
    return tables.pop() if len(tables) == 1 else None


__all__ = [
    "AT",
    "Classification",
    "KeyedSource",
    "Plan",
    "Term",
    "classify",
    "order_dependent",
    "rewritten_expressions",
]
