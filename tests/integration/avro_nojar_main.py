"""A session without spark-avro: reading Avro raises InvalidUsage naming the package.

Usage: avro_nojar_main.py SCRATCH_DIR

The integration tier's shared session loads spark-avro (the KAFKA source's
Avro tests need it), and a process holds one SparkContext, so
``test_avro.py`` checks a session without the jar in this child process. It
downloads nothing. Prints ``no-jar checks passed`` on success.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.integration.avro_main import AVRO

from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.spark.session import spark_avro_package
from timeshard.storage.file_source import FileSource
from timeshard.storage.ingest import Ingestion


def main() -> None:
    scratch = Path(sys.argv[1])
    spark = spark_session(master="local[1]", app_name="timeshard-avro-nojar")
    assert spark_avro_package() not in (spark.conf.get("spark.jars.packages", "") or "")
    (scratch / "in").mkdir(parents=True)
    (scratch / "in" / "a.b64").write_bytes(b"AgJ4\n")
    source = FileSource("nojar", scratch / "in", "avro", avro_schema=AVRO)
    try:
        source.read(spark, {}, source.upper())
    except InvalidUsage as e:
        assert re.search(re.escape(f"package '{spark_avro_package()}'"), str(e)), e
    else:
        raise AssertionError("read on a session without spark-avro did not raise")
    client = PersistClient(Location.embedded(scratch / "loc"))
    ing = Ingestion(spark, client, source, clock=lambda: 7)
    try:
        ing.step()
    except InvalidUsage as e:
        assert "spark-avro" in str(e), e
    else:
        raise AssertionError("a step on a session without spark-avro did not raise")
    assert client.state("nojar").upper.time == 0  # nothing written
    spark.stop()
    print("no-jar checks passed")


if __name__ == "__main__":
    main()
