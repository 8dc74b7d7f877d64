"""Location URIs that cannot be used: InvalidUsage naming the value, never its secrets.

The conformance suite checks the well-formed URIs of every backend; this file
checks the malformed ones a user types: secrets that must not reach an error
message or a log, control characters, and values that can be refused before
anything is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from timeshard.errors import InvalidUsage
from timeshard.location import open_blob, open_consensus

SECRET = "hunter2"


@pytest.mark.parametrize(
    ("opener", "uri"),
    [
        (open_consensus, f"host=db.example password={SECRET} dbname=ts"),
        (open_consensus, f"host=db.example password='{SECRET} x' dbname=ts"),
        (open_consensus, f"postgresql//app:{SECRET}@db.example/ts"),
        (open_consensus, f"postgresql:app:{SECRET}@db.example/ts"),
        (open_consensus, f"mysql://app:{SECRET}@db.example/ts"),
        (open_consensus, f"postgresql://app:{SECRET}@db.example/ts?nonsense=1"),
        (open_consensus, f"postgresql://app:p/{SECRET}@db.example/ts?nonsense=1"),
        (open_blob, f"s3://AKIAX:{SECRET}@bucket/dir?region=us-east-1&bogus_option=1"),
        (open_blob, f"s3://AKIAX:{SECRET}@bucket/dir?region=us-east-1&scheme=bogus"),
        (open_blob, f"s3://AKIAX:{SECRET}@bu cket/dir?region=us-east-1"),
        (open_blob, f"arrowfs+gs://tok:{SECRET}@bucket/d?x=1"),
        (open_blob, f"redis://app:{SECRET}@cache"),
        (open_blob, f"file://app:{SECRET}@host/dir"),
    ],
)
def test_a_refused_uri_hides_its_secrets(
    opener: Callable[[str], object], uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidUsage) as info:
        opener(uri)
    assert SECRET not in str(info.value)
    assert "***" in str(info.value)
    assert list(tmp_path.iterdir()) == []
