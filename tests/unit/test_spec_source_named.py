"""A bad option of a source is refused naming the source, whichever of its classes checks it:
with several sources, ``keys must be an int`` alone does not say which one to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.spec import check_spec, load_spec

GOOD = '[[source]]\nname = "a"\nkind = "counter"\n'


@pytest.mark.parametrize(
    ("declaration", "value"),
    [
        ('kind = "key_value"\noptions = {keys = "x"}', "'x'"),
        ('kind = "tpch"\noptions = {scale_factor = "big"}', "'big'"),
        (
            'kind = "file"\noptions = {path = "/tmp/f", format = "xml"}\ncolumns = {a = "int64"}',
            "'xml'",
        ),
        ('kind = "postgres"\noptions = {dsn = 5, publication = "p"}', "5"),
        ('kind = "mysql"\noptions = {url = 5}', "5"),
    ],
)
def test_a_bad_source_option_names_the_source(tmp_path: Path, declaration: str, value: str) -> None:
    f = tmp_path / "run.toml"
    f.write_text(f'{GOOD}[[source]]\nname = "b"\n{declaration}\n')
    with pytest.raises(InvalidUsage) as e:
        check_spec(load_spec(f), existing=[])
    assert str(e.value).startswith("source 'b': "), str(e.value)
    assert value in str(e.value)
