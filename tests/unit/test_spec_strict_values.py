"""Declaration values are taken as written: no ``true`` for 1, no empty directory.

pydantic's lax mode read ``version = true`` and ``refresh_every_ms = true``
as 1 (and ``5000.0`` as 5000), and ``[location] dir = ""`` fell back to
``.timeshard`` in silence.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.spec import load_spec

SOURCE = '[[source]]\nname = "kv"\nkind = "key_value"\n'
VIEW = '[[view]]\nname = "v"\ninputs = { k = "kv" }\nsql = "SELECT 1 AS a FROM k"\n'
EXPORT = (
    '[[export]]\nname = "e"\nkind = "delta"\ninput = "kv"\nenvelope = "append"\n'
    'options = { table_uri = "/tmp/x" }\n'
)


def load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "run.toml"
    path.write_text(text)
    load_spec(path)


@pytest.mark.parametrize("value", ["true", "5000.0", '"5000"'])
def test_refresh_every_ms_is_an_integer(tmp_path: Path, value: str) -> None:
    with pytest.raises(
        InvalidUsage, match=r"view\.0\.refresh_every_ms: Input should be a valid integer"
    ):
        load(tmp_path, SOURCE + VIEW + f"refresh_every_ms = {value}\n")


@pytest.mark.parametrize("value", ["true", "2.0"])
def test_an_export_version_is_an_integer(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidUsage, match=r"export\.0\.version: Input should be a valid integer"):
        load(tmp_path, SOURCE + EXPORT + f"version = {value}\n")


@pytest.mark.parametrize("field", ["dir", "blob", "consensus"])
def test_an_empty_location_is_refused(tmp_path: Path, field: str) -> None:
    with pytest.raises(InvalidUsage, match=rf"location\.{field}: must name a location, got ''"):
        load(tmp_path, f'[location]\n{field} = ""\n' + SOURCE)


def test_integers_pass(tmp_path: Path) -> None:
    load(tmp_path, SOURCE + VIEW + "refresh_every_ms = 5000\n" + EXPORT + "version = 2\n")
