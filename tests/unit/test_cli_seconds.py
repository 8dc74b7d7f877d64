"""``--seconds`` of ``run`` and ``subscribe`` is a finite, non-negative number of seconds.

A negative or NaN one was taken: ``run`` built the pipeline (starting Spark, writing the
location) and stopped at once, ``subscribe`` printed nothing, and neither said why.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import timeshard.spark
from timeshard.cli.main import app
from timeshard.errors import InvalidUsage

runner = CliRunner()


@pytest.mark.parametrize("bad", ["-1", "nan", "-inf"])
def test_a_bad_seconds_is_invalid_usage_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    def no_spark(**kw: object) -> None:
        raise AssertionError("Spark started")

    monkeypatch.setattr(timeshard.spark, "spark_session", no_spark)
    f = tmp_path / "run.toml"
    f.write_text(f'[location]\ndir = "{tmp_path / "loc"}"\n')
    for args in (["run", str(f)], ["subscribe", "x", "-l", str(tmp_path)]):
        out = runner.invoke(app, [*args, "--seconds", bad])
        assert isinstance(out.exception, InvalidUsage), (args, out.exception)
        assert "--seconds must be" in str(out.exception) and bad in str(out.exception)
    assert not (tmp_path / "loc").exists()
