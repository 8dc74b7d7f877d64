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
from typing import Any

import pytest

from timeshard.dev.seaweedfs import SeaweedS3
from timeshard.errors import Determinate
from timeshard.location import open_blob
from timeshard.location.arrowfs import ArrowFsBlob

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


class _NoBucketLookups:
    """The blob's filesystem, for credentials that may use objects but not look at the
    bucket itself (an S3 policy granting a prefix: HeadBucket is denied)."""

    def __init__(self, fs: Any, bucket: str) -> None:
        self._fs, self._bucket = fs, bucket

    def get_file_info(self, path: Any) -> Any:
        if path == self._bucket:
            raise OSError("AWS Error ACCESS_DENIED during HeadBucket operation")
        return self._fs.get_file_info(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


def test_absent_keys_read_absent_when_the_bucket_cannot_be_looked_at(
    s3_server: SeaweedS3,
) -> None:
    """The missing-bucket check took a denied bucket look-up for a fault: with such
    credentials every absent key, empty listing and delete of a collected part failed."""
    blob = open_blob(s3_server.uri(f"absent/{uuid.uuid4().hex}"))
    assert isinstance(blob, ArrowFsBlob)
    blob.fs = _NoBucketLookups(blob.fs, blob.base.split("/", 1)[0])
    assert blob.get("s/p") is None
    assert list(blob.list_keys("s/")) == []
    assert blob.delete("s/p") is None


def test_a_bucket_seen_to_exist_is_not_asked_for_at_every_absent_key(
    s3_server: SeaweedS3,
) -> None:
    """Every write checks its key is absent, and each absent answer asked for the bucket:
    one more request per part written."""
    blob = open_blob(s3_server.uri(f"absent/{uuid.uuid4().hex}"))
    assert isinstance(blob, ArrowFsBlob)
    bucket = blob.base.split("/", 1)[0]
    asked: list[str] = []

    class Counting(_NoBucketLookups):
        def get_file_info(self, path: Any) -> Any:
            if path == bucket:
                asked.append(path)
            return self._fs.get_file_info(path)

    blob.fs = Counting(blob.fs, bucket)
    for i in range(3):
        blob.set(f"s/p{i}", b"v")
    assert len(asked) == 1
