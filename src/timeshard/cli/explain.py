"""``timeshard explain VIEW``: which path a cataloged view takes, why, and what it runs.

A view is maintained on one of three paths (:mod:`timeshard.compute.incremental`):

* ``linear`` -- select/project/filter, inner joins, UNION ALL: the delta over
  ``[lower, upper)`` is the sum of rewritten *terms*, one per table occurrence;
* ``grouped`` -- GROUP BY or DISTINCT over one input: one rewritten query
  recomputes the touched groups at every change time of the interval; or, for
  GROUP BY with count, sum and avg of integral columns (over one input or
  inner joins), a per-group state is kept (:mod:`timeshard.compute.aggregate`):
  delta terms give each input update's contribution to its group, and one
  query turns states into the view's rows;
* ``full`` -- everything else: the view is evaluated from its inputs'
  snapshots at every change time.

The terms run over *placeholder tables*; each stands for one input in one
mode (:data:`MODES`). Explain prints the view's SQL, its inputs, the path
and the reason, what the view keeps cached in Spark (its arrangements, or
why a grouped view's inputs cannot be arranged), and for an incremental view
every term with what each of its placeholders stands for and, for a join over
arranged inputs, the order in which the term joins them ("runs as").

Invariants:

1. Explain classifies exactly as the running view does: it builds the view's
   :class:`~timeshard.compute.view.SparkViewDesired` from its catalog entry
   and reads its ``plan`` (parsing plus Spark's analysis of the rewritten
   queries, which needs a SparkSession but runs no Spark job), in a session
   of its own with the settings the view's query depends on
   (:data:`~timeshard.compute.view.QUERY_SETTINGS`: ANSI mode) as the entry
   records them from the view's session (``session``). An entry that records
   none is explained with the settings of explain's session, and says so.
2. The view is looked up in the catalog before Spark starts: an unknown name
   is an InvalidUsage naming it and the location's views.

Runs on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from timeshard.cli.options import (
    DEFAULT_LOCATION,
    BlobOpt,
    ConsensusOpt,
    JsonOpt,
    LocationOpt,
    console,
    location_from,
    print_json,
)
from timeshard.errors import CorruptState, InvalidUsage
from timeshard.persist import PersistClient

if TYPE_CHECKING:
    from timeshard.catalog import CatalogEntry
    from timeshard.compute.incremental import Plan, Term
    from timeshard.compute.view import ViewDefinition, ViewFunction
#: What a placeholder table of each mode stands for, given ``{input}`` (alias and shard).
MODES: Mapping[str, str] = {
    "old": "{input} as of lower - 1 (its content before the interval), every row at "
    "_ts = lower - 1",
    "delta": "the updates of {input} in [lower, upper), each row with its _ts and _diff",
    "new": "{input} through the interval: old plus delta, each row with its _ts and _diff",
    "at": "the rows of {input} whose key (group, row, window partition or join key) an "
    "update in [lower, upper) touched, at lower - 1 and at every change time of the "
    "interval, each copy tagged with that time in __t",
    "parameters": "the values of the view's scalar subqueries (__p0, __p1 ..) at lower - 1 "
    "and at every change time of the interval (__t)",
    "times": "lower - 1 and every change time of the interval, as __t",
    "subquery": "the rows of {input} (the columns its subquery reads) at lower - 1 and at "
    "every change time of the interval, tagged __t, one row per multiple",
    "state": "per touched group and change time: the group's state (__n rows, __c<j> "
    "non-null and __s<j> sum of argument j, __lo<j> and __hi<j> its min and max) at _ts "
    "with _diff = 1, and the state just before with _diff = -1",
}
#: How a GROUP BY view kept by per-group state makes its delta.
STATE_HOW = (
    "The terms give each input update's group and aggregate arguments (the delta rule "
    "over the view's FROM, joins and WHERE); summed per group and time and added to the "
    "group's cached state (an arrangement), they give its state at each change time. "
    "The last query turns the new and the old states into the view's rows, inserted "
    "and retracted at that time."
)
#: ... and for one whose state keeps min and max.
EXTREMES_HOW = (
    " A group where a retraction may have removed its min or max (a value not strictly "
    "inside it) is recomputed instead, by the last term, from its rows at every "
    "evaluation time."
)
#: How the terms of each incremental path make the view's delta.
COMBINE: Mapping[str, str] = {
    "linear": "The view's delta over [lower, upper) is the sum of the terms: an output row "
    "carries the greatest _ts and the product of the _diff of the rows it comes from.",
    "grouped": "The query runs once over every evaluation time (__t joins the keys); each "
    "key's rows at __t are inserted at __t and retracted at the next evaluation time.",
    "full": "At every change time the view is evaluated from its inputs' snapshots.",
}


def explain(
    view: Annotated[str, typer.Argument(help="The view to explain (its shard id).")],
    location: LocationOpt = DEFAULT_LOCATION,
    blob: BlobOpt = None,
    consensus: ConsensusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show how a view is maintained: its SQL, its inputs, its path (linear, grouped or
    full) and why, and for an incremental view the rewritten queries its delta runs.

    The view comes from the location's catalog; an unknown name is an error
    (exit code 2) before Spark starts. The path is computed as the running
    view computes it, with Spark's analysis (no Spark job).
    """
    from timeshard.spark import spark_session

    client = PersistClient(location_from(location, blob, consensus))
    entry = view_entry_named(client, view)
    definition_of(entry)  # a malformed entry is reported before Spark starts
    spark = spark_session(app_name="timeshard-explain", blob_uri=client.location.blob_uri)
    doc = explain_view(spark, client, entry)
    if as_json:
        print_json(doc)
    else:
        render_explain(doc)


def view_entry_named(client: PersistClient, name: str) -> CatalogEntry:
    """The catalog entry of view ``name``; InvalidUsage naming it and the views if absent.

    The rows are decoded one by one: CorruptState if the view's own row does not
    decode; another object's row that does not decode is no matter (``status``
    shows it), but the InvalidUsage for an absent view names such rows, as a
    view it lists may be among them.
    """
    from timeshard.catalog import CatalogEntry, catalog_rows
    from timeshard.status import catalog_row_object

    views: list[CatalogEntry] = []
    undecoded: list[str] = []
    for row in catalog_rows(client):
        if row.get("name") == name and row.get("kind") == "view":
            return CatalogEntry.from_row(row)  # CorruptState names the row
        try:
            entry = CatalogEntry.from_row(row)
        except CorruptState:
            undecoded.append(catalog_row_object(row))
            continue
        if entry.kind == "view":
            views.append(entry)
    known = ", ".join(repr(e.name) for e in sorted(views, key=lambda e: e.name)) or "none"
    shard = " (a shard, not a view)" if name in client.list_shards() else ""
    damaged = f"; rows that do not decode: {', '.join(undecoded)}" if undecoded else ""
    raise InvalidUsage(
        f"no view {name!r}{shard} in the catalog of this location; its views: {known}{damaged}"
    )


def definition_of(entry: CatalogEntry) -> ViewDefinition:
    """The view definition a catalog entry records.

    A Python function view records only the function's name; it gets a
    stand-in that fails if called (classifying never calls it). CorruptState
    names the entry if it is no view definition (a field missing or of
    another type).
    """
    from timeshard.compute.view import ViewDefinition

    d = entry.definition
    inputs = d.get("inputs")
    if not isinstance(inputs, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in inputs.items()
    ):
        _malformed(entry, f"its inputs must map names to shards, got {inputs!r}")
    sql, function_name = d.get("sql"), d.get("function")
    if sql is None and function_name is None:
        _malformed(entry, "it records neither sql nor function")
    for field, value in (("sql", sql), ("function", function_name)):
        if value is not None and not isinstance(value, str):
            _malformed(entry, f"its {field} must be text, got {value!r}")
    recorded_settings(entry)  # a malformed one is reported before Spark starts
    for field in ("refresh_every_ms", "retain_history_ms"):
        value = d.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            _malformed(entry, f"its {field} must be an integer, got {value!r}")
    function = None if sql is not None else _stand_in(entry.name, function_name)
    try:
        return ViewDefinition(
            entry.name,
            dict(inputs),
            sql,
            function=function,
            refresh_every_ms=d.get("refresh_every_ms"),
            retain_history_ms=d.get("retain_history_ms"),
        )
    except InvalidUsage as e:
        _malformed(entry, str(e))


def recorded_settings(entry: CatalogEntry) -> dict[str, str] | None:
    """The session settings the view ran with, as its entry records them (``session``), or
    None if it records none. CorruptState names the entry if they are not
    :data:`~timeshard.compute.view.QUERY_SETTINGS` names mapped to text."""
    from timeshard.compute.view import QUERY_SETTINGS

    settings = entry.definition.get("session")
    if settings is None:
        return None
    if not isinstance(settings, Mapping) or not all(
        k in QUERY_SETTINGS and isinstance(v, str) for k, v in settings.items()
    ):
        _malformed(
            entry, f"its session must map some of {list(QUERY_SETTINGS)} to text, got {settings!r}"
        )
    return dict(settings)


def _malformed(entry: CatalogEntry, why: str) -> NoReturn:
    raise CorruptState(f"catalog entry (view {entry.name!r}) is no view definition: {why}")


#: How a view's query failing on the data shows (:mod:`timeshard.compute.row_errors`).
ROW_ERRORS = (
    "per row: a row a division, cast or arithmetic of the query fails on is an err row of "
    "that row (the terms below carry the __err column); any other failure on the data makes "
    "the time one err row"
)
TIME_ERRORS = "per time: a query that fails on the data makes the time one err row"


def _stand_in(view: str, name: object) -> ViewFunction:
    def function(frames: Mapping[str, Any]) -> Any:
        raise InvalidUsage(f"view {view!r}: its function {name} is not loaded by explain")

    return function


def explain_view(spark: Any, client: PersistClient, entry: CatalogEntry) -> dict[str, Any]:
    """What ``explain`` shows of a cataloged view, as JSON (see the module doc): classified in
    a session of its own (``spark``'s SQL settings, then those the entry records), so that
    ``spark`` is left as it was."""
    from timeshard.compute.view import SparkViewDesired, query_settings

    definition = definition_of(entry)
    recorded_session = recorded_settings(entry)
    session = spark.newSession()
    for name, value in spark.conf.getAll.items():  # newSession starts from the context's
        if name.startswith("spark.sql.") and session.conf.isModifiable(name):
            session.conf.set(name, value)
    for name, value in (recorded_session or {}).items():
        session.conf.set(name, value)
    desired = SparkViewDesired(session, client, definition)
    try:
        plan = desired.plan
        arrangements = desired.describe_arrangements()
        row_errors = desired.row_errors
    finally:
        desired.close()
    inputs = dict(definition.inputs)
    recorded = entry.definition.get("path")
    terms = list(plan.terms)
    if plan.aggregate is not None:
        from timeshard.compute.incremental import Term

        # the contributions' terms, then the state's output query
        output = Term(plan.aggregate.output, {plan.aggregate.state: ("", "state")}, None)
        # with extremes, the touched groups' term recomputes the groups they may leave
        terms = [*plan.aggregate.terms, output, *(plan.terms if plan.aggregate.extremes else [])]
    if plan.parameters is not None:
        from dataclasses import replace

        from timeshard.compute.incremental import Term

        # the term joins the subqueries' values, which their own query computes
        p = plan.parameters
        terms = [replace(t, tables={**t.tables, p.table: ("", "parameters")}) for t in terms]
        subqueries = {p.times: ("", "times"), **{n: (a, "subquery") for n, a in p.rows.items()}}
        terms.append(Term(p.sql, subqueries, None))
    return {
        "view": entry.name,
        "sql": definition.sql,
        "function": entry.definition.get("function"),
        "refresh_every_ms": definition.refresh_every_ms,
        "inputs": inputs,
        "path": plan.classification.path,
        "reason": plan.classification.reason,
        "recorded_path": recorded if isinstance(recorded, str) else None,
        "session": query_settings(session),
        "session_recorded": recorded_session is not None,
        "how": _how(plan),
        "arrangements": arrangements,
        "errors": ROW_ERRORS if row_errors else TIME_ERRORS,
        "terms": [_term(term, inputs) for term in terms],
    }


def _how(plan: Plan) -> str:
    """How the plan's terms make the view's delta."""
    if plan.aggregate is None:
        return COMBINE[plan.classification.path]
    return STATE_HOW + (EXTREMES_HOW if plan.aggregate.extremes else "")


def _term(term: Term, inputs: Mapping[str, str]) -> dict[str, Any]:
    """A term of the plan as explain shows it: its SQL and what each placeholder is."""

    def table(name: str, alias: str, mode: str) -> dict[str, Any]:
        shard = inputs.get(alias)
        return {
            "placeholder": name,
            "input": alias or None,
            "shard": shard,
            "mode": mode,
            "stands_for": MODES[mode].format(input=f"input {alias} (shard {shard})"),
        }

    order = None
    if term.path is not None:
        order = [
            {"alias": s.alias, "input": s.input, "mode": s.mode, "by": list(s.key), "on": s.on}
            for s in term.path.steps
        ]
    return {
        "sql": term.sql,
        "delta_of": term.delta_of,
        "tables": [table(name, alias, mode) for name, (alias, mode) in term.tables.items()],
        "join_order": order,
    }


def render_explain(doc: Mapping[str, Any]) -> None:
    """Print an :func:`explain_view` document with rich."""
    console.print(f"[bold]view {escape(doc['view'])}[/bold]")
    if doc["sql"] is not None:
        console.print(escape(doc["sql"]), soft_wrap=True, highlight=False)
    else:
        console.print(f"Python function {escape(str(doc['function']))}", highlight=False)
    if doc["refresh_every_ms"] is not None:
        console.print(f"REFRESH EVERY {doc['refresh_every_ms']} ms", highlight=False)
    inputs = Table("alias", "shard", title="inputs")
    for alias, shard in doc["inputs"].items():
        inputs.add_row(escape(alias), escape(shard))
    console.print(inputs)
    console.print(
        f"path: [bold]{doc['path']}[/bold] -- {escape(doc['reason'])}",
        soft_wrap=True,
        highlight=False,
    )
    recorded = doc["recorded_path"]
    if recorded is not None and recorded != doc["path"]:
        console.print(
            f"(the catalog records path {escape(recorded)}, from when the view was "
            "installed; a restart of the view takes the path above)",
            soft_wrap=True,
            highlight=False,
        )
    console.print(escape(doc["how"]), soft_wrap=True, highlight=False)
    settings = ", ".join(f"{k}={v}" for k, v in doc["session"].items())
    whose = "as the view ran" if doc["session_recorded"] else "explain's: the catalog records none"
    console.print(f"session: {escape(settings)} ({whose})", soft_wrap=True, highlight=False)
    console.print("errors: " + escape(doc["errors"]), soft_wrap=True, highlight=False)
    cached = doc["arrangements"] or ["nothing (each tick reads what it needs from the parts)"]
    console.print(
        "kept in Spark: " + "; ".join(escape(line) for line in cached),
        soft_wrap=True,
        highlight=False,
    )
    for i, term in enumerate(doc["terms"], 1):
        when = f" (runs when {term['delta_of']} has updates)" if term["delta_of"] else ""
        table = Table(
            "placeholder",
            "input",
            "mode",
            "stands for",
            title=escape(f"term {i} of {len(doc['terms'])}{when}"),
        )
        for t in term["tables"]:
            table.add_row(
                escape(t["placeholder"]),
                escape(f"{t['input']} ({t['shard']})"),
                t["mode"],
                escape(t["stands_for"]),
            )
        console.print(table)
        console.print(escape(_pretty(term["sql"])), soft_wrap=True, highlight=False)
        if term["join_order"]:
            console.print(
                "runs as: " + escape(" -> ".join(_step(s) for s in term["join_order"])),
                soft_wrap=True,
                highlight=False,
            )


def _step(step: Mapping[str, Any]) -> str:
    """A step of a term's join order as explain prints it."""
    if not step["by"]:
        return f"{step['alias']} ({step['input']}, {step['mode']})"
    by = ", ".join(step["by"])
    return f"{step['alias']} ({step['input']} by {by}, {step['mode']}) on {step['on']}"


def _pretty(sql: str) -> str:
    """``sql`` laid out on several lines (Spark dialect); as given if it does not parse."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        return str(sqlglot.transpile(sql, read="spark", write="spark", pretty=True)[0])
    except SqlglotError:
        return sql


__all__ = [
    "COMBINE",
    "MODES",
    "definition_of",
    "explain",
    "explain_view",
    "recorded_settings",
    "render_explain",
    "view_entry_named",
]
