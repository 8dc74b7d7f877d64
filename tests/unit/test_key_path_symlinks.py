"""What ``check_key_path`` (every part a Spark task writes under a local root) costs.

Its docstring said "one ``realpath`` of the path", but it ran two pure-Python
realpaths, the root's and the path's: an ``lstat`` per component of both and
two ``stat`` per part (16 ``lstat`` and 2 ``stat`` under a root 7 deep). It
now looks at the key's components only, down to the first missing one, and
resolves the root only to describe a link it found, which may be spelled
through a link of its own.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from timeshard.errors import CorruptState
from timeshard.location.file import check_key_path

KEY = "s/w1/b1/part-00000-0123456789ab.parquet"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()
    for name in ("lstat", "stat"):
        real = getattr(os, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            counts[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, counted)
    return counts


@pytest.mark.parametrize("batch", ["b1", "b2"], ids=["batch directory exists", "new batch"])
def test_an_lstat_per_key_component_and_none_per_root_component(
    tmp_path: Path, calls: Counter[str], batch: str
) -> None:
    root = tmp_path / "a" / "b" / "c" / "blob"
    (root / "s" / "w1" / "b1").mkdir(parents=True)
    key = KEY.replace("b1", batch)
    calls.clear()
    assert check_key_path(root, key) == root / key
    assert dict(calls) == {"lstat": 4 if batch == "b1" else 3}, dict(calls)


def test_a_root_spelled_through_a_link_tells_links_in_it_from_links_out(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "s" / "w1" / "b1").mkdir(parents=True)
    (real / "s" / "w1" / "b1" / "part-1").write_bytes(b"p")
    (tmp_path / "outside").write_bytes(b"o")
    root = tmp_path / "root"
    root.symlink_to(real)
    (root / KEY).symlink_to("part-1")
    with pytest.raises(CorruptState, match=f"is a symbolic link to '{real}/s/w1/b1/part-1': "):
        check_key_path(root, KEY)
    (root / KEY).unlink()
    (root / KEY).symlink_to(tmp_path / "outside")
    with pytest.raises(CorruptState, match=f"outside the blob root '{real}'"):
        check_key_path(root, KEY)
