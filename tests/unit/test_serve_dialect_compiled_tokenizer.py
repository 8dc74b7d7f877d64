"""serve's dialect imports, and reads ``$n`` parameters, where sqlglot's tokenizer core is
compiled (sqlglotc, sqlglot's ``c`` extra): its class statement subclassed the core,
which a compiled class refuses (TypeError at import: no serve module imported), and a
compiled core would call its own ``_scan_string``. It falls back to the stock core,
logged once. sqlglotc is not installed: a copy of the module is loaded where the core
refuses subclasses, or where sqlglot says it is compiled."""

from __future__ import annotations

import importlib.util
import logging
from types import ModuleType
from typing import Any

import pytest
import sqlglot
import sqlglot.tokenizer_core
import sqlglot.tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokenizer_core import TokenizerCore

from timeshard.server import dialect


class _Compiled(TokenizerCore):
    """A core that refuses an interpreted subclass, as mypyc's compiled classes do."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("interpreted classes cannot inherit from compiled traits")


def _loaded_copy(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh copy of :mod:`timeshard.server.dialect` (sqlglot's registry of dialects
    left as it was)."""
    monkeypatch.setattr(type(Dialect), "_classes", dict(type(Dialect)._classes))
    spec = importlib.util.spec_from_file_location("serve_dialect_copy", dialect.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("compiled", ["refuses a subclass", "says so"])
def test_a_compiled_core_falls_back_to_the_stock_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, compiled: str
) -> None:
    if compiled == "refuses a subclass":
        monkeypatch.setattr(sqlglot.tokenizer_core, "TokenizerCore", _Compiled)
    else:
        monkeypatch.setattr(sqlglot.tokens, "SQLGLOTC_INSTALLED", True)
    with caplog.at_level(logging.WARNING, logger="serve_dialect_copy"):
        copy = _loaded_copy(monkeypatch)
    assert [r.getMessage() for r in caplog.records if "sqlglotc" in r.getMessage()] != []
    assert copy._PARAMETER_CORE is None
    tree = sqlglot.parse_one("SELECT $1 + $2 FROM t", read=copy.DIALECT)
    assert sorted(p.sql("postgres") for p in tree.find_all(sqlglot.exp.Parameter)) == ["$1", "$2"]


def test_an_interpreted_core_reads_a_parameter_before_an_empty_string() -> None:
    tree = sqlglot.parse_one("SELECT $1, ''", read=dialect.DIALECT)
    assert [e.sql("postgres") for e in tree.expressions] == ["$1", "''"]
