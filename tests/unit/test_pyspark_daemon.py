"""The Python worker daemon drops Spark's archives from the path only where that is safe."""

from __future__ import annotations

import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from timeshard.pyspark_daemon import path_without_archives


def archives(root: Path) -> tuple[str, str, str]:
    lib = root / "spark_home" / "python" / "lib"
    lib.mkdir(parents=True)
    zips = (lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip")
    jar = root / "spark_home" / "jars" / "spark-core_2.13-4.1.1.jar"
    jar.parent.mkdir()
    for f in (*zips, jar):
        f.write_bytes(b"PK")
    return str(zips[0]), str(zips[1]), str(jar)


def installed(root: Path, *packages: str) -> str:
    site = root / "site-packages"
    for name in packages:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
    site.mkdir(exist_ok=True)
    return str(site)


def test_installed_packages_drop_spark_s_zips_and_jar(tmp_path: Path) -> None:
    pyspark_zip, py4j_zip, jar = archives(tmp_path)
    site = installed(tmp_path, "pyspark", "py4j")
    user = str(tmp_path / "deps.zip")  # a user's archive stays, wherever it is
    Path(user).write_bytes(b"PK")
    path = ["/work", pyspark_zip, py4j_zip, jar, user, "/usr/lib/python311.zip", site]
    assert path_without_archives(path) == ["/work", user, "/usr/lib/python311.zip", site]


def test_without_an_installed_pyspark_the_zips_stay_and_the_jar_goes(tmp_path: Path) -> None:
    pyspark_zip, py4j_zip, jar = archives(tmp_path)
    site = installed(tmp_path, "py4j")  # PySpark only in the zip: a distribution's SPARK_HOME
    path = [pyspark_zip, py4j_zip, jar, site]
    assert path_without_archives(path) == [pyspark_zip, py4j_zip, site]


def test_a_path_without_archives_is_unchanged(tmp_path: Path) -> None:
    site = installed(tmp_path, "pyspark", "py4j")
    assert path_without_archives(["", site]) == ["", site]


def test_only_jars_without_python_leave_the_python_includes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark import SparkFiles

    from timeshard.spark.session import drop_jars_without_python

    for name, members in {
        "kafka-clients.jar": ["org/apache/kafka/A.class"],
        "graphframes.jar": ["org/G.class", "graphframes/__init__.py"],
        "deps.zip": ["lib/x.class"],
    }.items():
        with zipfile.ZipFile(tmp_path / name, "w") as archive:
            for member in members:
                archive.writestr(member, b"")
    (tmp_path / "broken.jar").write_bytes(b"not a zip")
    monkeypatch.setattr(SparkFiles, "getRootDirectory", classmethod(lambda cls: str(tmp_path)))
    includes = ["kafka-clients.jar", "graphframes.jar", "deps.zip", "broken.jar"]
    context = SimpleNamespace(_python_includes=list(includes))
    assert drop_jars_without_python(context) == ["kafka-clients.jar"]  # type: ignore[arg-type]
    assert context._python_includes == ["graphframes.jar", "deps.zip", "broken.jar"]


def test_whether_a_jarholds_python_is_told_from_its_directory(tmp_path: Path) -> None:
    """The central directory's bytes decide a jar without ``.py`` in it (no zipfile read); one
    that mentions ``.py`` anywhere is read in full, and its entries' names decide."""
    from timeshard.spark.jars import _names_mention_py, holds_python

    cases = {
        "plain.jar": (["org/A.class", "META-INF/MANIFEST.MF"], b"", False, False),
        "commented.jar": (["org/A.class"], b"a comment .py", False, False),
        "module.jar": (["pkg/__init__.py", "org/A.class"], b"", True, True),
        "compiled.jar": (["pkg/m.pyc"], b"", True, True),
        "lookalike.jar": (["org/a.pyramid/B.class", "docs/x.pyi"], b"", True, False),
    }
    for name, (members, comment, mentions, holds) in cases.items():
        with zipfile.ZipFile(tmp_path / name, "w") as archive:
            for member in members:
                archive.writestr(member, b"x" * 100)
            archive.comment = comment
        assert _names_mention_py(str(tmp_path / name)) is mentions, name
        assert holds_python(str(tmp_path / name)) is holds, name
    # No end record: not known, so PySpark's choice (keep it) stands.
    (tmp_path / "cut.jar").write_bytes((tmp_path / "plain.jar").read_bytes()[:-30])
    assert _names_mention_py(str(tmp_path / "cut.jar")) is True
    assert holds_python(str(tmp_path / "cut.jar")) is True
