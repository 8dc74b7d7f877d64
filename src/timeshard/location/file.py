"""A blob in a local (or locally mounted shared) directory.

Key ``a/b/c`` is the file ``root/a/b/c``. ``set`` writes the value to a
temporary file (``.tmp-<random>``) in the target directory, fsyncs it, gives it
the key's name with ``os.link`` (which, unlike a rename, fails if the name
exists, so of two racing writers of other bytes exactly one succeeds), removes
the temporary name and fsyncs the directory (and any directory it had to
create), so a reader sees the whole value or none, and a returned ``set``
survives a crash. On a filesystem without hard links it renames with
``os.replace`` after checking the key is free; there, two writers racing
between the check and the rename may both succeed. Spark tasks write parts
under the same root through pyarrow, and any Parquet reader can read them
there.

Invariants:

1. Key ``k`` names the path ``root/k``, unresolved. Only a key's spelling can be
   a caller mistake (InvalidUsage, see ``check_blob_key``; so is a component
   longer than the root's filesystem takes in a name); a symbolic link on
   its path is state found on disk. A link at the key itself to a file inside
   the root is the key: ``get`` serves the file, a listing lists it, ``delete``
   removes the link (never its target). Every other link ``get``, ``set`` and
   ``delete`` meet (one the path passes through, one out of the root, one that
   does not resolve, and for ``set`` one to no file) raises CorruptState naming
   the key, the link and its target, before any file is touched. ``get`` opens
   each component below the previous one without following a link, so a link
   made on the path while it reads is refused as one made before, never
   followed (``set`` and ``delete`` look first, then act by name).
2. A listing names only keys ``get`` and ``delete`` accept: temporary and hidden
   files (names starting with ``.``) and files in hidden directories are never
   listed (no valid key has such a component), nor is a file whose path no valid
   key spells (``a b``: put there by something else, no state can name it). The
   temporaries a write left behind (a process killed before it moved one into
   place: ``<directory>/.tmp-<hex>``) are listed by
   :meth:`FileBlob.list_temporaries` and deleted by :meth:`FileBlob.delete_temporary`
   only, which take nothing else.
3. ``set`` of a key holding other bytes raises InvalidUsage and changes
   nothing, also when the other bytes arrive while it writes; with the same
   bytes it does nothing (a retry). So does ``set`` of a key that is a
   directory of other keys (``a`` when ``a/b`` holds a value), or is below a key
   holding a value (``a/b`` when ``a`` does): a file cannot be both.
4. A listing follows a symbolic link only to a file inside the root (listed as
   the link's key); one that reaches a link out of the root (a file or a
   directory, also one the prefix passes through) raises CorruptState naming
   its key and target, as ``get`` refuses it: it neither lists data the blob
   does not hold nor silently hides it. A link to a directory inside the root
   is not descended (each file below it is listed once, under its own path),
   and a prefix through such a link raises CorruptState, as ``get`` of a key
   below it does: every listed key is served by ``get``, and every key ``get``
   serves is listed.
5. Failures of reads, of opening or writing the temporary file and any
   ``ENOSPC``/``EDQUOT`` (the disk is full) raise Determinate: the key is
   unchanged. A failure once the link (or rename) has started, of the
   directory fsync or of ``unlink`` (possibly on a network mount) raises
   Indeterminate.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from stat import S_ISDIR, S_ISLNK, S_ISREG

from timeshard.errors import CorruptState, Determinate, Indeterminate, InvalidUsage
from timeshard.location._paths import check_creatable, local_path
from timeshard.location.blob import (
    BlobMetadata,
    check_blob_key,
    check_blob_prefix,
    check_blob_value,
)

TMP_PREFIX = ".tmp-"
#: The name of a temporary file a write makes beside its key (here, in arrowfs and in
#: the Spark tasks' part writes).
TMP_NAME = re.compile(r"\.tmp-[0-9a-f]{1,64}")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP)
_LINK_ATTEMPTS = 10


class FileBlob:
    """A blob rooted at a directory, created if missing."""

    def __init__(self, root: str | Path) -> None:
        self.root = local_path(root, "blob root").resolve()
        check_creatable(self.root, "blob root", directory=True)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Determinate(f"cannot create blob root {str(self.root)!r}: {e}") from e
        self._name_max = _name_max(self.root)

    @property
    def root_uri(self) -> str | None:
        return self.root.as_uri()

    @property
    def uri(self) -> str:
        return self.root.as_uri()

    def path(self, key: str) -> Path:
        """The file of ``key``, ``root/key`` (a link there is followed only by reads);
        InvalidUsage if ``key`` is unsafe, CorruptState for a link on its path (invariant 1)."""
        return self._located(key, link_at_key=True)

    def _located(self, key: str, *, link_at_key: bool) -> Path:
        """``root/key`` (see :func:`_located`), once :meth:`_check_key` accepts ``key``."""
        self._check_key(key)
        return _located(self.root, key, link_at_key=link_at_key)

    def _check_key(self, key: str) -> None:
        """InvalidUsage naming ``key`` unless it is a blob key whose components are names
        the root's filesystem takes (a longer one no file can have)."""
        check_blob_key(key)
        longest = max(len(c.encode()) for c in key.split("/"))
        if longest > self._name_max:
            raise InvalidUsage(
                f"blob key {key!r} has a component of {longest} bytes: the filesystem of "
                f"blob root {str(self.root)!r} takes names of at most {self._name_max}"
            )

    def get(self, key: str) -> bytes | None:
        self._check_key(key)
        fd = _open_served(self.root, key)
        if fd is None:
            return None
        try:  # a regular file (_open_served serves no other)
            f = open(fd, "rb")  # noqa: SIM115 (a failed open leaves fd open: closed here)
        except OSError as e:
            os.close(fd)
            raise Determinate(f"reading blob {key!r}: {e}") from e
        try:
            with f:
                return f.read()
        except OSError as e:
            raise Determinate(f"reading blob {key!r}: {e}") from e

    def set(self, key: str, value: bytes) -> None:
        check_blob_key(key)
        value = check_blob_value(value)
        path = self.path(key)
        if self._holds(key, path, value):
            return
        tmp = path.with_name(f"{TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            created = _make_dirs(path.parent, self.root)
            with open(tmp, "xb") as f:
                f.write(value)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            _unlink_quietly(tmp)
            if isinstance(e, FileExistsError | NotADirectoryError):
                self._check_no_key_above(key)
            raise Determinate(f"writing blob {key!r}: {_describe(e, self.root)}") from e
        try:
            self._link(key, tmp, path, value)
        finally:
            _unlink_quietly(tmp)
        try:
            for directory in [path.parent, *(d.parent for d in created)]:
                _fsync_dir(directory)
        except OSError as e:
            raise Indeterminate(f"syncing the directory of blob {key!r}: {e}") from e

    def _link(self, key: str, tmp: Path, path: Path, value: bytes) -> None:
        """Give the written ``tmp`` the name ``path`` unless another writer got there first;
        then the key must hold ``value`` too, else InvalidUsage."""
        for _ in range(_LINK_ATTEMPTS):
            try:
                os.link(tmp, path)
                return
            except FileExistsError:
                if self._holds(key, path, value):
                    return
                continue  # deleted since: link again
            except OSError as e:
                if e.errno in _NO_HARD_LINKS:
                    return self._replace(key, tmp, path, value)
                if e.errno in _DISK_FULL:
                    raise Determinate(f"writing blob {key!r}: {_describe(e, self.root)}") from e
                raise Indeterminate(f"linking blob {key!r} into place: {e}") from e
        raise Determinate(
            f"writing blob {key!r}: it was deleted and written again {_LINK_ATTEMPTS} times "
            "while this write linked it"
        )

    def _replace(self, key: str, tmp: Path, path: Path, value: bytes) -> None:
        """``os.replace`` on a filesystem without hard links: a writer that races another
        between its check and its rename may overwrite the other's value."""
        if self._holds(key, path, value):
            return
        try:
            os.replace(tmp, path)
        except OSError as e:
            if e.errno in _DISK_FULL:
                raise Determinate(f"writing blob {key!r}: {_describe(e, self.root)}") from e
            raise Indeterminate(f"renaming blob {key!r} into place: {e}") from e

    def _check_no_key_above(self, key: str) -> None:
        """InvalidUsage if a key above ``key`` holds a value: its directory cannot exist."""
        parts = key.split("/")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            if (self.root / above).is_file():
                raise InvalidUsage(
                    f"blob key {key!r} is below the key {above!r}, which holds a value: "
                    "a file blob cannot hold both"
                )

    def _holds(self, key: str, path: Path, value: bytes) -> bool:
        """Whether ``key`` already holds ``value``; InvalidUsage if it holds other bytes."""
        existing = self.get(key)
        if existing is None:
            if path.is_symlink():
                raise CorruptState(
                    f"blob key {key!r} is a symbolic link to {str(self._link_target(key))!r}, "
                    "which holds no value: a write would go to another key"
                )
            if path.is_dir():
                raise InvalidUsage(f"blob key {key!r} is a directory of other keys")
            return False
        if existing == value:
            return True
        raise InvalidUsage(
            f"blob key {key!r} already holds {len(existing)} other bytes; keys are written once"
        )

    def delete(self, key: str) -> int | None:
        return _unlink(self.path(key), f"blob {key!r}")

    def list_keys(self, prefix: str = "") -> Iterator[BlobMetadata]:
        return self._walk(prefix, spells_a_key)

    def list_temporaries(self, prefix: str = "") -> Iterator[BlobMetadata]:
        return self._walk(prefix, spells_a_temporary)

    def _walk(self, prefix: str, wanted: Callable[[str], object]) -> Iterator[BlobMetadata]:
        """Every file whose key starts with ``prefix`` and is ``wanted``, outside hidden
        directories; CorruptState if the listing reaches a link out of the root."""
        check_blob_prefix(prefix)
        directory = prefix.rpartition("/")[0]
        found: list[BlobMetadata] = []
        try:
            if directory:  # the prefix may pass through a link
                self._located(directory, link_at_key=False)
            pending = [directory]
            while pending:
                found.extend(self._scan(pending.pop(), prefix, wanted, pending))
        except OSError as e:
            raise Determinate(f"listing blob root {str(self.root)!r}: {e}") from e
        return iter(found)

    def _scan(
        self, directory: str, prefix: str, wanted: Callable[[str], object], pending: list[str]
    ) -> Iterator[BlobMetadata]:
        """The wanted files of one directory (a key, ``""`` for the root) under ``prefix``;
        its subdirectories that may hold such files go to ``pending``. A link is followed
        only to a file inside the root, as its key; a link out of it raises CorruptState."""
        try:
            entries = list(os.scandir(self.root / directory if directory else self.root))
        except (FileNotFoundError, NotADirectoryError):
            return  # deleted while we listed: it holds no keys
        for entry in entries:
            key = f"{directory}/{entry.name}" if directory else entry.name
            below = (key + "/").startswith(prefix) or prefix.startswith(key + "/")
            hidden = entry.name.startswith(".")
            # A link a key may name (or, hidden, one of the wanted temporaries) is checked;
            # one no key spells is not a key, listed or not, as a file of that name.
            named = wanted(key) if hidden else spells_a_key(key)
            if entry.is_symlink() and below and named:
                self._link_target(key)
            if entry.is_dir(follow_symlinks=False):
                if below and not hidden:
                    pending.append(key)
            elif key.startswith(prefix) and wanted(key):
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue  # deleted (or moved into place) while we listed
                if not S_ISDIR(stat.st_mode):  # a link to a directory lists nothing
                    yield BlobMetadata(key, stat.st_size)

    def _link_target(self, link: str, key: str | None = None) -> Path:
        return _link_target(self.root, link, key)

    def delete_temporary(self, key: str) -> int | None:
        directory, _, name = check_temporary_key(key).rpartition("/")
        path = self._located(directory, link_at_key=False) / name
        return _unlink(path, f"temporary {key!r}")


def check_key_path(root: str | Path, key: str) -> Path:
    """The file of ``key`` under ``root``, for a writer that makes it itself (Spark's part
    writers): InvalidUsage if ``key`` is unsafe, CorruptState naming it if its path passes
    through a symbolic link or ``key`` is one, where :meth:`FileBlob.set` writes nothing
    (invariant 1). ``set`` refuses a link at the key that holds no value (dangling, to a
    directory) and writes nothing at one to a file inside the root (a key holding a value:
    the same bytes are a retry, other bytes InvalidUsage); such a writer, whose rename would
    replace the link, refuses every link at the key.

    Costs one ``lstat`` per component of ``key`` down to the first missing one (a part's
    key has four), nothing per component of ``root``: ``root`` is resolved (a ``realpath``
    and a ``stat``) only to describe a link found, as in or out of it."""
    return _located(Path(root), key, link_at_key=False)


def served_sizes(root: str | Path, keys: Iterable[str]) -> list[int | None]:
    """The size of the file :meth:`FileBlob.get` serves for each of ``keys`` under
    ``root``, None where it serves none; CorruptState naming the key where ``get`` refuses
    it (a link on its path: invariant 1), Determinate if a path cannot be looked at.

    For readers that open the files themselves (Spark's Parquet reader follows every
    link): they read what ``get`` would serve. Costs one ``lstat`` per key and one per
    distinct directory below the root on the keys' paths (a ``stat`` more per link at a
    key); nothing reads a file's bytes.
    """
    base = Path(root).resolve()
    prefix = f"{base}/"  # paths as strings: pathlib's would cost more than the lstat
    sound: set[str] = {""}  # directories below the root that are no links
    sizes: list[int | None] = []
    for key in keys:
        directory, _, name = key.rpartition("/")
        if directory not in sound or not spells_a_key(name):
            check_blob_key(key)  # InvalidUsage naming it (once per directory when valid)
        path = prefix + key
        try:
            if directory not in sound and _passes_a_link(prefix, directory, sound):
                _located(base, key, link_at_key=True)  # raises naming the key's link
            stat = os.lstat(path)
            if S_ISLNK(stat.st_mode):
                _link_target(base, key)
                stat = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            sizes.append(None)
            continue
        except OSError as e:
            if e.errno == errno.ELOOP:  # a loop the path check did not meet: found here
                _located(base, key, link_at_key=True)
            raise Determinate(f"looking at blob {key!r}: {e}") from e
        sizes.append(stat.st_size if S_ISREG(stat.st_mode) else None)
    return sizes


def open_served(root: str | Path, key: str) -> int | None:
    """A descriptor (to close) of the file :meth:`FileBlob.get` serves for ``key`` under
    the blob root ``root``, opened as ``get`` opens it (:func:`_open_served`); InvalidUsage
    naming ``key`` if it is unsafe.

    For readers that judge a file as ``get`` does and then read it themselves (the driver's
    re-read of a part Spark failed to read): the file read is the one judged, whatever
    links are made on its path meanwhile."""
    check_blob_key(key)
    return _open_served(Path(root).resolve(), key)  # resolved, as FileBlob.root is


def _open_served(root: Path, key: str) -> int | None:
    """A descriptor (to close) of the file :meth:`FileBlob.get` serves for ``key``, opened
    through no symbolic link but one at ``key`` itself to a file inside ``root``; None where
    ``get`` serves none. CorruptState naming the key for any other link (invariant 1),
    Determinate if a path cannot be opened.

    Each component is opened below the previous one's descriptor without following a link
    (:func:`_open_below`): a link made on the path after any check is refused as one made
    before it, never followed out of the root. Costs an ``open`` per component of ``key``
    and of the root directory, a ``close`` per directory opened, an ``fstat`` of the
    file (a FIFO, a device or a directory at the key is no file) and ``fcntl`` calls to
    read it blocking; a link at the key (or
    one met on the path) costs its resolution too.
    """
    try:
        return _open_below(root, key.split("/"))
    except (FileNotFoundError, IsADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ENOTDIR:  # a file on the path (no value), or a link (refused)
            _located(root, key, link_at_key=True)
            return None
        if e.errno != errno.ELOOP:
            raise Determinate(f"reading blob {key!r}: {e}") from e
    inside = _link_target(root, key).relative_to(root)  # the key is a link: where to?
    if not inside.parts:
        return None  # the root: a directory
    try:
        return _open_below(root, list(inside.parts))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None  # a link to no file
    except OSError as e:
        if e.errno == errno.ELOOP:  # the target became a link since it was resolved
            _link_target(root, key)
            raise CorruptState(
                f"blob key {key!r} is a symbolic link to {str(root / inside)!r}, which is "
                "itself a link: a link is not a file of this blob"
            ) from e
        raise Determinate(f"reading blob {key!r}: {e}") from e


#: A directory is opened to look names up below it, not to list it: ``O_PATH`` (Linux)
#: needs search permission only, as a lookup by path does (``O_RDONLY`` needs read too).
_DIRECTORY = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
_OPEN_DIRECTORY = _DIRECTORY | os.O_NOFOLLOW
#: ``O_NONBLOCK``: opening a FIFO put at a key would wait for a writer (no effect on a file).
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _open_below(root: Path, names: list[str]) -> int:
    """A descriptor of ``root/names[0]/.../names[-1]``, each name opened below the previous
    one's descriptor without following a symbolic link, a regular file: ``open``'s OSError
    otherwise (ELOOP for a link as the last name, ENOTDIR for one or a file before it), and
    IsADirectoryError for a directory, a FIFO or a device at the last name (no file)."""
    directory = os.open(root, _DIRECTORY)
    try:
        for name in names[:-1]:
            above, directory = directory, os.open(name, _OPEN_DIRECTORY, dir_fd=directory)
            os.close(above)
        fd = os.open(names[-1], _OPEN_FILE, dir_fd=directory)
    finally:
        os.close(directory)
    try:
        regular = S_ISREG(os.fstat(fd).st_mode)
        if regular:  # read as any file is (a FUSE mount may honour the flag on a file)
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, "not a regular file", names[-1])
    return fd


def _passes_a_link(prefix: str, directory: str, sound: set[str]) -> bool:
    """Whether a component of ``directory`` (a key, below the root ``prefix``) is a symbolic
    link; adds to ``sound`` each of its directories found to be none."""
    components = directory.split("/")
    for i in range(1, len(components) + 1):
        above = "/".join(components[:i])
        if above not in sound:
            if S_ISLNK(os.lstat(prefix + above).st_mode):
                return True
            sound.add(above)
    return False


def _located(root: Path, key: str, *, link_at_key: bool) -> Path:
    """``root/key`` once no link on its path below ``root`` is refused (one at ``key`` itself
    is allowed to a file or directory inside the root if ``link_at_key``).

    One ``lstat`` per component of ``key`` down to the first missing one (and a
    ``realpath`` of each link found), never one of ``root``'s own components. The path
    is not resolved first: Python 3.13's ``resolve()`` returns a path through a loop of
    links unchanged, which would read as "no link".
    """
    check_blob_key(key)
    parts = key.split("/")
    prefix = f"{root}/"  # paths as strings: pathlib's would cost more than the lstat
    for i in range(1, len(parts) + 1):
        link = "/".join(parts[:i])
        try:
            is_link = S_ISLNK(os.lstat(prefix + link).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            break  # nothing is below it: no link either
        except OSError as e:
            raise Determinate(f"looking at the path of blob key {key!r}: {e}") from e
        if is_link:
            target = _link_target(root, link, key)
            if i < len(parts):
                raise CorruptState(
                    f"blob key {key!r} passes through the symbolic link {link!r} to "
                    f"{str(target)!r}: a link is not a directory of this blob's keys"
                )
            if not link_at_key:
                raise CorruptState(
                    f"blob key {key!r} is a symbolic link to {str(target)!r}: a link is "
                    "not a directory of this blob's keys, nor a file a writer may replace"
                )
    return root / key


def _link_target(root: Path, link: str, key: str | None = None) -> Path:
    """Where the link at ``link`` resolves; CorruptState (naming ``key``, the key whose
    path passes through it, if another) unless inside the root."""
    named = (
        f"blob key {link!r} is"
        if key in (None, link)
        else (f"blob key {key!r} passes through {link!r}, which is")
    )
    try:
        target = (root / link).resolve()
        os.stat(target)  # a loop: Python 3.13's resolve() returns a path where 3.11 raised
    except RuntimeError as e:  # a loop of links (Python before 3.13)
        raise CorruptState(f"{named} a symbolic link that does not resolve: {e}") from e
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CorruptState(f"{named} a symbolic link that does not resolve: {e}") from e
    if target.is_relative_to(root):  # inside ``root`` as spelled, so inside it
        return target
    root = root.resolve()  # the root may be spelled through a link (check_key_path's)
    if not target.is_relative_to(root):
        raise CorruptState(
            f"{named} a symbolic link to {str(target)!r}, outside the blob root "
            f"{str(root)!r}: it holds no data of this blob"
        )
    return target


def spells_a_key(key: str) -> bool:
    """Whether ``key`` is a valid blob key (a file a listing may name as a key)."""
    try:
        check_blob_key(key)
    except InvalidUsage:
        return False
    return True


def spells_a_temporary(key: str) -> bool:
    """Whether ``key`` names a temporary (a file a listing of temporaries may name)."""
    try:
        check_temporary_key(key)
    except InvalidUsage:
        return False
    return True


def check_temporary_key(key: object) -> str:
    """Return ``key`` if it names a temporary (``<blob key>/.tmp-<hex>``), else InvalidUsage."""
    if not isinstance(key, str):
        raise InvalidUsage(f"invalid temporary key {key!r}: must be a string")
    directory, _, name = key.rpartition("/")
    if not directory or not TMP_NAME.fullmatch(name):
        raise InvalidUsage(f"invalid temporary key {key!r}: not <directory>/.tmp-<hex>")
    try:
        check_blob_key(directory)
    except InvalidUsage as e:
        raise InvalidUsage(f"invalid temporary key {key!r}: {e}") from None
    return key


def _name_max(root: Path) -> int:
    """The longest file name (bytes) the filesystem of ``root`` takes (255 if it does not
    say, as Linux's filesystems, ext4 and XFS take)."""
    try:
        return os.pathconf(root, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _make_dirs(directory: Path, root: Path) -> list[Path]:
    """Create ``directory`` and its missing parents below ``root``; return those created."""
    missing: list[Path] = []
    d = directory
    while d != root and not d.is_dir():
        missing.append(d)
        d = d.parent
    created = []
    for d in reversed(missing):
        try:
            d.mkdir()
            created.append(d)
        except FileExistsError:
            if not d.is_dir():
                raise
    return created


def _describe(e: OSError, root: Path) -> str:
    if e.errno in _DISK_FULL:
        return f"no space left on the device of {str(root)!r} ({e.strerror})"
    return str(e)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: Path, what: str) -> int | None:
    """Delete the file ``path``; its size, or None if there was none (a directory is none).
    Determinate if it could not be looked at, Indeterminate if the unlink itself failed."""
    try:
        if path.is_dir():
            return None
        size = path.stat().st_size
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise Determinate(f"deleting {what}: {e}") from e
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Indeterminate(f"deleting {what}: {e}") from e
    return size


__all__ = [
    "TMP_NAME",
    "FileBlob",
    "check_key_path",
    "check_temporary_key",
    "open_served",
    "served_sizes",
    "spells_a_key",
    "spells_a_temporary",
]
