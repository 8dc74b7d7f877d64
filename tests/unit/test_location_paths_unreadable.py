"""A blob root or SQLite file whose path cannot be looked at is a fault, not a crash.

``check_creatable`` refuses a path that can never work (InvalidUsage). Looking
at a path under a directory this user may not search (``stat`` fails with
EACCES) raised a bare PermissionError out of ``FileBlob()`` and
``SqliteConsensus()``: no timeshard error, so neither retried as a fault nor
reported as a mistake. The check now leaves such a path to the creation,
whose failure is Determinate. (Root ignores permissions, so ``stat`` is made
to fail here.)
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from timeshard.errors import Determinate
from timeshard.location import FileBlob, SqliteConsensus


def _unsearchable(monkeypatch: pytest.MonkeyPatch, below: Path) -> None:
    """Make ``stat``, ``mkdir`` and SQLite's open of any path below ``below`` fail with EACCES."""
    denied = OSError(errno.EACCES, "Permission denied")

    def guarded(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Path, *args: Any, **kwargs: Any) -> Any:
            if self.is_relative_to(below) and self != below:
                raise PermissionError(denied.errno, denied.strerror, str(self))
            return real(self, *args, **kwargs)

        return call

    monkeypatch.setattr(Path, "stat", guarded(Path.stat))
    monkeypatch.setattr(Path, "mkdir", guarded(Path.mkdir))


@pytest.mark.parametrize(
    "open_location",
    [
        lambda p: FileBlob(p / "blob"),
        lambda p: SqliteConsensus(p / "db" / "c.sqlite"),
    ],
    ids=["file blob", "sqlite"],
)
def test_a_path_that_cannot_be_looked_at_is_determinate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_location: Callable[[Path], object]
) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    _unsearchable(monkeypatch, secret)
    with pytest.raises(Determinate, match="Permission denied"):
        open_location(secret)
