"""The files of a FILE source's directory, and which names are hidden (driver).

:func:`_walk` lists the files below a directory, entering no hidden
directory and following no link to a directory; a directory that cannot be
listed raises, so its files are never left out silently. A name that starts
with ``.`` or ``_`` is hidden (:func:`hidden`; COPY FROM hides the same).
:class:`~timeshard.storage.file_source.FileSource` orders the files by name
(:mod:`timeshard.storage.file_source`, "Order").
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator
from pathlib import Path


def hidden(names: Iterable[str]) -> bool:
    """Whether a file with these path components (below a directory read) is hidden."""
    return any(n.startswith((".", "_")) for n in names)


def _walk(directory: Path, top: bool = True) -> Iterator[Path]:
    """The files below ``directory`` whose names are not hidden, in no order.

    Hidden directories are not entered. A symbolic link to a file is a file;
    one to a directory is not followed, and a dangling or looping one is no
    file. An error listing a directory raises (``Path.rglob`` ignores a
    PermissionError, and would leave its files out); a subdirectory removed
    since its parent was listed holds no file.
    """
    try:
        with os.scandir(directory) as listing:
            entries = list(listing)
    except FileNotFoundError:
        if top:
            raise
        return
    for entry in entries:
        if hidden([entry.name]):
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(directory / entry.name, top=False)
        elif _is_file(entry):
            yield directory / entry.name


def _is_file(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a file or a link to one (as ``Path.is_file`` says)."""
    try:
        return entry.is_file()
    except OSError as e:
        if e.errno == errno.ELOOP:
            return False
        raise


__all__ = ["hidden"]
