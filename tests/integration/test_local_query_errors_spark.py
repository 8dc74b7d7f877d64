"""``timeshard query`` on the local path answers an input's err rows as serve does: with
the error, never with the ok rows alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from tests.integration.spark_checks import SCHEMA, updates_df

from timeshard.cli.main import main
from timeshard.location import Location
from timeshard.persist import PersistClient

pytestmark = pytest.mark.spark


def test_a_local_query_over_err_rows_fails_naming_the_error(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It filtered ``_err IS NULL`` and printed the ok rows' count as if nothing were wrong."""
    client = PersistClient(Location.embedded(tmp_path))
    writer = client.open_writer("s", SCHEMA)
    rows = [((1, "a", 1.0, None), 0, 1), ((None, None, None, "cannot decode record 3"), 1, 1)]
    writer.append(updates_df(spark, rows, 1), 0, 2)
    writer.append(
        updates_df(spark, [((None, None, None, "cannot decode record 3"), 2, -1)], 1), 2, 3
    )

    def query(as_of: int) -> tuple[int, str]:
        sql = "SELECT count(*) AS n FROM s"
        args = ["timeshard", "query", sql, "--as-of", str(as_of), "--json", "-l", str(tmp_path)]
        monkeypatch.setattr(sys, "argv", args)
        try:
            main()
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
        out = capsys.readouterr()
        return code, out.out + out.err

    code, output = query(0)
    assert code == 0 and json.loads(output)["rows"] == [{"n": 1}], output
    code, output = query(1)
    assert code != 0, output
    assert "'s' holds an error at 1: cannot decode record 3" in output, output
    code, output = query(2)  # retracted: gone
    assert code == 0 and json.loads(output)["rows"] == [{"n": 1}], output
    writer.expire()
