"""Maven packages' jars remembered from one resolution and loaded as ``spark.jars`` after."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from timeshard.spark.jars import PACKAGES_CONF, loaded_packages, package_conf, remember

PACKAGES = ["org.example:connector_2.13:1.0", "io.example:with-python:2.0"]


@pytest.fixture
def jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Two resolved jars (one holding Python) in an Ivy-like directory; the cache in tmp."""
    monkeypatch.setenv("TIMESHARD_CACHE", str(tmp_path / "cache"))
    ivy = tmp_path / "ivy" / "jars"
    ivy.mkdir(parents=True)
    out = {}
    for name, members in {
        "connector.jar": ["org/example/Source.class"],
        "with-python.jar": ["org/example/P.class", "example/__init__.py"],
    }.items():
        with zipfile.ZipFile(ivy / name, "w") as archive:
            for member in members:
                archive.writestr(member, b"x")
        out[name] = ivy / name
    return out


def started(jars: dict[str, Path], packages: list[str] = PACKAGES) -> Any:
    """A stand-in context as spark-submit leaves it after resolving ``packages``."""
    paths = [str(p) for p in jars.values()]
    conf = {
        "spark.jars.packages": ",".join(packages),
        "spark.jars": ",".join(f"file://{p}" for p in paths),
        "spark.submit.pyFiles": ",".join(paths),
    }
    return SimpleNamespace(getConf=lambda: conf)


def test_packages_resolve_until_a_session_remembers_their_jars(jars: dict[str, Path]) -> None:
    conf = {"spark.jars": "/opt/mine.jar"}
    assert package_conf(PACKAGES, conf) == {"spark.jars.packages": ",".join(PACKAGES)}
    remember(started(jars), PACKAGES, conf)
    loaded = package_conf(PACKAGES, conf)
    assert "spark.jars.packages" not in loaded
    assert loaded[PACKAGES_CONF] == ",".join(PACKAGES)
    # every jar on the class path, after the caller's own; only the one with Python as a
    # Python file (so not copied into the session's files, nor fetched twice by executors)
    assert loaded["spark.jars"].split(",") == [
        "/opt/mine.jar",
        str(jars["connector.jar"]),
        str(jars["with-python.jar"]),
    ]
    assert loaded["spark.submit.pyFiles"] == str(jars["with-python.jar"])
    # other packages, or other Ivy settings, are another record
    assert "spark.jars.packages" in package_conf(PACKAGES[:1], conf)
    assert "spark.jars.packages" in package_conf(PACKAGES, {"spark.jars.repositories": "x"})


def test_a_record_whose_jars_changed_or_went_is_resolved_again(
    jars: dict[str, Path],
) -> None:
    remember(started(jars), PACKAGES, {})
    assert "spark.jars" in package_conf(PACKAGES, {})
    jars["connector.jar"].write_bytes(jars["connector.jar"].read_bytes() + b"more")
    assert package_conf(PACKAGES, {}) == {"spark.jars.packages": ",".join(PACKAGES)}
    remember(started(jars), PACKAGES, {})
    assert "spark.jars" in package_conf(PACKAGES, {})
    jars["with-python.jar"].unlink()
    assert package_conf(PACKAGES, {}) == {"spark.jars.packages": ",".join(PACKAGES)}


def test_nothing_is_remembered_of_a_session_that_did_not_resolve_them(
    jars: dict[str, Path], tmp_path: Path
) -> None:
    other = started(jars, ["org.example:else:1"])
    remember(other, PACKAGES, {})  # its context resolved other packages
    assert not (tmp_path / "cache").exists()
    broken = started(jars)
    broken.getConf()["spark.submit.pyFiles"] = ""  # no jar listed as resolved
    remember(broken, PACKAGES, {})
    assert not (tmp_path / "cache").exists()


def test_a_corrupt_record_is_not_used(jars: dict[str, Path], tmp_path: Path) -> None:
    remember(started(jars), PACKAGES, {})
    (record,) = (tmp_path / "cache" / "spark-packages").iterdir()
    body = json.loads(record.read_text())
    body["jars"][0]["python"] = "yes"
    record.write_text(json.dumps(body))
    assert package_conf(PACKAGES, {}) == {"spark.jars.packages": ",".join(PACKAGES)}
    record.write_text("{not json")
    assert package_conf(PACKAGES, {}) == {"spark.jars.packages": ",".join(PACKAGES)}


def test_loaded_packages_reads_both_ways_a_session_loads_them() -> None:
    def context(conf: dict[str, str]) -> Any:
        return SimpleNamespace(getConf=lambda: conf)

    assert loaded_packages(context({"spark.jars.packages": "a:b:1, c:d:2"})) == {"a:b:1", "c:d:2"}
    assert loaded_packages(context({PACKAGES_CONF: "a:b:1"})) == {"a:b:1"}
    assert loaded_packages(context({})) == set()


class _NotStarted(Exception):
    pass


def session_conf(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> dict[str, str]:
    """The settings ``spark_session(**kwargs)`` gives Spark's builder (no JVM starts)."""
    import timeshard.spark.session as session

    given: dict[str, str] = {}

    class Builder:
        def master(self, master: str) -> Builder:
            return self

        def appName(self, name: str) -> Builder:
            return self

        def config(self, key: str, value: str) -> Builder:
            given[key] = value
            return self

        def getOrCreate(self) -> None:
            raise _NotStarted

    builder = Builder()
    monkeypatch.setattr(
        session, "SparkSession", SimpleNamespace(builder=builder, getActiveSession=lambda: None)
    )
    monkeypatch.setattr(session, "start_jvm", lambda conf: None)
    with pytest.raises(_NotStarted):
        session.spark_session(**kwargs)
    return given


def test_spark_jars_packages_in_the_conf_replaces_the_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run file's ``[spark] conf`` naming a mirror's connector loads it alone: Maven
    Central's beside it would fail without network, or load the classes twice."""
    from timeshard.spark.session import spark_kafka_package

    monkeypatch.setenv("TIMESHARD_CACHE", str(tmp_path / "cache"))  # nothing remembered
    mirror = "com.mirror:spark-sql-kafka_2.13:4.1.1"
    kafka = [spark_kafka_package()]
    conf = session_conf(monkeypatch, packages=kafka)
    assert conf["spark.jars.packages"] == kafka[0]
    conf = session_conf(
        monkeypatch, packages=kafka, extra_conf={"spark.jars.packages": f" {mirror} ,"}
    )
    assert conf["spark.jars.packages"] == mirror
    conf = session_conf(monkeypatch, extra_conf={"spark.jars.packages": mirror})
    assert conf["spark.jars.packages"] == mirror


def test_the_ivy_settings_name_no_local_repository_and_an_unwritable_cache_gives_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Packages resolve from Maven Central and Spark Packages alone (a pom Maven left in
    ~/.m2 without its jar failed every session); a cache that cannot be written leaves
    Spark's own chain, as it was."""
    import xml.etree.ElementTree as ET
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    from timeshard.spark.jars import ivy_settings

    monkeypatch.delenv("DEFAULT_ARTIFACT_REPOSITORY", raising=False)
    monkeypatch.setenv("TIMESHARD_CACHE", str(tmp_path / "my cache"))
    uri = ivy_settings()
    assert uri is not None and uri.startswith("file:///") and " " not in uri  # a URI
    path = Path(url2pathname(urlparse(uri).path))
    assert path.parent == tmp_path / "my cache"
    [chain] = ET.parse(path).getroot().iter("chain")
    roots = [r.get("root") for r in chain]
    assert roots == ["https://repo1.maven.org/maven2/", "https://repos.spark-packages.org/"]
    assert ivy_settings() == uri  # written once, read after
    # A mirror, as Spark's own chain takes it (for both), escaped into the XML.
    monkeypatch.setenv("DEFAULT_ARTIFACT_REPOSITORY", "https://mirror.example/m2?a=1&b=2")
    mirrored = ivy_settings()
    assert mirrored is not None and mirrored != uri
    [chain] = ET.parse(url2pathname(urlparse(mirrored).path)).getroot().iter("chain")
    assert [r.get("root") for r in chain] == ["https://mirror.example/m2?a=1&b=2"] * 2
    (tmp_path / "ro").write_text("a file, not a directory")
    monkeypatch.setenv("TIMESHARD_CACHE", str(tmp_path / "ro"))
    assert ivy_settings() is None
