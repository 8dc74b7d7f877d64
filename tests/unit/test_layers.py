"""The package's layering, checked with import-linter (the contracts of ``[tool.importlinter]``
in pyproject.toml): only the ``timeshard`` entry point imports the CLI, so the server,
the controller, the nemesis and the libraries share the run-spec model
(:mod:`timeshard.spec`) and the status rows (:mod:`timeshard.status`) without it."""

from __future__ import annotations

import logging
import os
import pkgutil
import tomllib
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

import timeshard

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_are_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT / "src"))
    # import-linter configures logging with dictConfig, which disables every logger that
    # exists by then (disable_existing_loggers): later tests of this worker that read
    # timeshard's log records (caplog) found none. Their state is restored after it.
    loggers = [x for x in logging.root.manager.loggerDict.values() if isinstance(x, logging.Logger)]
    disabled = [(x, x.disabled) for x in loggers]
    try:
        code = lint_imports(config_filename=os.fspath(ROOT / "pyproject.toml"), no_cache=True)
    finally:
        for logger, was in disabled:
            logger.disabled = was
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 kept, 0 broken" in out, out


def test_the_cli_contract_names_every_other_top_level_module() -> None:
    """A module added later is under the contract too (it lists its sources by name)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["forbidden_modules"] == ["timeshard.cli"]]
    modules = {f"timeshard.{m.name}" for m in pkgutil.iter_modules(timeshard.__path__)}
    assert set(contract["source_modules"]) == modules - {"timeshard.cli", "timeshard.__main__"}


def test_linting_the_imports_leaves_the_loggers_enabled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    logger = logging.getLogger("timeshard.controller")
    assert not logger.disabled
    test_the_import_contracts_are_kept(monkeypatch, capsys)
    assert not logger.disabled
