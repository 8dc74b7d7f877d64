"""Reading commands on malformed state: an error line and exit code 2, nothing created.

``timeshard explain`` on a catalog view entry that is valid JSON but no view
definition (no ``inputs``, say) crashed with a traceback; ``timeshard
status`` on a 0-byte ``consensus.sqlite`` created the location's tables and
its blob directory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from timeshard.catalog import Catalog, CatalogEntry
from timeshard.cli.explain import definition_of
from timeshard.cli.main import main
from timeshard.errors import CorruptState
from timeshard.location import Location
from timeshard.persist import PersistClient


def run(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["timeshard", *args])
    with pytest.raises(SystemExit) as e:
        main()
    return int(e.value.code or 0)


@pytest.mark.parametrize(
    ("definition", "why"),
    [
        ({"sql": "SELECT 1"}, "inputs must map"),
        ({"inputs": "c", "sql": "SELECT 1"}, "inputs must map"),
        ({"inputs": {"c": "c"}}, "neither sql nor function"),
        ({"inputs": {"c": "c"}, "sql": 1}, "sql must be text"),
        ({"inputs": {"c": "c"}, "sql": "SELECT 1", "refresh_every_ms": "5s"}, "refresh_every_ms"),
        ({"inputs": {}, "sql": "SELECT 1"}, "no inputs"),
    ],
)
def test_a_malformed_view_entry_is_corrupt_state(definition: dict[str, Any], why: str) -> None:
    with pytest.raises(CorruptState, match=rf"catalog entry \(view 'v'\).*{why}"):
        definition_of(CatalogEntry("v", "view", definition))


def test_explain_of_a_malformed_entry_is_an_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    Catalog(client).record([CatalogEntry("v", "view", {"sql": "SELECT 1"})])
    assert run(monkeypatch, "explain", "v", "-l", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "catalog entry (view 'v')" in err


def test_status_on_an_empty_consensus_file_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "consensus.sqlite").touch()
    assert run(monkeypatch, "status", "-l", str(tmp_path)) == 2
    assert "empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["consensus.sqlite"]
    assert (tmp_path / "consensus.sqlite").stat().st_size == 0
