"""An S3 blob whose bucket does not exist: a fault, never an empty store.

Reads of a blob under a bucket that is missing (a typo, a bucket deleted or
not yet created) answered as if every key were absent: ``get`` None (a part
then reads as missing, reported as lost data), ``list_keys`` nothing and
``delete`` None. Those are now Determinate naming the bucket, retried until
it exists.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from timeshard.dev.seaweedfs import SeaweedS3
from timeshard.errors import Determinate
from timeshard.location import open_blob

pytestmark = pytest.mark.s3


def test_a_missing_bucket_is_a_fault_not_an_empty_blob(s3_server: SeaweedS3) -> None:
    missing = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    blob = open_blob(f"s3a://{missing}/dir")
    calls: list[Callable[[], object]] = [
        lambda: blob.get("s/p"),
        lambda: list(blob.list_keys("s/")),
        lambda: list(blob.list_keys()),
        lambda: blob.delete("s/p"),
        lambda: blob.set("s/p", b"v"),
    ]
    for call in calls:
        with pytest.raises(Determinate, match=f"bucket '{missing}' does not exist"):
            call()


def test_absent_keys_of_an_existing_bucket_are_absent(s3_server: SeaweedS3) -> None:
    blob = open_blob(s3_server.uri(f"absent/{uuid.uuid4().hex}"))
    assert blob.get("s/p") is None
    assert list(blob.list_keys()) == list(blob.list_keys("s/")) == []
    assert blob.delete("s/p") is None
    blob.set("s/p", b"v")
    assert blob.get("s/p") == b"v"
