"""A part the process may not read is a fault, not a missing part.

Hadoop's local reader reports a file it may not open (EACCES) as
``FileNotFoundException: <path> (Permission denied)``, which Spark reports as
``[FAILED_READ_FILE.FILE_NOT_EXIST]``: the read was PartError "missing" (a lost part,
CorruptState for the shard) for a permission problem, which is I/O to retry and show as
health. Spark's "no file" is now checked as its other failures are, by the driver's re-read
of the part (``check_part_file``): a part that is there but may not be read is Determinate,
and one that is gone stays PartError "missing".

The reader runs as ``nobody`` in a forked child: root reads every file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.as_nobody import as_nobody

from timeshard.errors import Determinate, PartError
from timeshard.persist._internal.parts import PartMeta, part_digest
from timeshard.spark import part_errors
from timeshard.spark.parts import typed_error

KEY = "s/w1/b1/part-00000-0123456789ab.parquet"
DATA = b"the recorded bytes of a part"


def _spark_failure(path: Path) -> Exception:
    """The failure Spark 4's Parquet scan raised reading ``path`` as a user that may not
    (its text, cut to the lines ``typed_error`` looks at)."""
    return Exception(
        "org.apache.spark.SparkException: [FAILED_READ_FILE.FILE_NOT_EXIST] Encountered error "
        f"while reading file file://{path}. File does not exist. It is possible the "
        "underlying files have been updated.\n"
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.fileNotExistError\n"
        f"Caused by: java.io.FileNotFoundException: {path} (Permission denied)\n"
        "\tat java.base/java.io.FileInputStream.open0(Native Method)\n"
    )


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A blob root that ``nobody`` may search (tmp_path's parents are root's alone); the
    reads this test plans are forgotten after it."""
    monkeypatch.setattr(part_errors, "_planned", OrderedDict())
    base = Path(tempfile.mkdtemp())
    try:
        root = base / "blob"
        (root / KEY).parent.mkdir(parents=True)
        for directory in [base, root, *(root / KEY).parents]:
            if directory.is_relative_to(base):
                directory.chmod(0o755)
        yield root
    finally:
        shutil.rmtree(base)


def _planned(root: Path) -> None:
    """Plan a read of the part, as ``read_parts`` does before Spark reads it."""
    meta = PartMeta(KEY, len(DATA), 1, sha256=part_digest(DATA))
    part_errors._plan(root.as_uri(), [meta])


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may run a child as nobody")
def test_a_part_the_reader_may_not_read_is_a_fault_not_a_missing_part(root: Path) -> None:
    part = root / KEY
    part.write_bytes(DATA)
    part.chmod(0o600)  # root's: nobody may not read it
    _planned(root)
    answer = as_nobody(lambda: typed_error(_spark_failure(part)))
    assert answer.startswith("Determinate("), answer
    assert KEY in answer and "Permission denied" in answer, answer


def test_a_part_spark_found_no_file_for_that_is_gone_is_missing(root: Path) -> None:
    _planned(root)
    error = typed_error(_spark_failure(root / KEY))
    assert isinstance(error, PartError) and error.key == KEY, error
    assert error.reason == "missing"


def test_a_part_spark_found_no_file_for_that_the_driver_reads_whole_is_a_fault(
    root: Path,
) -> None:
    """Spark's reader (on an executor that may not read it) found no file, the driver reads
    the recorded bytes: the part is sound, the read failed."""
    (root / KEY).write_bytes(DATA)
    _planned(root)
    error = typed_error(_spark_failure(root / KEY))
    assert isinstance(error, Determinate), error
    assert KEY in str(error) and "Permission denied" in str(error)


def test_an_unplanned_part_spark_may_not_read_is_a_fault(root: Path) -> None:
    """No read of this process planned the part: Hadoop's "(Permission denied)" decides."""
    error = typed_error(_spark_failure(root / "s/w2/b2/part-00000-0123456789ab.parquet"))
    assert isinstance(error, Determinate), error
    assert str(error).startswith("reading part 's/w2/b2/part-00000-0123456789ab.parquet': ")


def test_an_unplanned_part_spark_listed_no_file_for_as_denied_is_a_fault() -> None:
    """Hadoop's listing (``getFileStatus``) says the same of a file it may not look at."""
    key = "s/w3/b3/part-00000-0123456789ab.parquet"
    text = f"Caused by: java.io.FileNotFoundException: /r/{key} (Permission denied)\n\tat x"
    error = typed_error(Exception(text))
    assert isinstance(error, Determinate), error
    assert str(error).startswith(f"reading part {key!r}: "), error
