"""The blob's disk, which the nemesis can fill: a small tmpfs if one can be mounted.

:meth:`BlobDisk.mount` mounts a tmpfs of ``size_mb`` at a directory (this
needs root, or ``CAP_SYS_ADMIN``); the blob lives in ``<mount>/blob``. Then
:meth:`fill` makes the disk really full -- a ballast file next to the blob
takes every free byte, so every writer, the Spark tasks writing parts
included, gets ``ENOSPC`` -- and :meth:`drain` frees it again.

Where no tmpfs can be mounted, ``mounted`` is False and the runner falls back
to :class:`~timeshard.nemesis.control.FullDiskBlob` in each replica, which
fails the writes made on the driver only. The report says which was used.

Invariants:

1. The ballast is outside the blob root, so no blob listing (GC, verify)
   ever sees it.
2. :meth:`unmount` drains first, and is a no-op if nothing was mounted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

BALLAST = "ballast"
CHUNK = 1 << 20


class BlobDisk:
    """A directory for the blob, on a tmpfs of its own if the system lets us mount one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.mounted = False
        self.why_not = ""

    @property
    def blob_root(self) -> Path:
        return self.directory / "blob"

    def mount(self, size_mb: int) -> bool:
        """Mount a tmpfs of ``size_mb`` MiB there; False (with ``why_not``) if we cannot."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(self.directory)],
                check=True,
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError) as e:
            output = getattr(e, "stderr", "") or str(e)
            self.why_not = f"cannot mount a tmpfs: {output.strip()}"
            return False
        self.mounted = True
        self.blob_root.mkdir()
        return True

    def fill(self) -> int:
        """Take every free byte with the ballast; the bytes it took (0 if already full)."""
        assert self.mounted, "fill needs a mounted tmpfs"
        before = self._free()
        try:
            with (self.directory / BALLAST).open("ab", buffering=0) as f:
                if before > 0:  # the bulk at once (fast, unlike writing it), then the rest
                    with contextlib.suppress(OSError):
                        os.posix_fallocate(f.fileno(), os.fstat(f.fileno()).st_size, before)
                while (free := self._free()) > 0:
                    f.write(b"\0" * min(free, CHUNK))
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
        return max(0, before - self._free())

    def drain(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.directory / BALLAST).unlink()

    def unmount(self) -> None:
        if not self.mounted:
            return
        self.drain()
        subprocess.run(["umount", "-l", str(self.directory)], check=False, timeout=60)
        self.mounted = False

    def _free(self) -> int:
        stat = os.statvfs(self.directory)
        return stat.f_bavail * stat.f_frsize


__all__ = ["BlobDisk"]
