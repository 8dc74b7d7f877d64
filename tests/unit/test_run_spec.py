"""Declaration files for ``timeshard run``: validation names what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard import InvalidUsage
from timeshard.cli.spec import build_source, load_spec
from timeshard.storage.file_source import FileSource
from timeshard.storage.sources import KeyValueGenerator

GOOD = """
[location]
dir = "loc"

[[source]]
name = "kv"
kind = "key_value"
envelope = "upsert"
key_columns = ["key"]
options = { keys = 100, rate = 10 }

[[source]]
name = "events"
kind = "file"
options = { path = "in", format = "json" }
columns = { id = "int64", name = "string" }

[[view]]
name = "n"
inputs = { kv = "kv" }
sql = "SELECT count(*) AS n FROM kv"
"""


def test_good_file(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(GOOD)
    spec = load_spec(f)
    assert [s.name for s in spec.source] == ["kv", "events"]
    kv = build_source(spec.source[0])
    assert isinstance(kv, KeyValueGenerator) and kv.keys == 100
    events = build_source(spec.source[1])
    assert isinstance(events, FileSource) and events.schema.names == ["id", "name"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[[source]]\nname = "x"\nkind = "kafka"\n', "kind"),
        ('[[source]]\nname = "x"\nkind = "counter"\ncolour = 1\n', "colour"),
        ('[[view]]\nname = "v"\n', "inputs"),
        ("not = [toml", "cannot read"),
    ],
)
def test_bad_files(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "run.toml"
    f.write_text(text)
    with pytest.raises(InvalidUsage, match=match):
        load_spec(f)


def test_bad_source_options(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text(
        '[[source]]\nname = "x"\nkind = "key_value"\noptions = { colour = 1 }\n'
        '[[source]]\nname = "y"\nkind = "file"\noptions = { path = "p", '
        'format = "json" }\ncolumns = { id = "decimal" }\n'
    )
    spec = load_spec(f)
    with pytest.raises(InvalidUsage, match="source 'x': bad options"):
        build_source(spec.source[0])
    with pytest.raises(InvalidUsage, match="unknown column types"):
        build_source(spec.source[1])


def test_tpch_source(tmp_path: Path) -> None:
    from timeshard.storage.tpch import TpchGenerator

    f = tmp_path / "run.toml"
    f.write_text(
        '[[source]]\nname = "tp"\nkind = "tpch"\n'
        "options = { scale_factor = 0.01, tick_orders = 5, seed = 3 }\n"
        '[[source]]\nname = "bad"\nkind = "tpch"\noptions = { scale_factor = -1 }\n'
    )
    spec = load_spec(f)
    tp = build_source(spec.source[0])
    assert isinstance(tp, TpchGenerator) and tp.tick_orders == 5
    assert "lineitem" in tp.outputs()
    with pytest.raises(InvalidUsage, match="-1"):
        build_source(spec.source[1])
