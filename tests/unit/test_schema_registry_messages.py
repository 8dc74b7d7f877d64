"""A registry fault's message names the URL as given when it holds no user information.

The masking of credentials took, for a URL without ``user:password@``, the whole URL
but its last character as the "user information": every text of a cause that held
``http://host:808`` (or, for ``http://h``, just ``//``) was masked as ``***``.
"""

from __future__ import annotations

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from timeshard.errors import SourceUnavailable
from timeshard.storage.schema_registry import SchemaRegistry


class Failing:
    """A registry client whose lookups fail with a cause that quotes the URL asked."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get_schema(self, schema_id: int) -> None:
        raise SchemaRegistryError(503, 50301, f"upstream {self.url}/schemas/ids/{schema_id} down")


@pytest.mark.parametrize("url", ["http://registry:8081", "http://h", "https://h.example/p"])
def test_a_fault_names_a_url_without_credentials_unmasked(url: str) -> None:
    registry = SchemaRegistry(url)
    registry._client = Failing(url)
    with pytest.raises(SourceUnavailable) as e:
        registry.schema(7)
    assert f"upstream {url}/schemas/ids/7 down" in str(e.value)
    assert "***" not in str(e.value)


def test_a_fault_still_masks_credentials() -> None:
    url = "http://alice:hunter2@registry:8081"
    registry = SchemaRegistry(url)
    registry._client = Failing("alice:hunter2 at registry:8081")
    with pytest.raises(SourceUnavailable) as e:
        registry.schema(7)
    assert "hunter2" not in str(e.value) and "alice" not in str(e.value)
    assert "upstream *** at registry:8081/schemas/ids/7 down" in str(e.value)
