"""An explicit ``as_of`` whose inputs are no longer readable there is refused at install.

No query can produce the view there: its sink would retry a SinceError for ever.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.persist.holds import view_hold_id

pytestmark = pytest.mark.spark

INPUT = pa.schema([("k", pa.string()), ("v", pa.int64())])
SQL = "SELECT k, sum(v) AS s FROM inp GROUP BY k"


def inputs_held_from(client: PersistClient, since: int, upper: int) -> Any:
    """The input ``inp`` with updates at every time before ``upper``, readable from ``since``."""
    writer = client.open_writer("inp", INPUT)
    for t in range(upper):
        writer.append([(("k", t), t, 1)], t, t + 1)
    writer.expire()
    hold = client.open_critical_since("inp", "test", "")
    hold.downgrade_since(since)
    return hold


def test_an_explicit_as_of_before_the_inputs_since_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    inputs_held_from(client, since=3, upper=5)
    definition = ViewDefinition("v", {"inp": "inp"}, SQL)
    with pytest.raises(InvalidUsage, match=r"as_of 1 .* since 3"):
        MaterializedView.install(spark, client, definition, as_of=1, background_io=False)
    assert view_hold_id("v") not in client.state("inp").critical_readers
    view = MaterializedView.install(spark, client, definition, as_of=3, background_io=False)
    view.catch_up()
    assert view.sink.last_error is None
    view.close()


def test_an_input_since_moving_past_as_of_while_the_install_holds_it_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    other = inputs_held_from(client, since=0, upper=5)
    register = client.open_critical_since

    def since_moves_first(shard_id: str, reader_id: str, *args: Any, **kw: Any) -> Any:
        if reader_id == view_hold_id("v"):  # after install checked as_of, before the hold
            other.downgrade_since(3)
        return register(shard_id, reader_id, *args, **kw)

    client.open_critical_since = since_moves_first  # type: ignore[method-assign]
    definition = ViewDefinition("v", {"inp": "inp"}, SQL)
    with pytest.raises(InvalidUsage, match=r"as_of 1 .* since 3"):
        MaterializedView.install(spark, client, definition, as_of=1, background_io=False)
    client.open_critical_since = register  # type: ignore[method-assign]
    assert view_hold_id("v") not in client.state("inp").critical_readers  # the view is new
    assert "deploy" not in client.state("v").critical_readers
    assert not client.state("v").writers


def test_a_view_resumed_with_its_explicit_as_of_past_the_inputs_since_is_installed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A view keeps its as_of for good; resumed, it reads its inputs from its shard's last
    time on, not from as_of: an explicit as_of the inputs compacted past is no reason to
    refuse it (replicas restarted with ``as_of=0`` were refused, and all of them died)."""
    client = PersistClient(Location.embedded(tmp_path))
    hold = inputs_held_from(client, since=0, upper=5)
    definition = ViewDefinition("v", {"inp": "inp"}, SQL)
    view = MaterializedView.install(spark, client, definition, as_of=0, background_io=False)
    view.catch_up()
    view.close()
    hold.downgrade_since(4)  # the view's own hold is at its last time, 4
    assert client.state("inp").since.time == 4
    again = MaterializedView.install(spark, client, definition, as_of=0, background_io=False)
    again.catch_up()
    assert again.sink.last_error is None
    again.close()


def test_a_fault_recording_the_view_leaves_no_sink_behind(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault after the sink was opened (recording the view in the catalog) left the sink
    open: its writer renewing its lease (so the view read as running), its holds on the
    inputs. ``timeshard run`` installs again after a fault, so each fault left one more."""
    import timeshard.compute.materialized_view as materialized_view
    from timeshard.errors import Determinate

    client = PersistClient(Location.embedded(tmp_path))
    inputs_held_from(client, since=0, upper=3)
    definition = ViewDefinition("v", {"inp": "inp"}, SQL)
    record = materialized_view.record_view

    def unreachable(*args: Any, **kw: Any) -> None:
        raise Determinate("consensus unreachable")

    monkeypatch.setattr(materialized_view, "record_view", unreachable)
    with pytest.raises(Determinate, match="consensus unreachable"):
        MaterializedView.install(spark, client, definition, background_io=False)
    assert not client.state("v").writers
    assert view_hold_id("v") not in client.state("inp").critical_readers
    monkeypatch.setattr(materialized_view, "record_view", record)
    view = MaterializedView.install(spark, client, definition, background_io=False)
    view.catch_up()
    assert view.sink.last_error is None
    view.close()
