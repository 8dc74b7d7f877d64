"""A Spark failure to read a part no read of this process planned is judged by its cause."""

from __future__ import annotations

from timeshard.errors import Determinate, PartError
from timeshard.spark.parts import typed_error

FAILED = (
    "[FAILED_READ_FILE.NO_HINT] Encountered error while reading file "
    "s3a://bucket/root/s/w1/b1/part-00000-0123456789ab.parquet.  SQLSTATE: KD001\n"
    "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.cannotReadFilesError\n"
)
KEY = "s/w1/b1/part-00000-0123456789ab.parquet"


def test_a_timeout_is_a_fault() -> None:
    error = typed_error(
        Exception(FAILED + "Caused by: java.net.SocketTimeoutException: Read timed out")
    )
    assert isinstance(error, Determinate), error
    assert KEY in str(error) and "Read timed out" in str(error)


def test_bytes_that_do_not_decode_are_a_corrupt_part() -> None:
    cause = (
        "Caused by: org.apache.parquet.io.ParquetDecodingException: could not verify page integrity"
    )
    error = typed_error(Exception(FAILED + cause))
    assert isinstance(error, PartError) and error.key == KEY, error
    assert error.reason.startswith("corrupt: org.apache.parquet.io.ParquetDecodingException")


def test_a_fault_raised_in_a_python_task_keeps_its_type() -> None:
    text = "PythonException: timeshard.errors.Determinate: reading part 'k': [Errno 5] EIO"
    error = typed_error(Exception(text))
    assert isinstance(error, Determinate) and "[Errno 5] EIO" in str(error), error


def test_a_file_spark_found_not_is_a_missing_part() -> None:
    text = (
        "[FAILED_READ_FILE.FILE_NOT_EXIST] Encountered error while reading file "
        "file:///r/s/w1/b1/part-00000-0123456789ab.parquet. File does not exist.\n"
        "Caused by: java.io.FileNotFoundException: File "
        "file:/r/s/w1/b1/part-00000-0123456789ab.parquet does not exist\n"
    )
    error = typed_error(Exception(text))
    assert isinstance(error, PartError) and error.key == KEY and error.reason == "missing", error
