"""``FileBlob.get`` needs on the directories of a key what a lookup by path needs: search
permission, not read permission (it opens each directory to look the next name up below
it, never to list it)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tests.as_nobody import as_nobody

from timeshard.location import FileBlob


def _get_as_nobody(blob: FileBlob, key: str) -> str:
    """``repr`` of ``blob.get(key)`` (or of what it raised) as uid ``nobody``."""
    return as_nobody(lambda: blob.get(key))


def test_get_reads_a_key_under_directories_it_may_search_but_not_list() -> None:
    root = Path(tempfile.mkdtemp())
    try:
        blob = FileBlob(root)
        blob.set("nor/z", b"z")
        (root / "nor" / "z").chmod(0o644)
        for directory in (root / "nor", root):
            directory.chmod(0o711)  # the owner's; anyone else may search it, not list it
        if os.geteuid() == 0:
            assert _get_as_nobody(blob, "nor/z") == repr(b"z")
        else:
            for directory in (root / "nor", root):
                directory.chmod(0o311)  # not even the owner may list it
            assert blob.get("nor/z") == b"z"
    finally:
        for directory in (root, root / "nor"):
            directory.chmod(0o700)
        shutil.rmtree(root)
