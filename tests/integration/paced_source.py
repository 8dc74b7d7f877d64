"""A source wrapper for tick tests: it produces a round only when told."""

from __future__ import annotations

from typing import Any


class Rounds:
    """Wraps a load-generating source; its ``tick`` produces only while ``rounds`` > 0."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.rounds = 0
        self.name = source.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)

    def tick(self) -> None:
        if self.rounds > 0:
            self.rounds -= 1
            self.source.tick()
