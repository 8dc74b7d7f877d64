"""The nemesis's pure parts: the seeded plan, the control file, the faulty location, inputs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from timeshard import Determinate, InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.nemesis import KINDS, Control, FaultyLocation, NemesisConfig, plan_faults
from timeshard.nemesis.disk import BlobDisk
from timeshard.nemesis.runner import input_lines, pipeline_spec


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    plans = [plan_faults(7, run, replicas=3, seconds=120) for run in range(3)]
    assert plans == [plan_faults(7, run, replicas=3, seconds=120) for run in range(3)]
    assert plans[0] != plans[1]
    assert plans[0] != plan_faults(8, 0, replicas=3, seconds=120)


@pytest.mark.parametrize("seed", range(20))
def test_a_plan_has_every_kind_in_order_and_in_bounds(seed: int) -> None:
    plan = plan_faults(seed, 0, replicas=2, seconds=40)
    assert {f.kind for f in plan} == set(KINDS)
    assert [f.at_s for f in plan] == sorted(f.at_s for f in plan)
    assert all(0 <= f.at_s < 40 for f in plan)
    for f in plan:
        if f.kind in ("pg_restart", "disk_full"):
            assert f.replica is None
        else:
            assert f.replica in (0, 1)
        if f.kind == "unreliable":
            assert 0.05 <= f.rate <= 0.10
        if f.kind == "clock_jump":
            assert 2_000 <= abs(f.clock_jump_ms) < 20_000


def test_plan_kinds_can_be_restricted() -> None:
    plan = plan_faults(1, 0, replicas=2, seconds=60, kinds=("kill", "pause"))
    assert {f.kind for f in plan} == {"kill", "pause"}


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"kinds": ("kill", "flood")}, "flood"),
        ({"replicas": 0}, "0"),
        ({"seconds": 0}, "0"),
    ],
)
def test_bad_plan_arguments_are_invalid_usage(kwargs: dict[str, object], named: str) -> None:
    args: dict[str, object] = {"replicas": 2, "seconds": 10.0, **kwargs}
    with pytest.raises(InvalidUsage, match=named):
        plan_faults(0, 0, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"replicas": 9},
        {"consensus": "mysql"},
        {"runs": 2, "minutes": 3.0},
        {"runs": 0},
        {"runs": None, "minutes": -1.0},
        {"kinds": ("meteor",)},
    ],
)
def test_bad_nemesis_config_is_invalid_usage(tmp_path: Path, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidUsage):
        NemesisConfig(directory=tmp_path, **kwargs)  # type: ignore[arg-type]


def test_sqlite_runs_skip_the_postgres_restart(tmp_path: Path) -> None:
    config = NemesisConfig(directory=tmp_path, consensus="both", runs=2)
    assert config.consensus_of(0) == "sqlite" and config.consensus_of(1) == "postgres"
    assert "pg_restart" not in config.kinds_of(0)
    assert config.kinds_of(1) == KINDS


def test_control_round_trips_and_a_missing_file_means_no_faults(tmp_path: Path) -> None:
    path = tmp_path / "control-0.json"
    assert Control.read(path) == Control()
    control = Control(unreliable_rate=0.07, disk_full=True, clock_offset_ms=-5000)
    control.write(path)
    assert Control.read(path) == control
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(InvalidUsage, match="version"):
        Control.read(path)


def test_faulty_location_obeys_the_control() -> None:
    faulty = FaultyLocation(Location(MemoryBlob(), MemoryConsensus()), seed="s")
    blob = faulty.location.blob
    blob.set("a", b"1")  # no faults by default
    faulty.apply(Control(disk_full=True))
    with pytest.raises(Determinate, match="No space left"):
        blob.set("b", b"2")
    assert blob.get("a") == b"1"  # reads still work on a full disk
    faulty.apply(Control(unreliable_rate=1.0))
    with pytest.raises(Determinate):
        faulty.location.consensus.head("x")
    faulty.apply(Control(clock_offset_ms=60_000))
    assert faulty.clock() - faulty.clock_offset_ms <= faulty.clock()
    assert faulty.clock_offset_ms == 60_000
    faulty.apply(Control())
    blob.set("c", b"3")
    assert sum(faulty.injected().values()) >= 1


def test_input_lines_are_seeded_and_hold_deletes_and_bad_lines() -> None:
    lines = input_lines(random.Random(3), 2000)
    assert lines == input_lines(random.Random(3), 2000)
    decoded = []
    bad = 0
    for line in lines:
        try:
            decoded.append(json.loads(line))
        except ValueError:
            bad += 1
    deletes = sum(set(d) == {"id"} for d in decoded)
    assert 20 < bad < 120 and 120 < deletes < 320


def test_pipeline_spec_is_a_valid_declaration(tmp_path: Path) -> None:
    from timeshard.cli.spec import RunSpec
    from timeshard.controller import spec_shards

    spec = pipeline_spec("file:///tmp/b", "sqlite:///tmp/c.db", tmp_path)
    again = RunSpec.model_validate_json(spec.model_dump_json())
    assert again == spec
    assert spec_shards(spec) == ["kv", "events", "kv_by_prefix", "events_by_grp"]


def test_a_full_tmpfs_refuses_writes_until_drained(tmp_path: Path) -> None:
    disk = BlobDisk(tmp_path / "disk")
    if not disk.mount(4):
        pytest.skip(f"this machine cannot mount a tmpfs here: {disk.why_not}")
    try:
        assert disk.fill() > 0
        assert disk.fill() == 0  # a second fault while the disk is full
        with pytest.raises(OSError, match="No space left"):
            (disk.blob_root / "x").write_bytes(b"y" * 65536)
        disk.drain()
        (disk.blob_root / "x").write_bytes(b"y" * 65536)
        assert [p.name for p in disk.blob_root.iterdir()] == ["x"]
    finally:
        disk.unmount()
    assert not disk.mounted
