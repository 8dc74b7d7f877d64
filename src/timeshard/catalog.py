"""The catalog: what every view, source and export of a location is, kept as a collection.

View definitions and source declarations otherwise live only in the process
that runs them; the catalog makes them durable, so that tools (``timeshard
verify``) can recompute and check what a location holds. It lives in the
shard ``timeshard_catalog`` as an upsert collection keyed by ``(name, kind)``
-- written by the feedback upsert, like the status collection of
:mod:`timeshard.storage.health` -- with one row per object:

========== ==========================================================================
column     meaning
========== ==========================================================================
name       the object: a view's shard, a source's output name, an export's shard
kind       ``view`` | ``source`` | ``export`` | ``statement``
definition a JSON object, as text (never pickle); see below
========== ==========================================================================

The key holds the kind because a source with one output shares its name with
its export (source ``kv`` writes shard ``kv``).

Definitions:

* ``view``: ``inputs`` (alias -> shard), ``sql`` (null for a view defined by a
  Python function, whose ``function`` then names it, ``module:qualname``),
  ``refresh_every_ms``, ``retain_history_ms``, ``holds`` (input shard -> the
  critical since handle the view holds it with, see
  :mod:`timeshard.persist.holds`), ``as_of`` (the view's shard equals its
  query at every time ``>= as_of``; before it, it may hold nothing), and
  ``path`` (``linear`` | ``grouped`` | ``full``) with ``path_reason``: how
  the view was maintained when it was installed, and why
  (:class:`~timeshard.compute.incremental.Classification`). Entries recorded
  before paths were recorded have neither; readers show them as unknown;
* ``source``: ``source_kind`` (``key_value`` | ``counter`` | ``auction`` |
  ``tpch`` | ``file`` | ``kafka`` | ``postgres`` | ``mysql``, or ``other`` with
  ``class``), ``options`` (a FILE source's ``name``, ``path``, ``format``,
  ``columns`` as ``[name, type name]`` pairs and ``avro_schema``; a KAFKA
  source's constructor arguments, its key and value columns as such pairs, and
  ``topic_id``: its topic's id when the source was first built, asked of the
  broker then (null if it could not tell, or not asked: a pipeline's build
  leaves it to the source's first step), recorded once known and never
  erased nor replaced: see
  :meth:`~timeshard.storage.kafka_source.KafkaSource.pin_recorded`; a
  POSTGRES source's ``name``, ``dsn`` *without its password*,
  ``publication``, ``slot``, ``tables``, ``table_oids`` (subsource ->
  the OID of its table when the source was first built) and ``table_columns``
  (subsource -> its columns then), which a later build keeps: see
  :meth:`~timeshard.storage.postgres_source.PostgresSource.pin_recorded`);
  a MYSQL source's ``name``,
  ``url`` without its password, ``tables`` and ``table_columns`` (table ->
  its columns when the source was first built, which a later build keeps:
  :meth:`~timeshard.storage.mysql_source.MySqlSource.pin_recorded`); a load generator's
  dataclass fields but its ``ticks``, which is progress, not declaration),
  ``remap`` (the remap shard) and ``exports`` (shard -> ``subsource``,
  ``envelope``, ``key_columns``). The options are what ``timeshard verify``
  rebuilds a source from to read its records again;
* ``export``: ``source`` (the source's name), ``subsource``, ``envelope``
  (``none`` | ``upsert``) and ``key_columns``;
* ``statement``: the SQL that created an object of ``timeshard serve``
  (:mod:`timeshard.server.engine`): ``sql`` (its CREATE statement), ``seq``
  (the order of creation, in which a restarted server replays them) and
  ``object`` (``source`` | ``view``); a view's has ``typed`` (the lowest
  version of the typing rewrites that resolves its query alike,
  :data:`~timeshard.server.engine.TYPED_VIEWS`) if serve typed it: a server
  older than that field resolves such a view's query untyped, so a location
  with typed views is served by servers that know it; and ``resolved``
  (``sql``, the view's query in Spark SQL, and ``inputs``, alias -> shard),
  which a restore installs as it is rather than resolving the query again (an
  entry without it, older or of a query that did not resolve at its CREATE, is
  resolved again). DROP deletes the row. The object itself is also recorded
  under its own kind, as any view or source is.

Invariants:

1. Recording is idempotent: an object whose stored definition equals the new
   one is not written (a view's ``as_of`` does not count: reinstalling an
   unchanged view keeps the time since which it has been correct; a view
   whose ``path`` or ``path_reason`` alone changed is rewritten with its
   stored ``as_of``).
2. Nothing is written when nothing changed -- not even a writer registration.
3. At every time the collection holds at most one row per ``(name, kind)``.
4. A read-only view replica records nothing (it writes nothing to consensus);
   it records its definition when promoted.
5. Every write is decided on what is stored at the catalog's upper and lands
   only at that upper (a compare-and-set): a write decided on a stale read is
   decided again (after a random pause that doubles, up to 1 s, for up to
   ``RETRY_FOR_S``; then :class:`~timeshard.errors.Determinate`, a fault). So
   :meth:`Catalog.claim_statement` gives one name to one statement, whoever
   else claims it at the same moment.

Runs on the driver (pyarrow path, no Spark).
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa

from timeshard.errors import CorruptState, Determinate, InvalidUsage, SinceError
from timeshard.persist import Appended, PersistClient
from timeshard.persist._internal.parts import ERR
from timeshard.persist.holds import view_hold_id
from timeshard.storage.upsert import FeedbackUpsert, UpsertCommand

if TYPE_CHECKING:
    from timeshard.compute.incremental import Classification
    from timeshard.compute.view import ViewDefinition

CATALOG_SHARD = "timeshard_catalog"
KINDS = ("view", "source", "export", "statement")
CATALOG_SCHEMA = pa.schema(
    [("name", pa.string()), ("kind", pa.string()), ("definition", pa.string())]
)
CATALOG_KEYS = ("name", "kind")

#: How long a write goes on deciding again while other writers' appends land first.
RETRY_FOR_S = 60.0
#: How many times a read of the catalog reads again as other writers' appends land.
_READ_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One object of the catalog; ``definition`` is a JSON object."""

    name: str
    kind: str
    definition: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidUsage(f"a catalog name must be a non-empty str, got {self.name!r}")
        if self.kind not in KINDS:
            raise InvalidUsage(f"catalog kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.definition, Mapping):
            raise InvalidUsage(
                f"the definition of {self.kind} {self.name!r} must be a JSON object, "
                f"got {type(self.definition).__name__}"
            )

    def definition_text(self) -> str:
        """The definition as canonical JSON text; InvalidUsage if it is not JSON."""
        try:
            return json.dumps(
                self.definition, sort_keys=True, separators=(",", ":"), allow_nan=False
            )
        except (TypeError, ValueError) as e:
            raise InvalidUsage(
                f"the definition of {self.kind} {self.name!r} is not JSON: {e}: {self.definition!r}"
            ) from None

    @staticmethod
    def from_row(row: Mapping[str, Any]) -> CatalogEntry:
        """Decode a stored row; CorruptState names the row if it does not decode."""
        name, kind, text = row.get("name"), row.get("kind"), row.get("definition")
        if row.get(ERR) is not None:
            raise CorruptState(f"catalog row ({name!r}, {kind!r}) is an err row: {row[ERR]}")
        try:
            definition = json.loads(text) if isinstance(text, str) else None
        except json.JSONDecodeError as e:
            raise CorruptState(
                f"catalog row ({name!r}, {kind!r}): definition is not JSON: {e}: {text!r}"
            ) from None
        try:
            return CatalogEntry(name, kind, definition)  # type: ignore[arg-type]
        except InvalidUsage as e:
            raise CorruptState(f"catalog row ({name!r}, {kind!r}): {e}") from None


def catalog_rows(client: PersistClient) -> list[dict[str, Any]]:
    """The catalog's rows (with ``_diff`` and ``_err``) at its latest readable time."""
    return _catalog_read(client)[0]


def _catalog_read(client: PersistClient) -> tuple[list[dict[str, Any]], int]:
    """The catalog's rows at its latest readable time, and the upper they were read below
    (0 for a catalog not yet written).

    A write that lands while it reads may move the since past the upper read: it reads
    again at the new upper, up to ``_READ_ATTEMPTS`` times, then raises the
    :class:`~timeshard.errors.SinceError` naming the shard and its frontiers. A written
    catalog never reads as empty.
    """
    if CATALOG_SHARD not in client.list_shards():
        return [], 0
    reader = client.open_unleased_reader(CATALOG_SHARD)
    attempts = 0
    while True:
        upper = reader.upper().time
        if upper is None:  # no writer closes it: only a shard-level close of it did
            raise CorruptState(
                f"the catalog shard {CATALOG_SHARD!r} is closed: the catalog cannot be "
                "read or written"
            )
        if upper == 0:
            return [], 0
        try:
            rows: list[dict[str, Any]] = reader.snapshot(upper - 1).to_pylist()
        except SinceError:
            attempts += 1
            if attempts == _READ_ATTEMPTS:
                raise
            continue
        return rows, upper


def read_catalog(client: PersistClient) -> list[CatalogEntry]:
    """Every object of the catalog, in name order; CorruptState for a row that does not decode."""
    entries = [CatalogEntry.from_row(r) for r in catalog_rows(client)]
    return sorted(entries, key=lambda e: (e.name, e.kind))


class Catalog:
    """Records objects into the catalog collection (see the module invariants)."""

    def __init__(self, client: PersistClient, clock: Callable[[], int] | None = None) -> None:
        self._client = client
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)

    def record(
        self,
        entries: Sequence[CatalogEntry],
        same: Callable[[CatalogEntry, CatalogEntry], bool] | None = None,
    ) -> int:
        """Store ``entries``; return how many changed (0: nothing was written).

        ``same(stored, new)`` says whether a stored entry may stay (default:
        equal definitions). It is an error to give one ``(name, kind)`` twice.
        """
        keys = [(e.name, e.kind) for e in entries]
        if len(set(keys)) != len(keys):
            raise InvalidUsage(f"catalog entries repeat a (name, kind): {sorted(keys)}")
        texts = {(e.name, e.kind): e.definition_text() for e in entries}
        # Compare what would be stored: the definitions as they read back from JSON.
        wanted = [CatalogEntry(n, k, json.loads(t)) for (n, k), t in texts.items()]
        keep = same or (lambda old, new: old.definition == new.definition)

        def changes(stored: dict[tuple[str, str], CatalogEntry]) -> dict[Any, tuple[Any, ...]]:
            return {
                (e.name, e.kind): (texts[(e.name, e.kind)],)
                for e in wanted
                if (e.name, e.kind) not in stored or not keep(stored[(e.name, e.kind)], e)
            }

        return self._apply(changes, sorted(texts))

    def forget(self, keys: Sequence[tuple[str, str]]) -> int:
        """Delete the entries of ``keys`` (``(name, kind)``); return how many were stored."""
        return self._apply(lambda stored: {k: None for k in keys if k in stored}, sorted(keys))

    def record_statement(self, name: str, definition: Mapping[str, Any]) -> int:
        """Record the statement that created object ``name`` (see ``timeshard serve``)."""
        return self.record([CatalogEntry(name, "statement", dict(definition))])

    def claim_statement(self, name: str, definition: Mapping[str, Any]) -> CatalogEntry | None:
        """Record the statement that creates ``name`` unless another one holds the name.

        None if the name is now this statement's (recorded here, or already
        recorded with this very definition); else the stored statement that
        holds it, and nothing is written. The check and the write are one
        compare-and-set on the catalog's upper: of two servers claiming one
        name at once, exactly one gets it (invariant 5).
        """
        wanted = CatalogEntry(name, "statement", json.loads(self._text(name, definition)))
        holder: list[CatalogEntry] = []

        def changes(stored: dict[tuple[str, str], CatalogEntry]) -> dict[Any, tuple[Any, ...]]:
            holder.clear()
            held = stored.get((name, "statement"))
            if held is None:
                return {(name, "statement"): (wanted.definition_text(),)}
            if held.definition != wanted.definition:
                holder.append(held)
            return {}

        self._apply(changes, [(name, "statement")])
        return holder[0] if holder else None

    def amend_statement(
        self, name: str, definition: Mapping[str, Any], amended: Mapping[str, Any]
    ) -> int:
        """Replace the statement of ``name`` by ``amended`` only if it is ``definition``
        (one compare-and-set: a statement another server changed or forgot since
        stays); 1 if it was replaced."""
        mine = json.loads(self._text(name, definition))
        text = self._text(name, amended)

        def changes(stored: dict[tuple[str, str], CatalogEntry]) -> dict[Any, Any]:
            held = stored.get((name, "statement"))
            if held is None or held.definition != mine:
                return {}
            return {(name, "statement"): (text,)}

        return self._apply(changes, [(name, "statement")])

    def forget_statement(self, name: str, definition: Mapping[str, Any] | None = None) -> int:
        """Delete the statement of ``name``; with ``definition``, only if it is that one
        (a claim given back: a statement another server recorded since stays)."""
        if definition is None:
            return self.forget([(name, "statement")])
        mine = json.loads(self._text(name, definition))

        def changes(stored: dict[tuple[str, str], CatalogEntry]) -> dict[Any, Any]:
            held = stored.get((name, "statement"))
            return {} if held is None or held.definition != mine else {(name, "statement"): None}

        return self._apply(changes, [(name, "statement")])

    @staticmethod
    def _text(name: str, definition: Mapping[str, Any]) -> str:
        return CatalogEntry(name, "statement", dict(definition)).definition_text()

    def _apply(
        self,
        changes: Callable[[dict[tuple[str, str], CatalogEntry]], dict[Any, Any]],
        what: Sequence[tuple[str, str]],
    ) -> int:
        """Write ``changes(stored)`` (key -> value, None deletes) until the append lands.

        The append is a compare-and-set on the upper ``stored`` was read below:
        if anyone wrote the catalog since, nothing is written and ``changes``
        is asked again, of what is stored now.
        """
        upsert: FeedbackUpsert | None = None
        deadline = time.monotonic() + RETRY_FOR_S
        backoff = 0.01
        lost = 0
        try:
            while True:
                stored, upper = self._stored()
                changed = changes({(e.name, e.kind): e for e in stored})
                if not changed:
                    return 0
                if upsert is None:
                    upsert = FeedbackUpsert(
                        self._client, CATALOG_SHARD, CATALOG_SCHEMA, list(CATALOG_KEYS)
                    )
                now = max(self._clock(), upper)
                commands = [UpsertCommand(k, v, now, (now,)) for k, v in changed.items()]
                if isinstance(upsert.apply(commands, now + 1, expected_lower=upper), Appended):
                    return len(changed)
                lost += 1
                if time.monotonic() > deadline:
                    raise Determinate(
                        f"could not write {list(what)} to the catalog: other writers' appends "
                        f"landed first {lost} times in {RETRY_FOR_S:.0f} s; nothing was written"
                    )
                time.sleep(random.uniform(0, backoff))  # apart from the writers that won
                backoff = min(backoff * 2, 1.0)
        finally:
            if upsert is not None:  # its writer and reader would linger until their leases end
                upsert.close()

    def _stored(self) -> tuple[list[CatalogEntry], int]:
        """The stored entries, and the upper they were read below; rows that do not decode
        count as absent (they get replaced)."""
        rows, upper = _catalog_read(self._client)
        out = []
        for row in rows:
            try:
                out.append(CatalogEntry.from_row(row))
            except CorruptState:
                continue
        return out, upper


# -- views ---------------------------------------------------------------------------------


#: View definition fields derived from the definition: a change to them alone is no new view.
_DERIVED = ("as_of", "path", "path_reason")
#: What an entry recorded before a view's session settings were recorded lacks.
_UNRECORDED = (*_DERIVED, "session")


def view_entry(
    definition: ViewDefinition,
    as_of: int,
    classification: Classification | None = None,
    session: Mapping[str, str] | None = None,
) -> CatalogEntry:
    """The catalog entry of a view installed at ``as_of``, on ``classification``'s path,
    evaluated with the ``session`` settings that decide its content (``view.QUERY_SETTINGS``:
    ``timeshard explain`` classifies it with them).

    Without a classification the entry records no path; without a session, none.
    """
    function = definition.function
    name = None
    if function is not None:
        module = getattr(function, "__module__", None) or "?"
        name = f"{module}:{getattr(function, '__qualname__', type(function).__name__)}"
    inputs = sorted(set(definition.inputs.values()))
    path: dict[str, str] = {}
    if classification is not None:
        path = {"path": classification.path, "path_reason": classification.reason}
    return CatalogEntry(
        definition.name,
        "view",
        {
            "inputs": dict(sorted(definition.inputs.items())),
            "sql": definition.sql,
            "function": name,
            "refresh_every_ms": definition.refresh_every_ms,
            "retain_history_ms": definition.retain_history_ms,
            "holds": {shard: view_hold_id(definition.name) for shard in inputs},
            "as_of": as_of,
            **path,
            **({} if session is None else {"session": dict(sorted(session.items()))}),
        },
    )


def _without(definition: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    return {k: v for k, v in definition.items() if k not in keys}


def _same_view(old: CatalogEntry, new: CatalogEntry) -> bool:
    """Equal but for ``as_of``: an unchanged view has been correct since its first as_of."""
    return _without(old.definition, ("as_of",)) == _without(new.definition, ("as_of",))


def stored_entry(
    client: PersistClient,
    name: str,
    kind: str,
    catalog: Sequence[CatalogEntry] | None = None,
) -> CatalogEntry | None:
    """The stored entry of ``(name, kind)``, None if absent or if it does not decode.

    With ``catalog`` (the entries :func:`read_catalog` read), it is looked up there, and
    the catalog is not read again.
    """
    if catalog is not None:
        return next((e for e in catalog if e.name == name and e.kind == kind), None)
    for row in catalog_rows(client):
        if row.get("name") == name and row.get("kind") == kind:
            try:
                return CatalogEntry.from_row(row)
            except CorruptState:
                return None
    return None


def record_view(
    client: PersistClient,
    definition: ViewDefinition,
    as_of: int,
    classification: Classification | None = None,
    session: Mapping[str, str] | None = None,
) -> int:
    """Record a view and, if given, its path and session settings (idempotent); return 1
    if the catalog changed.

    A view whose stored entry differs only in its path keeps its stored
    ``as_of`` (invariant 1). A view whose stored definition differs is correct
    from its shard's upper on, not before (where the shard holds the stored
    definition's result): its ``as_of`` is at least that upper. A view
    redefined to read other inputs first releases its holds
    (:func:`~timeshard.persist.holds.view_hold_id`) on the inputs the stored
    definition holds and the new one does not read: they
    may compact as if the view never read them. (Released before the record:
    a record that fails is made again by the next install, which releases
    again, idempotently.)
    """
    entry = view_entry(definition, as_of, classification, session)
    stored = stored_entry(client, definition.name, "view")
    if stored is not None:
        _release_unread(client, stored, entry)
    # A session is part of the definition (another ANSI setting, other content), but an
    # entry recorded before sessions were is not taken for another definition.
    derived = _DERIVED if stored is None or "session" in stored.definition else _UNRECORDED
    same = stored is not None and (
        _without(stored.definition, derived) == _without(entry.definition, derived)
    )
    if stored is not None and same and isinstance(stored.definition.get("as_of"), int):
        kept = {**entry.definition, "as_of": stored.definition["as_of"]}
        entry = CatalogEntry(entry.name, entry.kind, kept)
    elif stored is not None and not same and definition.name in client.list_shards():
        # Below its upper, the shard holds the stored definition's result: the new one's
        # corrections land at the upper, so the view is the new query from there on.
        upper = client.state(definition.name).upper.time
        if upper is not None and upper > as_of:
            entry = view_entry(definition, upper, classification, session)
    return Catalog(client).record([entry], same=_same_view)


def _release_unread(client: PersistClient, stored: CatalogEntry, entry: CatalogEntry) -> None:
    """Drop the holds ``stored`` records on the shards ``entry`` holds none of."""
    holds = stored.definition.get("holds")
    if not isinstance(holds, Mapping):
        return
    kept = entry.definition["holds"]
    gone = [(s, h) for s, h in holds.items() if s not in kept and isinstance(h, str)]
    if not gone:
        return
    shards = set(client.list_shards())
    for shard, hold in gone:
        if shard in shards:
            client.drop_critical_since(shard, hold)


# -- sources -------------------------------------------------------------------------------


def source_kind(source: Any) -> str:
    """The catalog's name for the kind of ``source``, or ``other`` (module doc)."""
    from timeshard.storage.file_source import FileSource
    from timeshard.storage.kafka_source import KafkaSource
    from timeshard.storage.mysql_source import MySqlSource
    from timeshard.storage.postgres_source import PostgresSource
    from timeshard.storage.sources import AuctionGenerator, CounterGenerator, KeyValueGenerator
    from timeshard.storage.tpch import TpchGenerator

    kinds: list[tuple[type, str]] = [
        (KeyValueGenerator, "key_value"),
        (CounterGenerator, "counter"),
        (AuctionGenerator, "auction"),
        (TpchGenerator, "tpch"),
        (FileSource, "file"),
        (KafkaSource, "kafka"),
        (PostgresSource, "postgres"),
        (MySqlSource, "mysql"),
    ]
    for cls, kind in kinds:
        if isinstance(source, cls):
            return kind
    return "other"


def source_options(source: Any) -> dict[str, Any]:
    """A source's declarative options (empty if it has none we know how to state)."""
    from timeshard.storage.file_source import FileSource
    from timeshard.storage.kafka_source import KafkaSource
    from timeshard.storage.mysql_source import MySqlSource
    from timeshard.storage.postgres_source import PostgresSource
    from timeshard.storage.schema_registry import without_userinfo

    if isinstance(source, MySqlSource):
        server = source.server
        user, database = quote(server.user, safe=""), quote(server.database, safe="")
        return {
            "name": source.name,
            "url": f"mysql://{user}@{server.host}:{server.port}/{database}",  # no password
            "tables": [t.name for t in source.tables],
            "table_columns": source.recorded_columns(),
        }
    if isinstance(source, PostgresSource):
        return {
            "name": source.name,
            "dsn": _without_password(source.dsn),
            "publication": source.publication,
            "slot": source.slot,
            "tables": [t.sub for t in source.tables],
            "table_oids": {t.sub: t.oid for t in source.tables},
            "table_columns": source.recorded_columns(),
        }
    if isinstance(source, KafkaSource):
        return {
            "name": source.name,
            "bootstrap_servers": source.bootstrap_servers,
            "topic": source.topic,
            "value_format": source.value_format,
            "value_columns": _columns(source.value_schema),
            "key_format": source.key_format,
            "key_columns": _columns(source.key_schema),
            "metadata": list(source.metadata),
            "group_id": source.group_id,
            "value_avro_schema": source.value_avro_schema,
            "key_avro_schema": source.key_avro_schema,
            "schema_registry_url": (
                None
                if source.schema_registry_url is None
                else without_userinfo(source.schema_registry_url)
            ),
            "avro_schemas": (
                None
                if source.avro_schemas is None
                else {str(i): schema for i, schema in sorted(source.avro_schemas.items())}
            ),
            "topic_id": source.topic_id,
        }

    if isinstance(source, FileSource):
        return {
            "name": source.name,
            "path": str(source.path),
            "format": source.format,
            "columns": [[f.name, str(f.type)] for f in source.schema],
            "avro_schema": source.avro_schema,
            "max_line_bytes": source.max_line_bytes,
        }
    if source_kind(source) != "other" and dataclasses.is_dataclass(source):
        return {
            f.name: getattr(source, f.name)
            for f in dataclasses.fields(source)
            if f.name != "ticks"  # progress, not declaration
        }
    return {}


def _without_password(dsn: str) -> str:
    """``dsn`` with no password (a catalog is readable by all; libpq takes it from PGPASSWORD)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(dsn)
    params.pop("password", None)
    return make_conninfo("", **params)


def _columns(schema: Any) -> list[list[str]]:
    return [[f.name, str(f.type)] for f in schema]


def source_entries(
    output: str,
    source: Any,
    envelopes: Mapping[str, tuple[str, Sequence[str]]],
    exports: Mapping[str, str],
) -> list[CatalogEntry]:
    """The entries of an ingestion: its source and one per export.

    ``exports`` maps a subsource (``""`` for a single output) to its shard;
    ``envelopes`` maps a subsource to ``(envelope, key_columns)`` (NONE if
    absent), as :class:`~timeshard.storage.ingest.Ingestion` takes them.
    """
    kind = source_kind(source)
    definition: dict[str, Any] = {
        "source_kind": kind,
        "options": source_options(source),
        "remap": f"{output}.remap",
        "exports": {},
    }
    if kind == "other":
        definition["class"] = f"{type(source).__module__}:{type(source).__qualname__}"
    entries = []
    for sub, shard in sorted(exports.items()):
        envelope, keys = envelopes.get(sub, ("none", ()))
        export = {"subsource": sub, "envelope": envelope, "key_columns": list(keys)}
        definition["exports"][shard] = export
        entries.append(CatalogEntry(shard, "export", {"source": output, **export}))
    return [CatalogEntry(output, "source", definition), *entries]


#: The options that decide what a source's offsets mean, by source kind: the record a
#: bound offset stands for. Another value under bindings already minted would resume at
#: offsets that mean other records (lost, or read twice); :func:`check_redeclared`
#: refuses it. The other options (a generator's ``rate`` or ``tick_orders``, timeouts,
#: consumer groups, addresses of one server) may change between runs, and a change of
#: the columns is refused by the output shard's schema.
OFFSET_OPTIONS: dict[str, tuple[str, ...]] = {
    "key_value": ("keys", "value_size", "partitions", "seed", "deletes"),
    "counter": ("max_cardinality",),
    "auction": ("users", "organizations", "seed"),
    "tpch": ("scale_factor", "seed"),
    "file": ("path", "format", "avro_schema"),
    "kafka": ("topic",),
    "postgres": ("publication", "slot"),
    "mysql": ("database",),
}


def check_redeclared(
    client: PersistClient,
    output: str,
    source: Any,
    envelopes: Mapping[str, tuple[str, Sequence[str]]] | None = None,
    *,
    catalog: Sequence[CatalogEntry] | None = None,
) -> None:
    """Refuse ``source`` if it declares ``output`` again with offsets that mean other records,
    or with another envelope over an output it wrote. With ``catalog`` (the entries
    :func:`read_catalog` read), the recorded source is looked up there.

    Offsets: only once the recorded source has bindings (its remap shard's
    upper is past 0): they bind offsets of the recorded options. InvalidUsage
    names the option (or the kind, or the class of an ``other`` source), the
    recorded value and the new one. Like a Postgres source's recorded OIDs,
    what was recorded holds; a recorded entry without an option (recorded
    before it was) does not pin it.

    Envelopes: ``envelopes`` maps a subsource to ``(envelope, key_columns)``
    (NONE where absent, as :class:`~timeshard.storage.ingest.Ingestion` takes
    them). An output shard written already (its upper past 0) keeps its
    recorded envelope, and an UPSERT one its key columns (in any order): its
    rows are of that envelope, and the other would mix rows of two in one
    shard (the feedback upsert derives its state from the shard).
    """
    stored = stored_entry(client, output, "source", catalog)
    if stored is None:
        return
    _check_envelopes(client, output, stored, envelopes or {})
    remap = stored.definition.get("remap", f"{output}.remap")
    if not isinstance(remap, str) or remap not in client.list_shards():
        return
    if client.state(remap).upper.time == 0:
        return
    old_kind, kind = stored.definition.get("source_kind"), source_kind(source)
    changed: tuple[str, Any, Any] | None = None
    if old_kind != kind:
        changed = ("kind", old_kind, kind)
    elif kind == "other" and stored.definition.get("class") is not None:
        cls = f"{type(source).__module__}:{type(source).__qualname__}"
        if stored.definition["class"] != cls:
            changed = ("class", stored.definition["class"], cls)
    else:
        recorded = stored.definition.get("options")
        old = _offset_options(kind, recorded if isinstance(recorded, Mapping) else {})
        new = _offset_options(kind, json.loads(json.dumps(source_options(source))))
        changed = next(((k, old[k], new.get(k)) for k in old if old[k] != new.get(k)), None)
    if changed is not None:
        option, was, now = changed
        raise InvalidUsage(
            f"source {output!r} was declared with {option} {was!r}, and its offsets are bound "
            f"(in {remap!r}) as offsets of that; declared again with {option} {now!r}, it would "
            "resume at offsets that mean other records (lost or read twice): keep "
            f"{option} {was!r}, or declare a source of another name"
        )


def _check_envelopes(
    client: PersistClient,
    output: str,
    stored: CatalogEntry,
    envelopes: Mapping[str, tuple[str, Sequence[str]]],
) -> None:
    """:func:`check_redeclared`'s envelopes: InvalidUsage names the output, the recorded
    envelope and key columns and the new ones."""
    exports = stored.definition.get("exports")
    if not isinstance(exports, Mapping):
        return
    shards: list[str] | None = None
    for shard, export in sorted(exports.items()):
        if not isinstance(export, Mapping) or not isinstance(export.get("envelope"), str):
            continue  # recorded before envelopes were: nothing pins it
        sub = export.get("subsource", "")
        was = (export["envelope"], sorted(export.get("key_columns") or []))
        envelope, keys = envelopes.get(sub if isinstance(sub, str) else "", ("none", ()))
        now = (envelope, sorted(keys))
        if now == was:
            continue
        if shards is None:
            shards = client.list_shards()
        if shard not in shards:
            continue
        upper = client.state(shard).upper.time
        if upper is None or upper == 0:  # unwritten (nothing to mix), or closed (refused later)
            continue
        raise InvalidUsage(
            f"source {output!r}: its output {shard!r} holds rows of {_envelope_text(*was)}; "
            f"declared again with {_envelope_text(envelope, list(keys))}, it would mix rows "
            f"of two envelopes in one shard: keep {_envelope_text(*was)}, or declare a "
            "source of another name"
        )


def _envelope_text(envelope: str, keys: Sequence[str]) -> str:
    return f"envelope {envelope!r}" + (f" key_columns {list(keys)}" if keys else "")


def _offset_options(kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options of :data:`OFFSET_OPTIONS` that ``options`` (as recorded) holds."""
    if kind == "mysql" and isinstance(options.get("url"), str):
        from urllib.parse import unquote, urlsplit

        options = {"database": unquote(urlsplit(options["url"]).path.lstrip("/"))}
    return {k: options[k] for k in OFFSET_OPTIONS.get(kind, ()) if k in options}


def record_source(
    client: PersistClient,
    output: str,
    source: Any,
    envelopes: Mapping[str, tuple[str, Sequence[str]]],
    exports: Mapping[str, str],
) -> int:
    """Record an ingestion's source and exports (idempotent); return how many changed.

    A KAFKA source is asked for its topic's id first, if none is recorded
    (:meth:`~timeshard.storage.kafka_source.KafkaSource.find_topic_id`): so the
    id is recorded before the source binds offsets, and a restart compares with it.
    The entries replace the stored ones as they are: an ``Ingestion`` records through
    its own compare-and-set instead, which never replaces a recorded topic id.
    """
    from timeshard.storage.kafka_source import KafkaSource

    if isinstance(source, KafkaSource):
        source.find_topic_id()
    return Catalog(client).record(source_entries(output, source, envelopes, exports))


__all__ = [
    "CATALOG_KEYS",
    "CATALOG_SCHEMA",
    "CATALOG_SHARD",
    "KINDS",
    "Catalog",
    "CatalogEntry",
    "OFFSET_OPTIONS",
    "catalog_rows",
    "check_redeclared",
    "read_catalog",
    "record_source",
    "record_view",
    "source_entries",
    "source_kind",
    "source_options",
    "stored_entry",
    "view_entry",
]
