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


def test_a_run_that_fails_raises_its_own_failure_not_the_close_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run closes its pipeline on the way out; a close that failed too replaced the run's
    own failure, the one to see (and Spark stopped all the same)."""
    import timeshard.controller

    stopped = []

    class Spark:
        def stop(self) -> None:
            stopped.append(True)

    class Failing:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.undeclared: list[object] = []
            self.first_failures: dict[str, str] = {}

        def step(self) -> dict[str, str]:
            raise RuntimeError("the run's own failure")

        def close(self) -> None:
            raise RuntimeError("a close that failed too")

    monkeypatch.setattr(timeshard.spark, "spark_session", lambda **kw: Spark())
    monkeypatch.setattr(timeshard.controller, "Pipeline", Failing)
    f = tmp_path / "run.toml"
    f.write_text(f'[location]\ndir = "{tmp_path / "loc"}"\n')
    out = runner.invoke(app, ["run", str(f), "--seconds", "5"])
    assert "the run's own failure" in str(out.exception), out.exception
    assert stopped == [True]
