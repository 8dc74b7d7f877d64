"""An ingestion output (NONE) whose append fails surely (Determinate, Fenced, LeaseExpired,
InvalidUsage) deletes the batch it staged; one whose append may have committed keeps it.

It kept the batch either way: while the writer lived (heartbeats renew it), each failed
tick left its staged parts in blob, where GC deletes nothing of a registered writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from timeshard.errors import Determinate, Indeterminate
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.storage.ingest import Export

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


@pytest.mark.parametrize(("error", "kept"), [(Determinate, False), (Indeterminate, True)])
def test_a_failed_append_deletes_its_batch_only_if_surely_not_appended(
    spark: SparkSession, tmp_path: Path, error: type[Exception], kept: bool
) -> None:
    client = PersistClient(Location.embedded(tmp_path))
    export = Export(spark, client, "out", SCHEMA, "none", [])
    records = spark.createDataFrame(
        [("0", 0, "a", 1, 0), ("0", 1, "b", 2, 0)],
        "_partition string, _offset long, k string, v long, _ts long",
    )

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise error("injected")

    export.writer.compare_and_append_batch = failing  # type: ignore[method-assign]
    with pytest.raises(error):
        export.write(records, 0, 1)
    staged = [m.key for m in client.location.blob.list_keys("out/")]
    assert bool(staged) == kept, staged
    export.close()
