"""JSON values for map columns (FILE and COPY decode JSON alike: ``decode_payload``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Decodes one JSON line into a map column (and maps inside a list and a struct) in a
#: child process, which prints the outcome: pyarrow aborted the process on a null entry.
CHILD = """
import sys
import pyarrow as pa
from timeshard.storage.file_source import decode_payload

m = pa.map_(pa.string(), pa.int64())
schema = pa.schema([
    ("m", m), ("ms", pa.list_(m)), ("s", pa.struct([("m", m)])),
])
try:
    print(decode_payload(sys.argv[1].encode(), "json", schema))
except ValueError as e:
    print("ValueError:", e)
"""


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"m": [null]}', "ValueError: column 'm' (map<string, int64>): a map entry is null"),
        ('{"ms": [[null]]}', "ValueError: column 'ms'"),
        ('{"s": {"m": [null]}}', "ValueError: column 's'"),
        ('{"m": {"a": 1}, "ms": [{"b": 2}], "s": {"m": {"c": null}}}', "'m': [('a', 1)]"),
    ],
)
def test_a_null_entry_of_a_map_is_an_error_of_the_record_not_a_crash(
    line: str, expected: str
) -> None:
    """A record whose map column holds a null entry decodes to an error (an err row), and
    the process (a Spark task's Python worker) goes on."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, line], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expected in done.stdout
