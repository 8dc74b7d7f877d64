"""FILE format ``avro``: base64 Avro datums decoded by spark-avro, loaded only when used.

The ingestion checks run in a child process (``avro_main.py``) with its own
SparkSession carrying the spark-avro package, and the checks of a session
without the jar in another (``avro_nojar_main.py``): a process holds one
SparkContext, and the tier's shared one has the jar (the KAFKA source's Avro
tests need it). If the first child cannot get the jar (no network to Maven
Central), that test is skipped with the reason printed -- except when ``CI``
is set: then it fails. The other tests here run in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from tests.integration.avro_main import AVRO, NO_JAR

from timeshard.errors import InvalidUsage
from timeshard.spark.session import SPARK_AVRO_PACKAGE_ENV, spark_avro_package
from timeshard.spec import build_source, load_spec, spark_packages
from timeshard.storage.file_source import FileSource, avro_payload_schema

MAIN = Path(__file__).with_name("avro_main.py")


def _run_child(scratch: Path, package: str | None) -> subprocess.CompletedProcess[str]:
    scratch.mkdir()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    if package is not None:
        env[SPARK_AVRO_PACKAGE_ENV] = package
    return subprocess.run(
        [sys.executable, str(MAIN), str(scratch)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


@pytest.mark.spark
def test_avro_ingestion_with_spark_avro(tmp_path: Path) -> None:
    package = spark_avro_package()
    result = _run_child(tmp_path / "exact", None)
    if result.returncode == NO_JAR:
        ivy = [x.strip() for x in result.stderr.splitlines() if "not found" in x]
        detail = "\n".join(ivy[-8:]) or result.stderr[-2000:]
        reason = f"{result.stdout.strip()[-1000:]}\n{detail}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}\n(CI must run the spark-avro test)")
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert "avro checks passed: 14 lines, the shard checked at" in result.stdout, result.stdout
    assert result.stdout.rstrip().endswith(f"with {package}"), result.stdout


@pytest.mark.spark
def test_avro_on_a_session_without_the_jar(tmp_path: Path) -> None:
    """Names the package to start the session with; checks the JVM, downloads nothing.

    In a child process (``avro_nojar_main.py``): the tier's session has the jar.
    """
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [sys.executable, str(MAIN.with_name("avro_nojar_main.py")), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert "no-jar checks passed" in result.stdout, result.stdout


def test_avro_schema_gives_the_columns() -> None:
    assert avro_payload_schema(AVRO) == pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("score", pa.float64()),
            ("n", pa.int32()),
            ("f", pa.float32()),
            ("ok", pa.bool_()),
            ("raw", pa.binary()),
        ]
    )


def _record(field_type: object, name: str = "x") -> str:
    fields = [{"name": name, "type": field_type}]
    return json.dumps({"type": "record", "name": "R", "fields": fields})


@pytest.mark.parametrize(
    ("avro_schema", "match"),
    [
        (_record({"type": "array", "items": ["long", "string"]}), "field 'x' has type"),
        (_record(["long", "string"]), "field 'x' has type"),
        (_record({"type": "map", "values": ["int", "string"]}), "field 'x' has type"),
        (_record("null"), "field 'x' has type"),
        (_record("long", name="_diff"), "'_diff' is reserved"),
        (_record("long", name="a-b"), "not a field with an Avro name"),
        (json.dumps({"type": "record", "name": "R", "fields": []}), "non-empty fields"),
        ('"long"', "must be an Avro record schema"),
        ("{not json", "not JSON text"),
    ],
)
def test_unsupported_avro_schemas(tmp_path: Path, avro_schema: str, match: str) -> None:
    with pytest.raises(InvalidUsage, match=match):
        FileSource("bad", tmp_path, "avro", avro_schema=avro_schema)


def test_avro_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidUsage, match="avro_schema goes with format 'avro'"):
        FileSource("x", tmp_path, "avro")
    with pytest.raises(InvalidUsage, match="avro_schema goes with format 'avro'"):
        FileSource("x", tmp_path, "text", avro_schema=AVRO)
    with pytest.raises(InvalidUsage, match="takes its columns from avro_schema"):
        FileSource("x", tmp_path, "avro", pa.schema([("id", pa.int64())]), AVRO)


def test_run_spec_with_an_avro_source(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    plain = '[[source]]\nname = "kv"\nkind = "key_value"\n'
    f.write_text(plain)
    assert spark_packages(load_spec(f)) == []  # the default session downloads nothing
    f.write_text(
        plain + '[[source]]\nname = "readings"\nkind = "file"\n'
        f"options = {{ path = \"in\", format = \"avro\", avro_schema = '''\n{AVRO}''' }}\n"
    )
    spec = load_spec(f)
    assert spark_packages(spec) == [spark_avro_package()]
    assert spark_avro_package().startswith("org.apache.spark:spark-avro_2.13:4.")
    source = build_source(spec.source[1])
    assert isinstance(source, FileSource) and source.format == "avro"
    assert source.schema == avro_payload_schema(AVRO)
