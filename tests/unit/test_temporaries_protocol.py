"""``Temporaries`` is declared beside ``Blob``, and only there.

A blob that lists and deletes ``.tmp-`` temporaries is a ``Temporaries``: the file
blob is one, the memory blob is not.
"""

from __future__ import annotations

from pathlib import Path

import timeshard.location as location
import timeshard.location.blob as blob
import timeshard.location.file as file
from timeshard.location import FileBlob, MemoryBlob


def test_temporaries_is_declared_in_the_blob_module() -> None:
    assert blob.Temporaries.__module__ == "timeshard.location.blob"
    assert "Temporaries" in blob.__all__
    assert location.Temporaries is blob.Temporaries
    assert not hasattr(file, "Temporaries")  # one declaration, imported from blob


def test_which_blobs_have_temporaries(tmp_path: Path) -> None:
    assert isinstance(FileBlob(tmp_path), blob.Temporaries)
    assert not isinstance(MemoryBlob(), blob.Temporaries)
