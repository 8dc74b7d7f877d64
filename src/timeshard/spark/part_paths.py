"""Where a part is: its pyarrow filesystem and path, and the path Spark's readers take.

A part's key names a file under its blob's root URI (:mod:`timeshard.spark.parts`).
:func:`filesystem_of` gives the pyarrow filesystem and base path of a root, which
the write tasks write parts through (executors) and the driver checks and re-reads
them through; :func:`spark_path` gives the path of one part for Spark's Parquet
reader (driver, as it plans a read).
"""

from __future__ import annotations

import re
import urllib.parse

import pyarrow.fs as pafs

#: The characters of Hadoop's glob patterns, which Spark expands in the paths it reads.
_GLOB_CHARACTER = re.compile(r"[{}\[\]*?\\]")


def spark_path(root_uri: str, key: str) -> str:
    """The path Spark's readers take for ``key`` under the blob root ``root_uri``.

    Hadoop's ``Path`` does not decode percent-escapes, so a ``file:`` root (a
    URI, escaped: ``file:///data/a%20b``) is given by its decoded path
    (``file:///data/a b``); other roots are taken as they are. Spark takes a
    path holding a glob character (``{}[]*?\\``) as a pattern, so each is
    escaped with a backslash: the path names that one file.
    """
    parsed = urllib.parse.urlsplit(root_uri)
    if parsed.scheme == "file":
        root_uri = "file://" + urllib.parse.unquote(parsed.path)
    return _GLOB_CHARACTER.sub(r"\\\g<0>", f"{root_uri.rstrip('/')}/{key}")


def filesystem_of(root_uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and base path of a blob root URI (``s3a`` read as ``s3``)."""
    uri = "s3://" + root_uri.removeprefix("s3a://") if root_uri.startswith("s3a://") else root_uri
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")


__all__ = ["filesystem_of", "spark_path"]
