"""Writer schemas of the Confluent wire format, by schema id: a schema registry, or files.

The Confluent wire format frames an Avro binary datum with five bytes: byte
0 is the magic byte ``0``, bytes 1-4 the id of the writer schema (a
big-endian signed int32; a registry's ids are not negative, so a negative
one is unknown without asking), and the datum follows. The id names a schema in a schema
registry; ``GET {url}/schemas/ids/{id}`` answers ``{"schema": "<Avro JSON
text>"}``. A registry never changes the schema of an id, so a schema once
fetched is kept for the life of the process.

Two implementations of :class:`WriterSchemas`:

* :class:`SchemaRegistry`: a registry's REST API at a URL (through
  confluent-kafka's ``SchemaRegistryClient``). An id the registry does not
  know (HTTP 404 with the registry's error code 40403, "schema not found"),
  or whose schema is not a self-contained Avro schema (another schema type,
  references, a text fastavro does not parse), is a *data* error of the
  record that names it: the record becomes an err row. Anything else (the
  registry unreachable, a timeout, an HTTP 5xx, refused credentials, a 404
  without that code, as from a URL that is not a registry's) is a *fault*:
  ``SourceUnavailable``, the ingestion stalls and retries, and nothing is
  written. The URL's user information never appears in a message (it is
  masked), nor in an err row (the URL is named without it). A URL the client
  cannot use (no host, a port that is no port, a list, a query) is
  InvalidUsage when the source is built, never a fault at each lookup.
* :class:`SchemaFiles`: a fixed map of ids to schema texts (a declaration's
  ``schemas = { 1 = "v1.avsc", ... }``), for producers that write the wire
  format without a registry this process can reach. An id outside the map is
  a data error, like a registry's 404.

Both run on the driver only: the KAFKA source looks the ids of a tick up
before it plans the decoding, and ships the texts in the plan.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from timeshard.errors import InvalidUsage, SourceUnavailable
from timeshard.storage.avro import avro_schema_problem

MAGIC = b"\x00"
#: The registry's error code for an id it has no schema for (with HTTP 404).
SCHEMA_NOT_FOUND = 40403
HEADER_BYTES = 5
DEFAULT_TIMEOUT_S = 10.0


def avro(text: str) -> bool:
    """Whether ``text`` is a valid, self-contained Avro schema that spark-avro can decode
    a datum with (fastavro parses it, and its names are Avro names:
    :func:`~timeshard.storage.avro.avro_schema_problem`)."""
    if not isinstance(text, str):
        return False
    try:  # a schema nested past Python's recursion limit is no schema this reads
        return avro_schema_problem(json.loads(text)) is None
    except (json.JSONDecodeError, RecursionError):
        return False


_USERINFO = re.compile(r"(?<=://)\S*@")


def redacted(text: str) -> str:
    """``text`` with the user information of any URL in it replaced by ``***``: whatever
    follows ``://`` up to the last ``@`` before a whitespace (for messages: a password
    holding ``@`` or ``/`` is masked too, and a path holding ``@`` is masked with it)."""
    return _USERINFO.sub("***@", text)


def without_userinfo(url: str) -> str:
    """``url`` without its ``user:password@`` (for what others can read: a catalog, an err
    row)."""
    start, end = _userinfo_span(url)
    return url[:start] + url[end:]


def _userinfo_span(url: str) -> tuple[int, int]:
    """Where the ``user:password@`` of ``url`` is (an empty span if it has none): the
    network location is delimited as ``urlsplit`` does (from ``://`` up to the first ``/``,
    ``?`` or ``#``), and its user information runs up to its last ``@``."""
    start = url.find("://") + 3
    if start < 3:
        return 0, 0
    end = min((i for i in (url.find(c, start) for c in "/?#") if i >= 0), default=len(url))
    at = url.rfind("@", start, end)
    return (start, at + 1) if at >= 0 else (0, 0)


class WriterSchemas(Protocol):
    """Where the writer schema of a schema id comes from (driver)."""

    def schema(self, schema_id: int) -> str | None:
        """The Avro JSON text of ``schema_id``, None if it has none (a data error).

        Raises SourceUnavailable if it cannot tell (a fault).
        """
        ...

    def known(self) -> Mapping[int, str] | None:
        """Every id and its schema if the set is fixed in advance, else None."""
        ...

    def describe(self) -> str:
        """Where the schemas come from, for an err row's message."""
        ...


class SchemaRegistry:
    """A Confluent-compatible schema registry's REST API at ``url`` (module doc)."""

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        problem = _url_problem(url)
        if problem is not None:
            shown = _masked(url) if isinstance(url, str) else url
            raise InvalidUsage(
                f"schema_registry_url must be an http(s) URL of one registry, got {shown!r}: "
                f"{problem}"
            )
        scheme, _, rest = url.partition("://")
        # confluent-kafka's client takes a lowercase scheme only.
        self.url = f"{scheme.lower()}://{rest}".rstrip("/")
        start, end = _userinfo_span(url)
        userinfo = url[start : end - 1] if end > start else ""  # (0, 0): the URL has none
        password = userinfo.partition(":")[2]
        self._secrets = [t for t in (userinfo, password, unquote(password)) if t]
        self.timeout_s = timeout_s
        self._schemas: dict[int, str] = {}
        self._client: Any = None

    def schema(self, schema_id: int) -> str | None:
        if not 0 <= schema_id < 1 << 31:
            return None  # no registry has it, and some answer a 404 without code 40403
        found = self._schemas.get(schema_id)
        if found is not None:
            return found
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            registered = self._registry().get_schema(schema_id)
        except SchemaRegistryError as e:
            if (e.http_status_code, e.error_code) == (404, SCHEMA_NOT_FOUND):
                return None
            raise self._unavailable(schema_id, e) from None
        except Exception as e:  # the HTTP client's transport errors: a fault
            raise self._unavailable(schema_id, e) from None
        text: str = registered.schema_str
        if (registered.schema_type or "AVRO") != "AVRO" or registered.references or not avro(text):
            return None  # the record names a schema it cannot be read with: a data error
        self._schemas[schema_id] = text
        return text

    def known(self) -> None:
        return None

    def describe(self) -> str:
        # Without the user information: err rows are data, and verify rebuilds the source
        # from the catalog, which keeps the URL without it.
        return (
            f"the schema registry at {without_userinfo(self.url)} as a self-contained Avro schema"
        )

    def _registry(self) -> Any:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        if self._client is None:
            self._client = SchemaRegistryClient(
                {"url": self.url, "timeout": max(1, round(self.timeout_s)), "max.retries": 1}
            )
        return self._client

    def _unavailable(self, schema_id: int, e: Exception) -> SourceUnavailable:
        cause = redacted(str(e))
        for secret in self._secrets:  # as an HTTP client may quote them, without a URL
            cause = cause.replace(secret, "***")
        return SourceUnavailable(
            f"schema registry at {redacted(self.url)}: schema id {schema_id} could not be "
            f"fetched: {type(e).__name__}: {cause[:300]}"
        )


def _url_problem(url: object) -> str | None:
    """What makes ``url`` no URL of one registry's REST API, None if nothing does.

    confluent-kafka's client would fail on it at every lookup, a fault: an http(s) URL
    with a host, a port in 1..65535 if any, no query or fragment (the client appends
    paths to it), no whitespace or control character, and no comma (the client reads a
    comma as a list of URLs)."""
    if not isinstance(url, str):
        return "it is not a string"
    if any(c.isspace() or unicodedata.category(c).startswith("C") for c in url):
        return "it holds whitespace or a control character"
    if "," in url:
        return "give one URL, without a comma"
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return "its scheme must be http:// or https://"
    if "?" in url or "#" in url:
        return "it must have no query or fragment"
    try:
        parts = urlsplit(url)
    except ValueError as e:  # an unclosed IPv6 address
        return str(e)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        return "its port must be a number in 1..65535"
    if not parts.hostname:
        return "it names no host"
    return None


def _masked(url: str) -> str:
    """``url`` with its user information masked, as the network location delimits it and
    up to the last ``@`` before a whitespace (:func:`redacted`), whichever masks more."""
    start, end = _userinfo_span(url)
    return redacted(url if end == 0 else f"{url[:start]}***@{url[end:]}")


class SchemaFiles:
    """A fixed map of schema ids to writer schemas (module doc)."""

    def __init__(self, schemas: Mapping[int, str]) -> None:
        bad = [
            i
            for i in schemas
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < 1 << 31
        ]
        if bad or not schemas:
            raise InvalidUsage(
                f"schemas must map schema ids (0 <= id < 2**31) to Avro schemas, got ids "
                f"{list(schemas)}"
            )
        for i, text in schemas.items():
            if not isinstance(text, str):
                raise InvalidUsage(f"schemas: schema id {i} is not text, got {type(text).__name__}")
            try:
                problem = avro_schema_problem(json.loads(text))
            except json.JSONDecodeError as e:
                raise InvalidUsage(f"schemas: schema id {i} is not JSON text: {e}") from None
            except RecursionError:
                raise InvalidUsage(f"schemas: schema id {i} is nested too deeply") from None
            if problem is not None:
                raise InvalidUsage(f"schemas: schema id {i} is not a valid Avro schema: {problem}")
        self._schemas = dict(schemas)

    def schema(self, schema_id: int) -> str | None:
        return self._schemas.get(schema_id)

    def known(self) -> Mapping[int, str]:
        return self._schemas

    def describe(self) -> str:
        return f"the declared schemas (ids {sorted(self._schemas)})"


__all__ = [
    "HEADER_BYTES",
    "MAGIC",
    "SCHEMA_NOT_FOUND",
    "SchemaFiles",
    "SchemaRegistry",
    "WriterSchemas",
]
