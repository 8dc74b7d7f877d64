"""A Delta export killed with SIGKILL at random points, three times: the table stays exact.

As the PostgreSQL one (``export_kill.py``): the test appends KEY VALUE
changes to a shard the whole time while a worker process exports it to a
Delta table (MERGE on the key, through delta-rs) and is killed, process
group and all, three times. After every kill, and at the end, the table at
its latest version equals the shard's snapshot at the frontier that version
records as its application transaction, minus one: the progress and the
rows were committed in one Delta commit, and no change is lost or applied
twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from tests.faults.export_kill import ExportUnderKills


@pytest.mark.faults
@pytest.mark.spark
def test_delta_export_killed_three_times_keeps_the_table_exact(tmp_path: Path) -> None:
    uri = tmp_path / "delta"
    run = ExportUnderKills(tmp_path, seed=29, target=["delta", str(uri), "-"])

    def table_and_progress() -> tuple[dict[str, int], int]:
        """The table and its progress, from one version of it."""
        if not (uri / "_delta_log").exists():
            return {}, 0
        table = DeltaTable(str(uri))
        frontier = table.transaction_version("kv-to-delta") or 0
        rows = table.to_pyarrow_table().to_pylist()
        return {r["k"]: r["v"] for r in rows}, frontier

    check = run.checker(table_and_progress)

    run.run(check, after_kill=check)
    assert check() == run.t
    assert table_and_progress()[0] == run.model
