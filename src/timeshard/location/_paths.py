"""Local paths the file backends are given: refusing the ones that cannot work.

A path whose nearest existing ancestor is a file (``/dev/null/x.db``), or a
database path that is a directory, cannot become a blob root or a SQLite file
however often it is retried: that is a mistake to fix (InvalidUsage), not a
fault (Determinate). A path that cannot be looked at is not judged here: the
backend's own creation of it fails with Determinate.
"""

from __future__ import annotations

import os
from pathlib import Path

from timeshard.errors import InvalidUsage


def local_path(path: object, what: str) -> Path:
    """``path`` as a Path; InvalidUsage naming it unless it is a ``str`` or an
    ``os.PathLike`` of one, without a NUL character (no file can have such a name)."""
    spelled = os.fspath(path) if isinstance(path, str | os.PathLike) else None
    if not isinstance(spelled, str):
        raise InvalidUsage(f"{what} must be a str or a path, got {path!r}")
    if "\x00" in spelled:
        raise InvalidUsage(f"{what} {spelled!r} has a NUL character")
    return Path(spelled)


def check_creatable(path: Path, what: str, *, directory: bool) -> None:
    """InvalidUsage naming ``path`` unless it is (or can become) a directory (``directory``)
    or a file under directories. A path that cannot be looked at (``stat`` fails, as under
    a directory this user may not search) is left to its creation, which reports why."""
    try:
        _check_creatable(path, what, directory=directory)
    except OSError:
        return


def _check_creatable(path: Path, what: str, *, directory: bool) -> None:
    if path.exists():
        if path.is_dir() != directory:
            kind = "is not a directory" if directory else "is a directory, not a file"
            raise InvalidUsage(f"{what} {str(path)!r} {kind}")
        return
    for ancestor in path.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise InvalidUsage(f"{what} {str(path)!r}: {str(ancestor)!r} is not a directory")
            return


__all__ = ["check_creatable", "local_path"]
