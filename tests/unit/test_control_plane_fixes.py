"""The control plane's refusals and reports: a run file's location, status over a damaged
catalog, drop of a followed view, and a fault while a run installs a view.

No Spark: the views are opened as their sinks open them, and the pipeline's view install
is replaced where it would start Spark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.spec import load_spec


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('dir = "loc"\nblob = "file:///b"\nconsensus = "sqlite:///c.db"', ["dir", "blob"]),
        ('dir = "loc"\nblob = "file:///b"', ["dir", "blob"]),
        ('dir = "loc"\nconsensus = "sqlite:///c.db"', ["dir", "consensus"]),
        ('blob = "file:///b"', ["blob", "consensus"]),
        ('consensus = "sqlite:///c.db"', ["consensus", "blob"]),
    ],
)
def test_a_location_named_two_ways_or_half_named_is_refused(
    tmp_path: Path, table: str, named: list[str]
) -> None:
    """``dir`` beside ``blob``/``consensus`` silently used the latter (the directory the
    user named was ignored), and ``blob`` alone was refused later as a CLI flag."""
    f = tmp_path / "run.toml"
    f.write_text(f"[location]\n{table}\n")
    with pytest.raises(InvalidUsage) as e:
        load_spec(f)
    for name in named:
        assert name in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_a_location_named_one_way_loads(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('[location]\nblob = "file:///b"\nconsensus = "sqlite:///c.db"\n')
    loc = load_spec(f).location
    assert (loc.dir, loc.blob, loc.consensus) == (None, "file:///b", "sqlite:///c.db")
    f.write_text('[location]\ndir = "loc"\n')
    assert load_spec(f).location.dir == "loc"
    f.write_text("")
    assert load_spec(f).location.dir == ".timeshard"
