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


@pytest.mark.parametrize(
    ("files", "line"),
    [
        (
            [str(PACKAGE / "spark" / "parts.py"), "/opt/venv/site-packages/pyarrow/compute.py"],
            "pyarrow.lib.ArrowInvalid: Integer value 300 not in range: -128 to 127",
        ),
        (
            [str(PACKAGE / "spark" / "parts.py"), "/usr/lib/python3.11/json/decoder.py"],
            "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
        ),
        (
            ["/usr/local/lib/python3.11/dist-packages/timeshard/spark/parts.py"],
            "timeshard.errors.CorruptState: part p1 is corrupt",
        ),
    ],
    ids=["through pyarrow", "through the standard library", "a dist-packages install"],
)
def test_what_timeshards_own_task_calls_raising_is_a_fault(files: list[str], line: str) -> None:
    """Any frame outside PySpark and timeshard made the error the user's: pyarrow raising
    under timeshard's part writer, or timeshard installed elsewhere, was written as data."""
    error = raised_in(WORKER, *files, line=line)
    assert python_row_error(error) is None
    assert not is_data_error(error)


def test_a_network_error_in_a_udf_is_a_fault_whatever_the_driver_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A class was looked up only among the modules the driver had imported: a standard
    library's network error (smtplib's, an OSError; urllib's URLError alike) was data
    until some code imported its module."""
    import sys

    monkeypatch.delitem(sys.modules, "smtplib", raising=False)  # a driver that never did
    line = "smtplib.SMTPServerDisconnected: Connection unexpectedly closed"
    error = raised_in(WORKER, "/home/me/app/udfs.py", line=line)
    assert python_row_error(error) is None
