"""``FileBlob.get`` needs on the directories of a key what a lookup by path needs: search
permission, not read permission (it opens each directory to look the next name up below
it, never to list it)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from timeshard.location import FileBlob

NOBODY = 65534


def _get_as_nobody(blob: FileBlob, key: str) -> str:
    """``repr`` of ``blob.get(key)`` (or of what it raised) in a child process that runs as
    uid ``nobody``: root reads every directory, so only another user shows the permission
    it needs."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                answer = repr(blob.get(key))
            except Exception as e:
                answer = repr(e)
            os.write(write, answer.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        answer = f.read().decode()
    os.waitpid(pid, 0)
    return answer


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
