"""What a fixture does when the real component it starts cannot start."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import pytest


def skip_or_fail(reason: str, tests: str) -> NoReturn:
    """Skip the tests, printing ``reason``; or, with ``CI`` set, fail them: CI must run them."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run the {tests} tests)")
    print(reason, file=sys.stderr)
    pytest.skip(reason)
