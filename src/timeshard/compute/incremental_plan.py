"""A view's incremental plan as values: its class, its delta terms and what they read.

:func:`~timeshard.compute.incremental.classify` makes a :class:`Plan`;
:class:`~timeshard.compute.delta.SparkDelta` runs it. A plan is made of
frozen dataclasses: the :class:`Classification` (the path and why), the
:class:`Term` queries over placeholder tables (:func:`_placeholder`, named
per view by ``_id_counter`` and per input and mode), a linear join's
:class:`JoinPath` of :class:`Step`, a grouped plan's :class:`KeyedSource`,
:class:`AggregatePlan` and :class:`Parameters`. :func:`full`,
:func:`with_aggregate` and :func:`without_aggregate` make and change plans.

Runs on the driver: the plan is planning data, never sent to a Spark task.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from timeshard.compute.aggregate import state_extremes, state_sums, state_values

Path = Literal["linear", "grouped", "full"]
#: The evaluation time column of the grouped class's rewritten query.
AT = "__t"
#: Placeholder table names in rewritten queries: ``__tsv<view>_<input>_<mode>``.
_MODES = ("old", "delta", "new", "at", "state")


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
    #: are written (:func:`~timeshard.compute.incremental_analysis.rewritten_expressions`
    #: tells where it means something else).
    qualified: str = ""


def full(reason: str) -> Plan:
    return Plan(Classification("full", reason))


def _placeholder(view_id: int, source: str, mode: str) -> str:
    assert mode in _MODES, mode
    return f"__tsv{view_id}_{source.encode().hex()}_{mode}"


def _rename(table: Any, name: str) -> None:
    """Point a table reference at ``name``, keeping the alias its columns use."""
    from sqlglot import exp

    alias = table.alias_or_name
    table.set("this", exp.to_identifier(name, quoted=True))
    table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))


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


__all__ = [
    "AT",
    "AggregatePlan",
    "Classification",
    "JoinPath",
    "KeyedSource",
    "Parameters",
    "Path",
    "Plan",
    "Step",
    "Term",
    "full",
    "with_aggregate",
    "without_aggregate",
]
