"""Maven packages for a Spark session: resolved by Spark once, loaded from their jars after.

``spark.jars.packages`` makes spark-submit resolve the coordinates with Ivy
at every start (about a second with everything cached), and, for a Python
application, list every resolved jar as a Python file as well as a jar. The
context then copies each into the session's files directory, and every
executor of a cluster fetches each twice (as a jar and as a file). For
hadoop-aws that is the AWS SDK's bundle, 640 MB: a session on S3 started
about 3 s later than one given the same jars as ``spark.jars`` (two runs
each, local mode).

So the first session that loads a set of packages resolves them as before,
and :func:`remember` writes what Ivy resolved to the cache
(:func:`timeshard.cache.cache_dir` ``/spark-packages``): each jar's path,
size, and whether it holds Python. Later sessions asking for the same
packages with the same PySpark and Ivy settings get :func:`package_conf`:
the jars as ``spark.jars``, and only those that hold Python (Delta's) as
``spark.submit.pyFiles`` too. The packages themselves go to
``spark.timeshard.packages``, so :func:`loaded_packages` tells what a
running session loaded either way. A record whose jars are gone, or changed
size, is not used: the packages are resolved again.

Ivy resolves through :func:`ivy_settings` unless the caller gives its own
``spark.jars.ivySettings``: Spark's default remote repositories (Maven
Central, Spark Packages), without its local ones (Ivy's ``local`` directory,
a ``publishLocal``'s, and the local Maven repository, ``~/.m2/repository``).
Maven leaves in the latter the pom alone of a version it mediated away
(slf4j-api 2.0.17, for many a Java build), and Spark's Ivy, which looks there
first, takes that pom for the module and fails on its missing jar
(``download failed: …slf4j-api.jar``); it records the module as that
resolver's in its cache, so every later resolution failed too. Spark adds
the repositories of ``spark.jars.repositories`` after these (a mirror is
``DEFAULT_ARTIFACT_REPOSITORY``, as for Spark; a connector of one's own in
``~/.m2`` is found with ``spark.jars.repositories=file://$HOME/.m2/repository``),
and its Ivy home stays the cache (``spark.jars.ivy``, else ``~/.ivy2.5.2``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from timeshard.cache import cache_dir

if TYPE_CHECKING:
    from pyspark import SparkContext

#: Where a session that loaded its packages from remembered jars lists those packages.
PACKAGES_CONF = "spark.timeshard.packages"
#: Settings that change what Ivy resolves, part of a record's key.
_RESOLUTION_CONF = (
    "spark.jars.ivy",
    "spark.jars.ivySettings",
    "spark.jars.repositories",
    "spark.jars.excludes",
)


#: Spark's default remote resolvers (module doc): Maven Central then Spark Packages, or
#: the repository ``DEFAULT_ARTIFACT_REPOSITORY`` names, as Spark reads it, for both; no
#: lookup of sources and javadoc jars, as Spark's own settings.
_IVY_SETTINGS = """<ivysettings>
  <property name="ivy.maven.lookup.sources" value="false"/>
  <property name="ivy.maven.lookup.javadoc" value="false"/>
  <settings defaultResolver="timeshard-default"/>
  <resolvers>
    <chain name="timeshard-default" returnFirst="true">
      <ibiblio name="central" m2compatible="true" root={central}/>
      <ibiblio name="spark-packages" m2compatible="true" root={packages}/>
    </chain>
  </resolvers>
</ivysettings>
"""


def ivy_settings() -> str | None:
    """The ``file:`` URI of the Ivy settings file timeshard resolves packages with (module
    doc), written into :func:`timeshard.cache.cache_dir` the first time, one per content;
    None if it cannot be written there (Spark's default chain then resolves, as it would
    without timeshard). Spark reads the setting as a URI: a path with a space is not one."""
    from xml.sax.saxutils import quoteattr

    mirror = os.environ.get("DEFAULT_ARTIFACT_REPOSITORY")
    text = _IVY_SETTINGS.format(
        central=quoteattr(mirror or "https://repo1.maven.org/maven2/"),
        packages=quoteattr(mirror or "https://repos.spark-packages.org/"),
    )
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = (cache_dir() / f"ivysettings-{digest}.xml").absolute()
    with contextlib.suppress(OSError):
        if path.read_text() == text:
            return path.as_uri()
    partial = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(partial, path)  # whole or not at all, whoever writes it at the same time
    except OSError:
        if partial is not None:
            with contextlib.suppress(OSError):
                os.unlink(partial)
        return None
    return path.as_uri()


def package_conf(packages: list[str], conf: dict[str, str]) -> dict[str, str]:
    """The settings that load ``packages`` into a session started with ``conf``: the jars of
    an earlier resolution if they are all still there, else ``spark.jars.packages``."""
    jars = _remembered(packages, conf)
    if jars is None:
        return {"spark.jars.packages": ",".join(packages)}
    out = {
        PACKAGES_CONF: ",".join(packages),
        "spark.jars": _joined(conf.get("spark.jars"), [j["path"] for j in jars]),
    }
    python = [j["path"] for j in jars if j["python"]]
    if python:
        out["spark.submit.pyFiles"] = _joined(conf.get("spark.submit.pyFiles"), python)
    return out


def remember(sc: SparkContext, packages: list[str], conf: dict[str, str]) -> None:
    """Write what spark-submit resolved for ``packages`` (``sc`` started with ``conf``, which
    named them in ``spark.jars.packages``). A cache that cannot be written is left alone."""
    started = sc.getConf()
    if started.get("spark.jars.packages", "") != ",".join(packages):
        return
    jars = {_local(p) for p in _split(started.get("spark.jars", ""))}
    # spark-submit adds the resolved jars to both lists (a Python application's).
    paths = [
        _local(p) for p in _split(started.get("spark.submit.pyFiles", "")) if _local(p) in jars
    ]
    if not paths or not all(os.path.isfile(p) for p in paths):
        return
    record = {
        "packages": packages,
        "jars": [{"path": p, "size": os.path.getsize(p), "python": holds_python(p)} for p in paths],
    }
    target = _record_path(packages, conf)
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(record, indent=1))
        os.replace(partial, target)


def holds_python(jar: str) -> bool:
    try:
        if not _names_mention_py(jar):
            return False
        with zipfile.ZipFile(jar) as archive:
            return any(n.endswith((".py", ".pyc")) for n in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return True  # unknown: PySpark's choice stands


#: The end of a zip's central directory: its signature, and the record's size without a comment.
_END_SIGNATURE = b"PK\x05\x06"
_END_SIZE = 22


def _names_mention_py(jar: str) -> bool:
    """Whether ``.py`` appears anywhere in the archive's central directory (its entries'
    names); True when that cannot be told (no end record found, or a zip64 archive).

    zipfile builds an object per entry, which took 3.5-6 s for the AWS SDK's bundle
    (hadoop-aws's, about 600 MB) at every start of a session on S3. A name that ends in
    ``.py`` or ``.pyc`` holds those bytes in the directory, so an archive whose directory
    lacks them holds no Python; one that has them is read in full by zipfile.
    """
    with open(jar, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        tail_at = max(0, size - (_END_SIZE + 0xFFFF))  # the record, and a comment at most
        f.seek(tail_at)
        tail = f.read()
        end = tail.rfind(_END_SIGNATURE)
        if end < 0 or end + _END_SIZE > len(tail):
            return True
        directory_size, directory_at = struct.unpack_from("<II", tail, end + 12)
        if directory_at == 0xFFFFFFFF or directory_at + directory_size > size:
            return True  # zip64, or not what it seems: zipfile decides
        f.seek(directory_at)
        return b".py" in f.read(directory_size)


def loaded_packages(sc: SparkContext) -> set[str]:
    """The Maven packages the running session ``sc`` loaded, resolved or remembered."""
    conf = sc.getConf()
    names = ("spark.jars.packages", PACKAGES_CONF)
    return {p for name in names for p in _split(conf.get(name, "") or "")}


def _remembered(packages: list[str], conf: dict[str, str]) -> list[dict[str, Any]] | None:
    try:
        record = json.loads(_record_path(packages, conf).read_text())
        jars = record["jars"]
        if record["packages"] != packages or not jars:
            return None
        for jar in jars:
            if os.path.getsize(jar["path"]) != jar["size"]:
                return None
            if not isinstance(jar["python"], bool):
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return list(jars)


def _record_path(packages: list[str], conf: dict[str, str]) -> Path:
    import pyspark

    key = {
        "packages": packages,
        "pyspark": pyspark.__version__,
        "resolution": {k: conf[k] for k in _RESOLUTION_CONF if k in conf},
        "home": str(Path.home()),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return cache_dir() / "spark-packages" / f"{digest}.json"


def _local(path_or_uri: str) -> str:
    """The path of a local file given as a path or a ``file:`` URI."""
    parsed = urlparse(path_or_uri)
    return unquote(parsed.path) if parsed.scheme == "file" else path_or_uri


def _split(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def _joined(existing: str | None, more: list[str]) -> str:
    items = _split(existing or "")
    return ",".join([*items, *(p for p in more if p not in items)])


__all__ = [
    "PACKAGES_CONF",
    "holds_python",
    "ivy_settings",
    "loaded_packages",
    "package_conf",
    "remember",
]
