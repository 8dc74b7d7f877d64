"""View definitions and the desired collection they describe.

A view is Spark SQL, or a Python function from DataFrames to a DataFrame,
over named input shards. Its *desired* collection at time ``t`` is the query
over the inputs' snapshots at ``t``: every input row appears as many times as
its multiplicity, and the result's rows are counted into multiplicities.

``REFRESH EVERY <interval>`` views change only at refresh times, the
multiples of the interval: at time ``t`` such a view holds the query over the
inputs at the last refresh time ``<= t``. Its desired frontier can then run
ahead of its inputs up to the next refresh time.

Errors that follow from the data are data:

* err rows of an input (``_err`` not null), and input rows with a negative
  multiplicity, become err rows of the view;
* under ANSI mode, a row the query fails on -- a division by zero, a cast of
  a value that does not fit, an arithmetic overflow -- is an err row of that
  row, with its multiplicity: the view's SQL is rewritten to evaluate those
  operators in their ``try_`` forms and flag where they fail
  (:mod:`timeshard.compute.row_errors`); every other row stays;
* a query that still fails at time ``t`` on the data (an error of SQLSTATE
  class 22, "data exception", :func:`is_data_error`, raised where the rewrite
  does not reach, or an exception a Python UDF raised on a row) makes the
  view's content at ``t`` a single err row holding the message; the view
  recovers at the first time the query succeeds again.

Every other failure (I/O, a missing part, a lost lease, a Py4J or JVM error,
out of memory, a killed executor, a Python worker that crashed, or whose
function ran out of memory or failed on I/O) is a fault: it is raised,
retried by the sink, and never written.

Reads. A writing sink reads its inputs' parts through leased readers
(:meth:`SparkViewDesired.use_leases`), so that GC keeps every part a planned
Spark read needs; a read-only replica reads without leases (it writes nothing
to consensus) and retries a read whose part was collected meanwhile.

Temporary views. The view's SQL names its inputs by their aliases, so it is
analysed against temporary views of those names, in the session's catalog:
two evaluations at once on one session (the full check's thread and a tick,
or two views of one server with an input alias in common) would resolve each
other's frames. Registering the frames and analysing the query is therefore
one step under a lock held by every evaluation in the process
(:data:`_EVALUATING`); the analysed plan no longer reads the catalog.

Names. Columns whose names start with ``__`` (:data:`INTERNAL_PREFIX`) are
the view's own: the multiplicity of an input row, the per-row err column,
evaluation times and group states of the incremental terms. It is an error
(InvalidUsage, when the view's columns are first analysed) for an input or
the view to have such a column: the view would read or write ours in its
place.

Everything here runs on the driver and submits Spark jobs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from timeshard.compute.aggregate import type_problem
from timeshard.compute.delta import SparkDelta
from timeshard.compute.incremental import (
    Plan,
    classify,
    order_dependent,
    rewritten_expressions,
    without_aggregate,
)
from timeshard.compute.incremental import full as full_plan
from timeshard.compute.row_errors import ERRORS, with_row_errors
from timeshard.errors import InvalidUsage, LeaseExpired
from timeshard.persist import ReadHandle, expire_all
from timeshard.persist._internal.parts import DIFF, ERR, TS
from timeshard.persist.client import check_shard_id
from timeshard.persist.fetch import UnleasedReader
from timeshard.progress import Frontier, Timestamp

log = logging.getLogger(__name__)

#: Held while an evaluation registers its inputs' frames under their aliases and Spark
#: analyses the view's SQL against them (module doc, "Temporary views").
_EVALUATING = threading.Lock()

ViewFunction = Callable[[Mapping[str, Any]], Any]


#: An input alias of a SQL view: each is registered as a temp view, whose name Spark parses
#: as an identifier (``123`` or ``a.b`` is refused there, after the view was built).
_TEMP_VIEW_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ViewDefinition:
    """What a materialized view computes.

    ``inputs`` maps the names the query uses to input shard ids. Exactly one
    of ``sql`` and ``function`` is given. It is an error for two aliases of a
    ``sql`` view to differ only in case: each is a temp view, and Spark SQL does
    not tell those names apart (the query would read one input for both).
    """

    name: str
    inputs: Mapping[str, str]
    sql: str | None = None
    function: ViewFunction | None = None
    refresh_every_ms: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    #: RETAIN HISTORY: the view's shard stays readable this far back from its upper.
    retain_history_ms: int | None = None

    def __post_init__(self) -> None:
        if (self.sql is None) == (self.function is None):
            raise InvalidUsage(f"view {self.name!r} needs exactly one of sql and function")
        if not self.inputs:
            raise InvalidUsage(f"view {self.name!r} has no inputs")
        for shard in self.inputs.values():
            try:
                check_shard_id(shard)
            except InvalidUsage as e:
                raise InvalidUsage(f"view {self.name!r}: input {e}") from None
        folded: dict[str, str] = {}
        for alias in self.inputs if self.sql is not None else ():  # temp views: case folds
            if not isinstance(alias, str) or not _TEMP_VIEW_NAME.fullmatch(alias):
                raise InvalidUsage(
                    f"view {self.name!r}: input alias {alias!r} is no name Spark SQL takes for "
                    "a table: use letters, digits and '_', not starting with a digit"
                )
            other = folded.setdefault(alias.lower(), alias)
            if other != alias:
                raise InvalidUsage(
                    f"view {self.name!r}: inputs {other!r} and {alias!r} differ only in case, "
                    "and Spark SQL does not tell them apart: rename one"
                )
        every = self.refresh_every_ms
        if every is not None and (not _whole_ms(every) or every <= 0):
            raise InvalidUsage(
                f"REFRESH EVERY must be a positive whole number of ms, got {every!r}"
            )
        retain = self.retain_history_ms
        if retain is not None and (not _whole_ms(retain) or retain < 0):
            raise InvalidUsage(
                f"RETAIN HISTORY must be a non-negative duration, got {self.retain_history_ms!r}"
            )

    def refresh_time(self, t: Timestamp) -> Timestamp:
        """The time whose inputs the view shows at ``t``."""
        if self.refresh_every_ms is None:
            return t
        return t - t % self.refresh_every_ms

    def first_shown_from(self, t: Timestamp) -> Timestamp:
        """The first time at or after ``t`` that shows inputs at ``t`` or later: ``t``, or
        the next refresh time. A view's as_of is one, or it would read its inputs below
        ``t`` -- below their since, when ``t`` is it."""
        every = self.refresh_every_ms
        return t if every is None or t % every == 0 else t + every - t % every


def _whole_ms(value: object) -> bool:
    """Whether ``value`` is a whole number of ms: an int, not a bool (a float interval made
    float times, at which a view read its inputs)."""
    return isinstance(value, int) and not isinstance(value, bool)


DATA_EXCEPTION_CLASS = "22"
#: Spark's error conditions outside SQLSTATE class 22 that the data alone decides, so every
#: replica and every retry gets them: a scalar subquery of more than one row (21000), a
#: map built with a key twice (23505), ``raise_error``/``assert_true`` on a row (P0001), an
#: array or map grown past Spark's limit (54000).
DATA_ERROR_CONDITIONS = frozenset(
    {
        "SCALAR_SUBQUERY_TOO_MANY_ROWS",
        "DUPLICATED_MAP_KEY",
        "USER_RAISED_EXCEPTION",
        "COLLECTION_SIZE_LIMIT_EXCEEDED",
    }
)
#: The prefix of the columns a view computes for itself: no input or view column has it.
INTERNAL_PREFIX = "__"
#: The session settings a view's query and plan depend on (ANSI mode decides the row
#: errors' rewrite, so the terms the delta runs and which failures are err rows of a row):
#: a view records its session's, and ``timeshard explain`` classifies it with them.
QUERY_SETTINGS = ("spark.sql.ansi.enabled",)


def query_settings(spark: Any) -> dict[str, str]:
    """The :data:`QUERY_SETTINGS` of the session ``spark``, as it evaluates them (no job)."""
    return {name: str(spark.conf.get(name)).lower() for name in QUERY_SETTINGS}


def check_column_names(view: str, names: list[str], where: str) -> None:
    """Raise InvalidUsage if a column of ``names`` (those of ``where``: an input, or the
    view's output) starts with :data:`INTERNAL_PREFIX`."""
    internal = [n for n in names if n.startswith(INTERNAL_PREFIX)]
    if internal:
        raise InvalidUsage(
            f"view {view!r}: column {internal[0]!r} of {where} starts with "
            f"{INTERNAL_PREFIX!r}, which names the view's internal columns: rename it"
        )


#: Python exceptions that are faults of the worker or its environment, not of a row, though
#: the user's function raised them: out of memory, I/O and the network, an import or an
#: unpickling that failed, an interpreter error. (Names as a traceback's last line has them.)
PYTHON_FAULTS: tuple[type[BaseException], ...] = (
    MemoryError,
    OSError,
    EOFError,
    ImportError,
    SystemError,
    SystemExit,
    KeyboardInterrupt,
)
PYTHON_FAULT_NAMES = frozenset(
    {"pickle.UnpicklingError", "_pickle.UnpicklingError", "pickle.PicklingError"}
    | {"_pickle.PicklingError", "pyspark.errors.exceptions.base.PySparkRuntimeError"}
)
#: The JVM class of an exception raised in a Python worker, its message the traceback.
_JVM_PYTHON_EXCEPTION = "org.apache.spark.api.python.PythonException"


def is_data_error(error: BaseException) -> bool:
    """Whether ``error`` is a query failing on the data: SQLSTATE class 22, one of
    :data:`DATA_ERROR_CONDITIONS`, or an exception the user's Python function (a UDF)
    raised on a row (:func:`python_row_error`).

    Those are deterministic: every replica and every retry evaluating the
    query over the same input gets the same error. Anything else -- Py4J and
    JVM errors, I/O, analysis errors of the definition, a Python worker that
    crashed, ran out of memory or was killed -- is not.
    """
    return _data_error_cause(error) is not None or python_row_error(error) is not None


def python_row_error(error: BaseException) -> str | None:
    """The exception line (``ValueError: bad value 3``) of the exception the user's Python
    function raised on a row, if ``error`` is (or wraps) one, else None.

    Whose code raised it is decided by the first frame of the traceback past
    PySpark's and Py4J's (the worker's own): the user's function, or timeshard's
    own task (reading or writing parts; what it raises, also from pyarrow or the
    standard library it calls, is a fault). Then the exception must be no fault
    of the worker either (:data:`PYTHON_FAULTS` or a subclass, :data:`PYTHON_FAULT_NAMES`,
    timeshard's own errors). A worker that crashed or was killed raises no Python
    exception at all: a SparkException, a fault.
    """
    traceback = _python_traceback(error)
    if traceback is None:
        return None
    lines = traceback.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    first = next((lines[i] for i in frames if not _in_spark(lines[i])), None)
    if first is None or _in_timeshard(first):
        return None
    raised = next(
        (line for line in lines[frames[-1] + 1 :] if line and not line[0].isspace()), None
    )
    if raised is None or _is_python_fault(raised.split(":", 1)[0].strip()):
        return None
    return raised


def _frame_path(frame: str) -> str:
    """The file of a traceback's frame line (``  File "path", line n, in f``)."""
    return frame.split('"')[1] if frame.count('"') >= 2 else frame


def _in_spark(frame: str) -> bool:
    """Whether a traceback's frame is PySpark's or Py4J's own code (the worker's)."""
    path = _frame_path(frame)
    return any(f"{os.sep}{package}{os.sep}" in path for package in ("pyspark", "py4j"))


def _in_timeshard(frame: str) -> bool:
    """Whether a traceback's frame is timeshard's own code: this installation's, or any
    other's (a worker's, wherever it is installed) by the package's own module names."""
    path = _frame_path(frame)
    if path.startswith(_PACKAGE_DIR):
        return True
    _, found, rest = path.partition(f"{os.sep}timeshard{os.sep}")
    return bool(found) and rest.split(os.sep, 1)[0] in _PACKAGE_ENTRIES


#: This installation's timeshard package, as a traceback's paths start with it, and the
#: names in it (subpackages and modules), by which another installation's paths are known.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_PACKAGE_ENTRIES = frozenset(
    name for name in os.listdir(_PACKAGE_DIR) if not name.startswith(("_", "."))
) | {"__init__.py"}


def _is_python_fault(name: str) -> bool:
    """Whether the Python exception class ``name`` (as a traceback names it) is a fault.

    A class of the standard library is looked up in its module, imported if it
    is not yet (a network error of ``urllib`` or ``http.client`` is an OSError
    whatever the driver imported); another one's only in a module the driver
    has imported (the user's function's module, and what it imports), as the
    driver runs no other code to classify an error.
    """
    import builtins
    import importlib
    import sys

    if name in PYTHON_FAULT_NAMES or name.startswith("timeshard."):
        return True
    module, _, attribute = name.rpartition(".")
    owner: Any = builtins if not module else sys.modules.get(module)
    if owner is None and module.split(".")[0] in sys.stdlib_module_names:
        try:
            owner = importlib.import_module(module)
        except Exception:  # (the name as a traceback gives it may be no module's)
            owner = None
    cls = getattr(owner, attribute, None) if owner is not None else None
    return isinstance(cls, type) and issubclass(cls, PYTHON_FAULTS)


def _python_traceback(error: BaseException) -> str | None:
    """The Python traceback of the worker exception ``error`` is or wraps, else None."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    from pyspark.errors.exceptions.base import PythonException

    if isinstance(error, PythonException):
        return str(getattr(error, "_desc", None) or error)
    if isinstance(error, PySparkException):
        origin = getattr(error, "_origin", None)
    elif isinstance(error, Py4JJavaError):
        origin = error.java_exception
    else:
        return None
    try:
        for _ in range(16):  # a cause chain is short; a cycle is not followed forever
            if origin is None:
                return None
            if str(origin.getClass().getName()) == _JVM_PYTHON_EXCEPTION:
                return str(origin.getMessage() or "")
            origin = origin.getCause()
    except Exception:  # the JVM is gone: no traceback to read
        return None
    return None


def data_error_message(error: BaseException) -> str:
    """The first line of the message of the data error ``error`` carries (its own, or its
    first cause's with a SQLSTATE: a wrapper's names a Py4J object, another at every
    evaluation), with the error's type; for a Python function's, its exception line."""
    cause = _data_error_cause(error)
    raised = python_row_error(error) if cause is None else None
    if raised is not None:
        return f"PythonException: {raised[:500]}"
    if cause is None or cause is error:
        text, kind = str(error), type(error).__name__
    else:
        text, kind = str(cause.getMessage() or ""), str(cause.getClass().getSimpleName())
    return f"{kind}: {text.splitlines()[0][:500] if text else ''}"


def _is_data_state(state: str | None, condition: str | None) -> bool:
    return (state is not None and state.startswith(DATA_EXCEPTION_CLASS)) or (
        condition in DATA_ERROR_CONDITIONS
    )


def _data_error_cause(error: BaseException) -> Any:
    """``error`` itself if it is a data error, else the JVM cause that makes it one (the
    first in its chain with a SQLSTATE), else None."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    if isinstance(error, PySparkException):
        state = error.getSqlState()
        if state is not None:
            return error if _is_data_state(state, error.getCondition()) else None
        origin = getattr(error, "_origin", None)
    elif isinstance(error, Py4JJavaError):
        origin = error.java_exception
    else:
        return None
    # Without a state of its own: a wrapper, such as the "Exception thrown in awaitResult"
    # of a broadcast or subquery Spark ran while it planned (lazy checkpoints do), whose
    # cause is the query's failure.
    return None if origin is None else _jvm_data_cause(origin)


def _jvm_data_cause(origin: Any) -> Any:
    """A JVM exception's first cause with a SQLSTATE, if that is a data error, else None."""
    from py4j.java_gateway import is_instance_of
    from pyspark import SparkContext

    gateway, jvm = SparkContext._gateway, SparkContext._jvm
    if gateway is None or jvm is None:
        return None
    try:
        for _ in range(16):  # a cause chain is short; a cycle is not followed forever
            if is_instance_of(gateway, origin, "org.apache.spark.SparkThrowable"):
                state = jvm.PythonErrorUtils.getSqlState(origin)
                if state is not None:
                    condition = jvm.PythonErrorUtils.getCondition(origin)
                    return origin if _is_data_state(state, condition) else None
            origin = origin.getCause()
            if origin is None:
                return None
    except Exception:  # the JVM is gone: not a data error
        return None
    return None


class SparkViewDesired:
    """The desired collection of a view, computed with Spark from its inputs.

    Reads inputs with unleased readers (no consensus writes, so a read-only
    replica can use it); a writing sink holds the inputs' since separately.
    """

    def __init__(self, spark: Any, client: Any, definition: ViewDefinition) -> None:
        self.spark = spark
        self.definition = definition
        self.client = client
        self.readers: dict[str, UnleasedReader] = {
            alias: client.open_unleased_reader(shard) for alias, shard in definition.inputs.items()
        }
        self._leases: dict[str, ReadHandle] = {}
        self._schema: pa.Schema | None = None
        #: The SQL the view runs, and its columns: the view's own, or rewritten with the
        #: per-row err column (row_errors.ERRORS) last.
        self._query: tuple[str, pa.Schema] | None = None
        #: Each input's ok rows with no parts: what the view's analyses run over (no job).
        self._empty_frames: dict[str, Any] | None = None
        self._plan: Plan | None = None
        self._delta: SparkDelta | None = None

    def use_leases(self) -> None:
        """Read parts through leased readers from now on (a writing sink)."""
        if not self._leases:
            self._leases = self.lease_inputs()

    def reopen_leases(self) -> None:
        """A lease ran out (the process was paused, consensus was away): read through new
        leased readers from now on. The sink's durable input holds kept the inputs readable
        where it reads. If opening one fails, the old leases stay, to be replaced at the
        next failure (they raise LeaseExpired again)."""
        if not self._leases:
            return
        old, self._leases = list(self._leases.values()), self.lease_inputs()
        with contextlib.suppress(Exception):
            expire_all(old)

    def lease_inputs(self) -> dict[str, ReadHandle]:
        """New leased readers of the inputs, by alias, their since at the inputs' since now
        (the view's own, or a reader's on another thread: the full check's, read with
        :meth:`snapshot_through`). The caller expires them; none is left open on failure."""
        leases: dict[str, ReadHandle] = {}
        try:
            for alias, shard in self.definition.inputs.items():
                leases[alias] = self.client.open_leased_reader(shard)
        except BaseException:
            with contextlib.suppress(Exception):
                expire_all(leases.values())
            raise
        return leases

    def release_leases(self) -> None:
        """Read without leases from now on (a sink fenced by a newer generation, which
        writes nothing more): the inputs' history is no longer held for it."""
        old, self._leases = list(self._leases.values()), {}
        expire_all(old)

    def hold_reads_at(self, t: Timestamp) -> None:
        """The sink reads nothing before ``t`` any more: its leases may let go of it."""
        for alias, lease in list(self._leases.items()):
            try:
                lease.downgrade_since(t)
            except LeaseExpired:
                shard = self.definition.inputs[alias]
                self._leases[alias] = self.client.open_leased_reader(shard)

    def close(self) -> None:
        """Free the arrangements, release the leases (the sink's durable holds are separate)."""
        self.forget_arrangements()
        self.release_leases()

    def forget_arrangements(self) -> None:
        """Free what the deltas keep (arrangements, per-group state): the next delta rebuilds
        it from the inputs' snapshots."""
        if self._delta is not None:
            self._delta.close()
            self._delta = None

    def frontier(self) -> Frontier:
        """Desired is known at every time before this frontier."""
        upper = Frontier.empty()
        for reader in self.readers.values():
            upper = upper.meet(reader.upper())
        every = self.definition.refresh_every_ms
        if every is None or upper.time is None or upper.time == 0:
            return upper
        last_complete = upper.time - 1
        return Frontier(last_complete - last_complete % every + every)

    def change_times(self, lower: Timestamp, upper: Timestamp) -> list[Timestamp]:
        """Times in ``[lower, upper)`` at which desired may differ from just before."""
        every = self.definition.refresh_every_ms
        if every is None:
            return self._input_change_times(lower, upper)
        # Desired at a refresh time r shows the inputs at r, and just before r it shows
        # them at r - every: it changes at r only if an input changed in (r - every, r].
        # Every refresh time of the interval would be ~1e9 of them over wall-clock ms.
        first = lower + (-lower) % every
        if first >= upper:
            return []
        changed = self._input_change_times(max(first - every + 1, 0), upper)
        return sorted({r for t in changed if lower <= (r := t + (-t) % every) < upper})

    def _input_change_times(self, lower: Timestamp, upper: Timestamp) -> list[Timestamp]:
        times: set[int] = set()
        for reader in self.readers.values():
            times |= set(reader.change_times(lower, upper))
        return sorted(times)

    @property
    def plan(self) -> Plan:
        """How the view is maintained: incrementally (and how) or from snapshots, and why."""
        if self._plan is None:
            self._plan = self._classify()
        return self._plan

    @property
    def incremental(self) -> bool:
        return self.plan.classification.incremental

    def delta(self, lower: Timestamp, upper: Timestamp) -> Any | None:
        """The view's updates at times in ``[lower, upper)`` from its inputs' updates.

        None if no input it reads has an update there (no Spark job runs then). Only for
        an incremental view (:attr:`incremental`); see
        :mod:`timeshard.compute.delta`.
        """
        return self._spark_delta().delta(lower, upper)

    def _spark_delta(self) -> SparkDelta:
        if self._delta is None:
            assert self.incremental, self.plan
            self._delta = SparkDelta(
                self.spark,
                self.plan,
                self.query()[1],
                self.definition.inputs,
                self._parts_reader,
                lambda alias, lo, hi: self.readers[alias].change_times(lo, hi),
            )
        return self._delta

    def prepare(self, lower: Timestamp) -> None:
        """The next delta starts at ``lower``: build what it keeps (arrangements) now."""
        if self.incremental:
            self._spark_delta().prepare(lower)

    def written(self) -> None:
        """The last delta has been written: settle the state its write filled."""
        if self._delta is not None:
            self._delta.written()

    def arrangements(self) -> list[Any]:
        """The arrangements its deltas keep (``upsert_state.ArrangedState``)."""
        return [] if self._delta is None else self._delta.arrangements()

    def describe_arrangements(self) -> list[str]:
        """What an incremental view's deltas keep cached in Spark, one line each (no job)."""
        return self._spark_delta().describe() if self.incremental else []

    def _parts_reader(self, alias: str) -> Any:
        lease = self._leases.get(alias)
        return lease if lease is not None else self.readers[alias]

    def _classify(self) -> Plan:
        """The view's plan; the rewritten queries must analyse to the view's own types."""
        definition = self.definition
        if definition.function is not None:
            return full_plan("a Python function view needs the full path")
        if definition.refresh_every_ms is not None:
            return full_plan("REFRESH EVERY views change at refresh times: the full path")
        assert definition.sql is not None
        schemas = {alias: reader.schema for alias, reader in self.readers.items()}
        sql, _columns = self.query()
        plan = classify(sql, schemas)
        if not plan.classification.incremental:
            return plan
        why = self._check_rewrite(sql, plan) or self._check_terms(plan) or self._check_keys(plan)
        if why is not None:
            return full_plan(why)
        if plan.classification.path == "grouped":
            why = self._order_dependent()
            if why is not None:
                return full_plan(
                    f"{why}: a touched key recomputed could retract other rows than those "
                    "written, so the full path"
                )
        if plan.aggregate is not None:
            why = self._check_aggregate(plan)
            if why is not None:
                plan = without_aggregate(plan, why)
        return plan

    def _check_aggregate(self, plan: Plan) -> str | None:
        """Why the per-group state does not give the view's columns and types (no job)."""
        from timeshard.spark.session import arrow_to_spark_schema

        assert plan.aggregate is not None
        want = [f.dataType for f in arrow_to_spark_schema(self.query()[1]).fields]

        def schema_of(alias: str) -> Any:
            return arrow_to_spark_schema(self.readers[alias].schema)

        why = type_problem(self.spark, plan.aggregate, schema_of, want)
        if why is None and plan.aggregate.extremes:
            # The groups whose min or max may move are recomputed from the input arranged
            # by the group key: it must be one.
            from timeshard.compute.arranged_rows import KeyedRows

            for s in plan.keyed:
                keyed = KeyedRows(self.spark, s.keys, s.alias, schema_of(s.input).names)
                why = keyed.why_not(schema_of(s.input))
                if why is not None:
                    return f"min/max keep no state: input {s.input!r} is not arranged by key: {why}"
        return why

    def _check_rewrite(self, sql: str, plan: Plan) -> str | None:
        """Why the incremental terms, written by sqlglot, may compute other values than
        ``sql`` (:func:`~timeshard.compute.incremental.rewritten_expressions`), or None (no
        job: two analyses)."""
        from pyspark.errors import PySparkException

        frames = self._analysed_frames()
        try:
            plans = [
                self._evaluate(frames, text)._jdf.queryExecution().analyzed().toJSON()
                for text in (sql, plan.qualified)
            ]
        except PySparkException as e:
            return f"sqlglot's Spark SQL of the query does not analyse: {str(e).splitlines()[0]}"
        why = rewritten_expressions(*plans)
        return None if why is None else f"{why}: the full path"

    def _order_dependent(self) -> str | None:
        """Why the view's query may give other rows for the same inputs in another order
        (:func:`~timeshard.compute.incremental.order_dependent`), or None (no job)."""
        frames = self._analysed_frames()
        analysed = self._evaluate(frames)._jdf.queryExecution().analyzed()
        return order_dependent(analysed.toJSON())

    def _check_keys(self, plan: Plan) -> str | None:
        """Why the keys of a grouped plan's inputs cannot be kept or matched: a key that is
        no value of one row (a generator, ``DISTINCT explode(arr)``), or keys of different
        types (the touched keys of one input are cast to another's key types, which is the
        query's comparison only for equal types: Spark compares the string '01' equal to
        the number 1, which casts to '1'). No job."""
        from pyspark.errors import PySparkException

        types = {}
        for source in plan.keyed:
            empty = self._empty_input(source.input).alias(source.alias)
            fields = ", ".join(f"'k{i}', {key}" for i, key in enumerate(source.keys))
            try:  # one struct column, as the arrangements compute the key
                [key] = empty.selectExpr(f"named_struct({fields})").schema
            except PySparkException as e:
                first = str(e).splitlines()[0][:200]
                return f"the keys {list(source.keys)} are not one row's values ({first})"
            got = [f.dataType.simpleString() for f in key.dataType.fields]
            types[f"{source.alias}: {', '.join(source.keys)}"] = got
        if len({tuple(t) for t in types.values()}) > 1:
            said = "; ".join(f"{k} ({', '.join(t)})" for k, t in types.items())
            return f"the inputs' keys have different types ({said}): the full path"
        return None

    def _empty_input(self, alias: str) -> Any:
        """Input ``alias`` with no rows, as Spark types it (for analysis only: no job)."""
        from timeshard.spark.session import arrow_to_spark_schema

        schema = arrow_to_spark_schema(self.readers[alias].schema)
        from timeshard.spark.sqltext import empty_frame

        return empty_frame(self.spark, schema)

    def _check_terms(self, plan: Plan) -> str | None:
        """Why the rewritten queries do not give the view's columns and types (no job)."""
        from pyspark.errors import PySparkException
        from pyspark.sql import functions as F

        from timeshard.compute.incremental import AT
        from timeshard.spark.parts import column
        from timeshard.spark.session import arrow_to_spark_schema

        empty = self._empty_input
        want = [f.dataType for f in arrow_to_spark_schema(self.query()[1]).fields]
        for term in plan.terms:
            for name, (alias, mode) in term.tables.items():
                extra = (
                    [F.lit(0).cast("long").alias(AT)]
                    if mode == "at"
                    else [F.lit(0).cast("long").alias(TS), F.lit(0).cast("long").alias(DIFF)]
                )
                empty(alias).select("*", *extra).createOrReplaceTempView(name)
            try:
                if plan.parameters is not None:
                    parameters = plan.parameters
                    for name, alias in parameters.rows.items():
                        at = F.lit(0).cast("long").alias(AT)
                        read = [column(c) for c in parameters.columns[name]]
                        empty(alias).select(*read, at).createOrReplaceTempView(name)
                    self.spark.sql(f"SELECT 0L AS {AT}").createOrReplaceTempView(parameters.times)
                    self.spark.sql(parameters.sql).createOrReplaceTempView(parameters.table)
                got = self.spark.sql(term.sql).schema.fields[: len(want)]
            except PySparkException as e:
                return f"the rewritten query did not analyse ({str(e).splitlines()[0][:200]})"
            if [f.dataType for f in got] != want:
                return "the rewritten query changes the view's column types"
        return None

    def data_schema(self) -> pa.Schema:
        """The view's data columns, from Spark's analysis of the query (no job).

        Raises InvalidUsage if an input or the view has a column whose name
        starts with :data:`INTERNAL_PREFIX`.
        """
        if self._schema is None:
            from timeshard.spark.session import spark_to_arrow_schema

            name = self.definition.name
            for alias, reader in self.readers.items():
                shard = self.definition.inputs[alias]
                check_column_names(name, reader.schema.names, f"input {alias!r} ({shard!r})")
            frames = self._analysed_frames()
            result = self._evaluate(frames)
            schema = spark_to_arrow_schema(result.schema)
            check_column_names(name, schema.names, "its output")
            self._schema = pa.schema([f.with_nullable(True) for f in schema])
        return self._schema

    def snapshot(self, t: Timestamp) -> Any:
        """Desired at ``t`` as a snapshot DataFrame (data columns, ``_diff``, ``_err``)."""
        return self.snapshot_through(t, self._leases)

    def snapshot_through(self, t: Timestamp, leases: Mapping[str, ReadHandle]) -> Any:
        """:meth:`snapshot`, the inputs' parts listed through ``leases`` (by alias; an input
        without one, unleased): the view's own, or those of :meth:`lease_inputs`."""
        from pyspark.sql import functions as F

        from timeshard.spark.parts import column

        at = self.definition.refresh_time(t)
        schema = self.data_schema()
        data = list(schema.names)
        oks, errs = {}, []
        for alias in self.readers:
            ok, err = self._input_frames(alias, at, leases)
            oks[alias] = ok
            errs.append(err)
        sql, columns = self.query()
        result = self._evaluate(oks, sql).toDF(*columns.names)
        if ERRORS in columns.names:  # a row the query failed on: an err row of that row
            failed = F.col(ERRORS).isNotNull()
            result = result.select(
                *[F.when(~failed, column(c)).alias(c) for c in data], F.col(ERRORS).alias(ERR)
            )
        else:
            result = result.withColumn(ERR, F.lit(None).cast("string"))
        counted = result.groupBy(*data, ERR).agg(F.count(F.lit(1)).cast("long").alias(DIFF))
        for err in errs:
            nulls = [F.lit(None).cast(result.schema[c].dataType).alias(c) for c in data]
            counted = counted.unionByName(err.select(*nulls, DIFF, ERR))
        return counted

    def error_snapshot(self, t: Timestamp, error: BaseException) -> Any:
        """The view's content at ``t`` when its query fails there: one err row."""
        from pyspark.sql import functions as F

        data = list(self.data_schema().names)
        # No time in it: one failure spanning many times is one row whatever the batches.
        message = f"view {self.definition.name!r} failed on its inputs: "
        message += data_error_message(error)
        row = self.spark.range(1).select(
            *[F.lit(None).alias(c) for c in data],
            F.lit(1).cast("long").alias(DIFF),
            F.lit(message).alias(ERR),
        )
        from timeshard.spark.session import arrow_to_spark_schema

        target = arrow_to_spark_schema(self.data_schema())
        return row.select(*[F.col(f.name).cast(f.dataType) for f in target.fields], DIFF, ERR)

    def _analysed_frames(self) -> dict[str, Any]:
        """Each input's ok rows with none in them, typed as :meth:`_input_frames` gives them
        (the input's data columns, as consolidated; InvalidUsage for a map, as there): the
        frames the view's analyses of its query run over. Made once, as local relations,
        whose analysis is a fraction of the snapshot plan's (no job)."""
        if self._empty_frames is None:
            from timeshard.spark.session import arrow_to_spark_schema
            from timeshard.spark.snapshot import check_groupable
            from timeshard.spark.sqltext import empty_frame

            frames = {}
            for alias, reader in self.readers.items():
                schema = arrow_to_spark_schema(reader.schema)
                check_groupable(schema)
                frames[alias] = empty_frame(self.spark, schema)
            self._empty_frames = frames
        return dict(self._empty_frames)

    def _input_frames(
        self, alias: str, at: Timestamp | None, leases: Mapping[str, ReadHandle] | None = None
    ) -> tuple[Any, Any]:
        """(ok rows expanded by multiplicity, err rows) of input ``alias`` at ``at``, its
        parts listed through ``leases[alias]`` if there is one (else unleased)."""
        from pyspark.sql import functions as F

        from timeshard.spark.parts import read_parts
        from timeshard.spark.snapshot import consolidate_df

        reader = self.readers[alias]
        names = list(reader.schema.names)
        lease = (leases or {}).get(alias)
        if at is None:
            parts = []
        elif lease is not None:
            parts = lease.snapshot_parts(at)
        else:
            parts = reader.snapshot_parts(at)
        df = read_parts(self.spark, reader.blob, parts, reader.schema)
        if at is not None:
            df = df.where(F.col(TS) <= F.lit(at)).withColumn(TS, F.lit(at).cast("long"))
        snap = consolidate_df(df, names)
        ok = (
            snap.where(F.col(ERR).isNull() & (F.col(DIFF) > 0))
            .withColumn("__n", F.explode(F.sequence(F.lit(1), F.col(DIFF).cast("int"))))
            .select(*names)
        )
        err = snap.where(F.col(ERR).isNotNull() | (F.col(DIFF) < 0)).select(
            F.coalesce(
                F.col(ERR),
                F.concat(
                    F.lit(f"input {alias!r} has a negative multiplicity: "),
                    F.to_json(F.struct(*names)),
                ),
            ).alias(ERR),
            F.abs(F.col(DIFF)).alias(DIFF),
        )
        return ok, err

    def query(self) -> tuple[str, pa.Schema]:
        """The SQL the view runs, and its columns (no job).

        Under ANSI mode, the view's SQL with per-row errors
        (:func:`~timeshard.compute.row_errors.with_row_errors`): its columns,
        then :data:`~timeshard.compute.row_errors.ERRORS`. A rewrite Spark
        does not analyse to the view's own types is not taken (first the
        arithmetic is left alone, then everything): the view's SQL as it is.
        """
        if self._query is None:
            data = self.data_schema()
            sql = self.definition.sql
            self._query = (sql or "", data)
            if (
                sql is not None
                and self.spark.conf.get("spark.sql.ansi.enabled", "true").lower() == "true"
            ):
                for arithmetic in (True, False):
                    rewritten = with_row_errors(sql, arithmetic=arithmetic)
                    if rewritten is not None and self._types_alike(rewritten, data):
                        columns = pa.schema([*data, pa.field(ERRORS, pa.string())])
                        self._query = (rewritten, columns)
                        break
        return self._query

    @property
    def row_errors(self) -> bool:
        """Whether a row the query fails on is an err row of that row (else of the time)."""
        return self.definition.sql is not None and ERRORS in self.query()[1].names

    def _types_alike(self, sql: str, data: pa.Schema) -> bool:
        """Whether ``sql`` analyses to ``data``'s types, then a string column (no job)."""
        from pyspark.errors import PySparkException
        from pyspark.sql.types import StringType

        from timeshard.spark.session import arrow_to_spark_schema

        frames = self._analysed_frames()
        try:
            got = [f.dataType for f in self._evaluate(frames, sql).schema.fields]
        except PySparkException as e:
            log.info("view %r keeps errors per time: %s", self.definition.name, e)
            return False
        want = [f.dataType for f in arrow_to_spark_schema(data).fields]
        return got == [*want, StringType()]

    def _evaluate(self, frames: Mapping[str, Any], sql: str | None = None) -> Any:
        if self.definition.function is not None:
            return self.definition.function(frames)
        sql = sql or self.definition.sql
        assert sql is not None
        with _EVALUATING:  # the aliases are session-wide names (module doc)
            for alias, frame in frames.items():
                frame.createOrReplaceTempView(alias)
            return self.spark.sql(sql)


__all__ = [
    "INTERNAL_PREFIX",
    "QUERY_SETTINGS",
    "SparkViewDesired",
    "ViewDefinition",
    "ViewFunction",
    "check_column_names",
    "is_data_error",
    "python_row_error",
    "query_settings",
]
