"""Which Python exceptions from Spark's workers are a row's (data), which are faults.

A view's query may call the user's Python function; its exception on a row is an err
row. timeshard's own tasks (reading and writing parts, the UPSERT's and exports' steps)
run Python in the workers too: an exception they raise (a corrupt part, a bug) is a
fault, retried and shown as health, never written as data.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors.exceptions.base import PythonException

import timeshard
from timeshard.compute.view import is_data_error, python_row_error

PACKAGE = Path(timeshard.__file__).parent


def raised_in(*files: str, line: str = "ValueError: bad value 3") -> PythonException:
    frames = "".join(f'  File "{f}", line 1, in f\n    x()\n' for f in files)
    return PythonException(message=f"Traceback (most recent call last):\n{frames}{line}\n")


WORKER = "/usr/lib/python3/site-packages/pyspark/worker.py"


def test_a_users_function_raising_on_a_row_is_data() -> None:
    error = raised_in(WORKER, "/home/me/timeshard/app/udfs.py")
    assert python_row_error(error) == "ValueError: bad value 3"
    assert is_data_error(error)


@pytest.mark.parametrize(
    "own",
    [
        str(PACKAGE / "spark" / "parts.py"),
        "/opt/venv/lib/python3.11/site-packages/timeshard/persist/fetch.py",
    ],
    ids=["this installation", "a worker's installation"],
)
def test_an_exception_of_timeshards_own_task_is_a_fault(own: str) -> None:
    """Its frames were taken for the user's function: a corrupt part read in a task would
    have become the view's err row."""
    error = raised_in(WORKER, own, line="timeshard.errors.CorruptState: part p1 is corrupt")
    assert python_row_error(error) is None
    assert not is_data_error(error)
