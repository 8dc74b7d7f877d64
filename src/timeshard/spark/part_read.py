"""A read of parts: the parts checked, then Spark's Parquet reader planned (driver).

:func:`read_parts` checks that every part exists with its recorded size
(:func:`check_parts`, one listing call), records the parts for telling a
failed read apart (:mod:`~timeshard.spark.part_errors`), and plans Spark's
Parquet reader over them with page checksums verified
(:data:`VERIFY_PAGE_CHECKSUMS`) and no filtering by the footers
(:data:`NO_FOOTER_FILTERING`; :mod:`timeshard.spark.parts`, "Footers"). The
executors read the parts at the action, with Spark's reader; with injected
faults a pass-through :class:`~timeshard.spark.part_faults.PartReadFaults`
runs behind the scan. A blob with no root is read on the driver, with pyarrow.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession

from timeshard.errors import PartError
from timeshard.location.blob import Blob
from timeshard.location.file import served_sizes
from timeshard.persist._internal.blobio import read_part
from timeshard.persist._internal.parts import PartMeta, updates_schema
from timeshard.persist.config import PersistConfig
from timeshard.spark.part_errors import _plan, typed_errors
from timeshard.spark.part_faults import PartReadFaults, current_task_faults
from timeshard.spark.part_paths import filesystem_of, spark_path
from timeshard.spark.session import arrow_to_spark_schema
from timeshard.spark.sqltext import empty_frame, java_strings

#: The Parquet reader option that verifies page checksums (Spark's reader skips them by
#: default); a session's Hadoop conf sets it only when the session starts with it.
VERIFY_PAGE_CHECKSUMS = "parquet.page.verify-checksum.enabled"

#: Parquet's row-group and page filtering by the footer's statistics, dictionaries, bloom
#: filters and column indexes, turned off for every read of parts (module doc, "Footers").
NO_FOOTER_FILTERING = (
    "parquet.filter.stats.enabled",
    "parquet.filter.dictionary.enabled",
    "parquet.filter.bloom.enabled",
    "parquet.filter.columnindex.enabled",
)


def check_parts(blob: Blob, parts: list[PartMeta]) -> None:
    """Raise PartError unless every part exists with the size the state recorded.

    Runs on the driver: one ``get_file_info`` call for a blob with a remote root, a
    ``get`` per part for one without. Under a local root, the sizes are those of the
    files the blob's ``get`` serves (:func:`~timeshard.location.file.served_sizes`: an
    ``lstat`` per part and one per directory on the parts' paths): a part whose path passes
    through a symbolic link out of the root, through a directory link, or a loop, raises
    CorruptState naming its key, as the blob's ``get`` does, and Spark never reads it.
    """
    root = blob.root_uri
    if root is None:
        sizes = [_size_or_none(blob.get(p.key)) for p in parts]
    else:
        fs, base = filesystem_of(root)
        if isinstance(fs, pafs.LocalFileSystem):
            sizes = served_sizes(base, [p.key for p in parts])
        else:
            infos = fs.get_file_info([f"{base}/{p.key}" for p in parts])
            sizes = [info.size if info.type == pafs.FileType.File else None for info in infos]
    for part, size in zip(parts, sizes, strict=True):
        if size is None:
            raise PartError(part.key, "missing")
        if size != part.size_in_bytes:
            raise PartError(
                part.key, f"corrupt: it has {size} bytes, the state says {part.size_in_bytes}"
            )


def _size_or_none(data: bytes | None) -> int | None:
    return None if data is None else len(data)


def read_parts(
    spark: SparkSession, blob: Blob, parts: list[PartMeta], data_schema: pa.Schema
) -> DataFrame:
    """The raw updates of ``parts`` as a DataFrame with the part schema.

    Runs on the driver and checks the parts first (:func:`check_parts`; a part
    deleted after that check, before Spark lists it, is PartError too); Spark
    tasks read them at the action, where a part corrupted in place that Spark's
    reader fails on raises a Spark exception (PartError inside :func:`typed_errors`,
    once the driver found its bytes not the recorded SHA-256; an unreadable part
    Determinate); no SHA-256 is checked otherwise (module doc). No parts give an
    empty local relation, on which actions run no Spark job.
    """
    schema = arrow_to_spark_schema(updates_schema(data_schema))
    if not parts:  # a local relation: no action on it runs a Spark job
        return empty_frame(spark, schema)
    root = blob.root_uri
    if root is None:
        config = PersistConfig()
        table = pa.concat_tables([read_part(blob, p, data_schema, config) for p in parts])
        return spark.createDataFrame(table, schema)
    check_parts(blob, parts)
    uris = [spark_path(root, p.key) for p in parts]
    reader = (
        spark.read.schema(schema)
        .option("ignoreCorruptFiles", "false")
        .option("ignoreMissingFiles", "false")
        .option(VERIFY_PAGE_CHECKSUMS, "true")
        # pyarrow writes the proleptic Gregorian calendar and no Spark version in the
        # footer, so Spark would apply the session's rebase mode to old dates: never.
        .option("datetimeRebaseMode", "CORRECTED")
        .option("int96RebaseMode", "CORRECTED")
    )
    for option in NO_FOOTER_FILTERING:  # (the module doc, "Footers")
        reader = reader.option(option, "false")
    paths = java_strings(spark, uris)  # one py4j call, not one per part
    _plan(root, parts)
    with typed_errors():  # a part deleted since check_parts fails Spark's listing
        df = (
            reader.parquet(*uris)
            if paths is None
            else DataFrame(reader._jreader.parquet(paths), spark)
        )
    faults = current_task_faults()
    return df if faults is None else df.mapInArrow(PartReadFaults(faults), df.schema)


__all__ = ["NO_FOOTER_FILTERING", "VERIFY_PAGE_CHECKSUMS", "check_parts", "read_parts"]
