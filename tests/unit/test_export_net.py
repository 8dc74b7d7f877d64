"""A keyed export's net change per key over a tick, against a model of the target."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timeshard.persist import DIFF
from timeshard.storage.export import KeyChange, net_per_key

#: A value: NaN, null or a few floats (so that keys often change back to a value).
VALUES = st.one_of(st.just(math.nan), st.none(), st.sampled_from([0.0, 1.5, -2.0]))
#: Per time of a tick, what some keys become: a value, or deleted (the key absent).
STEPS = st.lists(
    st.dictionaries(st.integers(0, 3), st.one_of(st.just("delete"), VALUES), max_size=3),
    max_size=5,
)


def same(a: Any, b: Any) -> bool:
    """Equal as Spark finds them: a NaN equals a NaN."""
    both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return both_nan or a == b


def changes(before: dict[int, Any], steps: list[dict[int, Any]]) -> list[dict[str, Any]]:
    """The shard's updates of a tick, as the task reads them: sorted by key."""
    state = dict(before)
    rows = []
    for t, step in enumerate(steps):
        for key, new in step.items():
            old = state.get(key, "delete")
            if old != "delete" and new != "delete" and same(old, new):
                continue  # consolidated away within the time
            if key in state:
                rows.append({"k": key, "v": state.pop(key), "_ts": t, DIFF: -1})
            if new != "delete":
                state[key] = new
                rows.append({"k": key, "v": new, "_ts": t, DIFF: 1})
    return sorted(rows, key=lambda r: (r["k"], r["_ts"]))


def after(before: dict[int, Any], steps: list[dict[int, Any]]) -> dict[int, Any]:
    state = dict(before)
    for step in steps:
        for key, new in step.items():
            if new == "delete":
                state.pop(key, None)
            else:
                state[key] = new
    return state


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(0, 3), VALUES), STEPS)
def test_the_target_equals_the_shard_after_each_tick(
    before: dict[int, Any], steps: list[dict[int, Any]]
) -> None:
    """A key changed and changed back within a tick was deleted from the target; a NaN row
    inserted and deleted within one stayed (``nan != nan``), or made two rows of one key."""
    target = dict(before)
    for change in net_per_key(changes(before, steps), ["k"], ["v"]):
        (key,) = change.key
        if change.row is None:
            assert key in target, change  # a delete of a row the target does not hold
            del target[key]
        else:
            target[key] = change.row[0]
    want = after(before, steps)
    assert target.keys() == want.keys() and all(same(target[k], want[k]) for k in want), (
        target,
        want,
    )


def test_a_key_changed_and_changed_back_is_no_change() -> None:
    rows = [
        {"k": 1, "v": "A", DIFF: -1},
        {"k": 1, "v": "B", DIFF: 1},
        {"k": 1, "v": "B", DIFF: -1},
        {"k": 1, "v": "A", DIFF: 1},
        {"k": 2, "v": "C", DIFF: -1},
    ]
    assert net_per_key(rows, ["k"], ["v"]) == [KeyChange((2,), None, had_row=True)]


def test_json_records_are_strict_json() -> None:
    """``NaN`` and ``Infinity`` are no JSON: strict consumers (Jackson, JSON.parse) refuse it."""
    from timeshard.storage.export import to_json

    record = {"v": math.nan, "w": [math.inf, -math.inf, 1.5], "s": {"x": None}}
    text = to_json(record)
    assert text == b'{"v":"NaN","w":["Infinity","-Infinity",1.5],"s":{"x":null}}'
    assert to_json({"v": 1.5}) == b'{"v":1.5}'


def test_a_refused_export_declaration_leaves_no_hold_on_its_input(tmp_path: Any) -> None:
    """The critical hold was registered before the subclass's checks: a refused declaration
    kept the input shard from compacting for ever, and no DROP could remove it."""
    import pyarrow as pa
    import pytest

    from timeshard.errors import InvalidUsage
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.storage.postgres_export import PostgresExport

    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("orders", pa.schema([("k", pa.int64()), ("d", pa.float16())]))
    writer.expire()
    with pytest.raises(InvalidUsage, match=r"columns \['d'\] of shard 'orders' have no"):
        PostgresExport(None, client, "orders", "host=127.0.0.1 port=9", "t", key_columns=["k"])
    state = client.state("orders")
    assert state.critical_readers == {} and state.leased_readers == {}


def test_an_export_refuses_a_progress_that_is_another_shards(tmp_path: Any) -> None:
    """The target names its progress by export id only: an export whose input was changed
    under the same name went on from the old shard's frontier, skipping the new one's
    changes below it."""
    from collections.abc import Callable, Iterable

    import pyarrow as pa
    import pytest

    from timeshard.errors import InvalidUsage
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.storage.export import Progress, ShardExport

    recorded: dict[str, Progress] = {}

    class Recorded(ShardExport):
        """A target that only records progress (the steps here need no Spark job)."""

        target = "a test target"

        def progress(self) -> Progress | None:
            return recorded.get(self.export_id)

        def _task(self, lower: int, upper: int) -> Callable[[Iterable[pa.RecordBatch]], Any]:
            raise AssertionError("no tick here has changes")

    client = PersistClient(Location.embedded(tmp_path / "loc"))
    schema = pa.schema([("k", pa.int64())])
    writers = {shard: client.open_writer(shard, schema) for shard in ("old", "new")}
    writers["new"].append([], 0, 6)

    def export(shard: str) -> Recorded:
        return Recorded(
            None, client, shard, envelope="upsert", key_columns=["k"], export_id="x", version=1
        )

    first = export("old")
    assert first.step().status == "idle"  # nothing to export yet; its hold is registered
    first.close()
    writers["old"].append([], 0, 6)
    recorded["x"] = Progress(6, 1)  # as if its next ticks exported [0, 6)
    again = export("old")  # a restart: its own progress
    assert again.step().status == "idle"
    again.close()
    moved = export("new")
    with pytest.raises(InvalidUsage, match="shard 'new' holds no hold of that export"):
        moved.step()
    moved.close()
    for writer in writers.values():
        writer.expire()


@pytest.mark.parametrize(
    ("code", "silent"), [("_TIMED_OUT", True), ("_TRANSPORT", True), ("_INVALID_ARG", False)]
)
def test_a_broker_fault_in_init_transactions_is_a_silence_or_fails_the_task_not_the_data(
    monkeypatch: Any, code: str, silent: bool
) -> None:
    """It was reported as status "error", which the driver raises as an ExportError: "the
    export cannot go on from the data it has", for a coordinator that was not up yet. A
    coordinator that does not answer is a silence (status "silent", the driver's
    BrokerSilent); another fault fails the task, and the next tick retries."""
    import confluent_kafka
    from confluent_kafka import KafkaError, KafkaException

    from timeshard.storage.kafka_export import _ProduceTask

    class Unreachable:
        def __init__(self, conf: dict[str, Any]) -> None:
            pass

        def init_transactions(self, timeout: float) -> None:
            raise KafkaException(KafkaError(getattr(KafkaError, code), "no coordinator"))

    monkeypatch.setattr(confluent_kafka, "Producer", Unreachable)
    task = _ProduceTask("b:9", "t", "p", "x", 1, "upsert", ("k",), ("k",), 0, 5, 1.0)
    if not silent:
        with pytest.raises(KafkaException, match="no coordinator"):
            list(task(iter([])))
        return
    [batch] = list(task(iter([])))
    [row] = batch.to_pylist()
    assert (row["status"], row["records"]) == ("silent", 0)
    assert "no coordinator" in row["detail"]


def test_a_nan_key_groups_as_one_key() -> None:
    """``hashable`` returned a tuple of keys unchanged and ``nan != nan``: a NaN key inserted
    and deleted in one tick became a delete and an upsert (the row stayed), and an update of
    one sent two source rows to a Delta MERGE."""
    inserted_and_deleted = [
        {"k": float("nan"), "v": 5, DIFF: 1},
        {"k": float("nan"), "v": 5, DIFF: -1},
    ]
    assert net_per_key(inserted_and_deleted, ["k"], ["k", "v"]) == []
    updated = [
        {"k": float("nan"), "v": 1, DIFF: -1},
        {"k": float("nan"), "v": 2, DIFF: 1},
        {"k": -0.0, "v": 3, DIFF: -1},
        {"k": 0.0, "v": 4, DIFF: 1},
    ]
    [nan, zero] = net_per_key(updated, ["k"], ["v"])
    assert math.isnan(nan.key[0]) and nan.row == (2,)
    assert zero.row == (4,)


def test_a_row_twice_is_two_rows_of_its_key() -> None:
    """A row of multiplicity 2 counted as one (distinct rows were counted, not their
    multiplicities): it was exported once, then deleted when one copy was retracted."""
    import pytest

    from timeshard.storage.export import DataError

    twice = [{"k": "a", "v": 1, DIFF: 2}]
    with pytest.raises(DataError, match=r"key \('a',\) has 2 rows .*\('a', 1\) 2 times"):
        net_per_key(twice, ["k"], ["k", "v"])
    replaced_by_two = [{"k": "a", "v": 1, DIFF: -1}, {"k": "a", "v": 2, DIFF: 2}]
    with pytest.raises(DataError, match="has 2 rows"):
        net_per_key(replaced_by_two, ["k"], ["k", "v"])
    assert net_per_key([{"k": "a", "v": 1, DIFF: 1}], ["k"], ["k", "v"]) == [
        KeyChange(("a",), ("a", 1), had_row=False)
    ]


def _err(message: str, time: int, diff: int) -> dict[str, Any]:
    from timeshard.persist._internal.parts import ERR, TS

    return {"k": None, "v": None, TS: time, DIFF: diff, ERR: message}


def test_an_error_blocks_a_per_time_target_from_where_it_stays() -> None:
    """An error's insertion and retraction are two rows (consolidated per time): the first
    err row failed every tick, so an error once retracted blocked the export for ever."""
    import pyarrow as pa

    from timeshard.storage.export import ErrorNet, blocked_at

    def batch(*rows: dict[str, Any]) -> list[pa.RecordBatch]:
        return [pa.RecordBatch.from_pylist(list(rows))]

    passed = batch(_err("bad", 3, 1), _err("bad", 5, -1))
    assert blocked_at(passed) is None
    stays = batch(_err("bad", 3, 1), _err("bad", 5, -1), _err("worse", 6, 1), _err("bad", 7, 1))
    assert blocked_at(stays) == (
        6,
        "the shard has an error at time 6, which an export cannot write: worse",
    )
    errors = ErrorNet()
    assert list(errors.ok_rows(passed)) == [] and errors.left() is None
    errors.check_none_left()
    errors = ErrorNet()
    list(errors.ok_rows(stays))
    assert errors.left() == (3, "bad")  # bad is back at 7: it was first seen at 3


def test_an_export_keyed_by_a_map_column_is_refused_when_declared(tmp_path: Any) -> None:
    """Every tick sorts the changes by the key, which Spark cannot for a map: an export
    keyed by one would be accepted, then refused at every step (stalled for ever). A map
    that is not a key is exported (Spark consolidates maps)."""
    import pyarrow as pa
    import pytest

    from timeshard.errors import InvalidUsage
    from timeshard.location import Location
    from timeshard.persist import PersistClient
    from timeshard.storage.delta_export import DeltaExport

    client = PersistClient(Location.embedded(tmp_path / "loc"))
    schema = pa.schema([("k", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))])
    client.open_writer("orders", schema).expire()
    with pytest.raises(InvalidUsage, match=r"'orders' cannot be exported keyed by 'm'"):
        DeltaExport(None, client, "orders", str(tmp_path / "t"), key_columns=["m"])
    state = client.state("orders")
    assert state.critical_readers == {} and state.leased_readers == {}
    DeltaExport(None, client, "orders", str(tmp_path / "t"), key_columns=["k"]).close()


def test_a_tasks_result_from_a_spark_job_or_from_the_driver_makes_its_step() -> None:
    """A job's result is a pyspark Row, which has no ``get``: reading the task's detail
    with it failed every export tick that ran a job, after its commit."""
    from pyspark.sql import Row

    from timeshard.storage.export import ExportStep, step_of

    fields = {"status": "silent", "records": 0, "detail": "its transaction: timed out"}
    expected = ExportStep(2, 5, 0, "silent", "its transaction: timed out")
    assert step_of(Row(**fields, frontier=None), 2, 5) == expected
    assert step_of({**fields, "frontier": None}, 2, 5) == expected
    committed = Row(status="committed", records=3, detail=None, frontier=5)
    assert step_of(committed, 2, 5) == ExportStep(2, 5, 3, "committed", None)


@pytest.mark.parametrize(("code", "silent"), [("_TIMED_OUT", True), ("_INVALID_ARG", False)])
def test_an_abort_that_gets_no_answer_is_a_silence_not_a_failed_task(
    code: str, silent: bool
) -> None:
    """Before: an abort (after a record too large, a data error or a refused batch) whose
    coordinator did not answer raised out of the task: a failed Spark job, which started
    the export's pause anew, so every tick of the outage waited the whole timeout."""
    from confluent_kafka import KafkaError, KafkaException

    from timeshard.storage.kafka_export import _ProduceTask

    class Producer:
        def abort_transaction(self, timeout: float) -> None:
            raise KafkaException(KafkaError(getattr(KafkaError, code), "no answer"))

    task = _ProduceTask("b:9", "t", "p", "x", 1, "upsert", ("k",), ("k",), 0, 5, 1.0)
    if silent:
        assert "abort" in (task._abort(Producer()) or "")
    else:
        with pytest.raises(KafkaException, match="no answer"):
            task._abort(Producer())
