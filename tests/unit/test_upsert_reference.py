"""The Python feedback upsert keeps the Spark upsert's semantics (:mod:`~.upsert_spark`).

* Key columns anywhere in the schema: a row read back from the shard and the
  same row of a command compare equal (a key after a value column made them
  unequal, and an update to the same row wrote a retraction and an insertion
  that cancel out).
* An unkeyed err command (``error`` set, every key column null: a record that
  did not decode far enough to have a key) is an err row of its own, never
  retracted, and takes no part in the null key's commands -- as in the Spark
  upsert and the verifier (:mod:`timeshard.verify.replay`). The Python upsert
  made it the null key's err row: it outranked or retracted the null key's
  value, and a later command of the null key retracted it.
* The same random commands against the model of ``test_upsert_model_spark``:
  composite nullable keys after value columns, keyed and unkeyed errors.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient, PersistConfig, ReadHandle
from timeshard.storage import FeedbackUpsert, UpsertCommand

# The Spark model test's schema: the key columns are not the first ones.
SCHEMA = pa.schema([("k1", pa.string()), ("v", pa.int64()), ("k2", pa.int64()), ("w", pa.string())])
KEYS = ["k1", "k2"]


def new_client() -> PersistClient:
    return PersistClient(Location(MemoryBlob(), MemoryConsensus()), PersistConfig(backoff_ms=0.0))


def recording(upsert: FeedbackUpsert, monkeypatch: pytest.MonkeyPatch) -> list[pa.Table]:
    """The tables ``upsert`` appends from now on."""
    written: list[pa.Table] = []
    append = upsert._writer.compare_and_append

    def recorded(updates: pa.Table, lower: int, upper: int) -> Any:
        written.append(updates)
        return append(updates, lower, upper)

    monkeypatch.setattr(upsert._writer, "compare_and_append", recorded)
    return written


@pytest.mark.parametrize(
    ("schema", "keys"),
    [
        (pa.schema([("v", pa.int64()), ("k", pa.string())]), ["k"]),
        (SCHEMA, KEYS),
    ],
)
def test_an_unchanged_row_writes_nothing_wherever_the_key_columns_are(
    schema: pa.Schema, keys: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    values = [n for n in schema.names if n not in keys]
    key = ("a",) if len(keys) == 1 else ("a", 1)
    value = (1,) if len(values) == 1 else (1, "x")
    upsert = FeedbackUpsert(new_client(), "out", schema, keys)
    upsert.apply([UpsertCommand(key, value, 0, (0,))], 1)
    written = recording(upsert, monkeypatch)
    upsert.apply([UpsertCommand(key, value, 1, (1,))], 2)
    assert [t.to_pylist() for t in written] == [[]]


def unkeyed(time: int, order: int) -> UpsertCommand:
    return UpsertCommand((None, None), None, time, (order,), error=f"bad @{order}")


def keyed(key: tuple[Any, Any], value: tuple[Any, Any] | None, time: int, order: int) -> Any:
    return UpsertCommand(key, value, time, (order,))


def content(hold: ReadHandle, at: int) -> Counter[tuple[Any, ...]]:
    """The output at ``at`` (``hold`` holds the since at 0)."""
    rows = hold.snapshot(at).to_pylist()
    out: Counter[tuple[Any, ...]] = Counter()
    for r in rows:
        out[(r["k1"], r["k2"], r["v"], r["w"], r["_err"])] += r["_diff"]
    return out


def test_an_unkeyed_error_is_an_err_row_of_its_own() -> None:
    client = new_client()
    hold = client.open_leased_reader("out", SCHEMA)
    upsert = FeedbackUpsert(client, "out", SCHEMA, KEYS)
    null = (None, None)
    # One time: the null key's value and, later in the source, two unkeyed errors.
    upsert.apply([keyed(null, (1, "x"), 0, 0), unkeyed(0, 1), unkeyed(0, 2)], 1)
    errors = Counter({(None, None, None, None, "bad @1"): 1, (None, None, None, None, "bad @2"): 1})
    assert content(hold, 0) == errors + Counter({(None, None, 1, "x", None): 1})
    # The null key changes and is deleted: the unkeyed errors stay.
    upsert.apply([keyed(null, (2, "y"), 1, 3)], 2)
    assert content(hold, 1) == errors + Counter({(None, None, 2, "y", None): 1})
    upsert.apply([keyed(null, None, 2, 4), unkeyed(2, 5)], 3)
    assert content(hold, 2) == errors + Counter({(None, None, None, None, "bad @5"): 1})
    # A restarted instance reads the null key's row apart from the unkeyed errors.
    upsert.close()
    again = FeedbackUpsert(client, "out", SCHEMA, KEYS)
    again.apply([keyed(null, (3, "z"), 3, 6)], 4)
    assert content(hold, 3) == errors + Counter(
        {(None, None, None, None, "bad @5"): 1, (None, None, 3, "z", None): 1}
    )
    again.close()


def random_commands(rng: random.Random, n: int) -> list[UpsertCommand]:
    """The commands of ``test_upsert_model_spark.random_commands``, as UpsertCommands."""
    out, t = [], 0
    for offset in range(n):
        t += rng.choice([0, 0, 0, 1, 2])
        kind = rng.choice(["value", "value", "value", "delete", "error", "unkeyed"])
        key = (rng.choice(["a", "b", None]), rng.choice([1, 2, None]))
        if kind == "unkeyed":
            out.append(unkeyed(t, offset))
        elif kind == "error":
            out.append(UpsertCommand(key, None, t, (offset,), error=f"bad @{offset}"))
        elif kind == "delete":
            out.append(keyed(key, None, t, offset))
        else:
            value = (rng.choice([0, 1, None]), rng.choice(["x", "y"]))
            out.append(keyed(key, value, t, offset))
    rng.shuffle(out)
    return out


def model(cmds: list[UpsertCommand], at: int) -> Counter[tuple[Any, ...]]:
    keyed_rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    errors: Counter[tuple[Any, ...]] = Counter()
    for c in sorted((c for c in cmds if c.time <= at), key=lambda c: (c.time, c.order)):
        if c.error is not None and c.key == (None, None):
            errors[(None, None, None, None, c.error)] += 1
        elif c.error is not None:
            keyed_rows[c.key] = (*c.key, None, None, c.error)
        elif c.value is None:
            keyed_rows.pop(c.key, None)
        else:
            keyed_rows[c.key] = (*c.key, *c.value, None)
    return errors + Counter(keyed_rows.values())


@pytest.mark.parametrize("seed", range(4))
def test_composite_null_keys_and_errors_match_the_spark_upserts_model(seed: int) -> None:
    rng = random.Random(seed)
    cmds = random_commands(rng, 60)
    final_upper = max(c.time for c in cmds) + 1
    client = new_client()
    hold = client.open_leased_reader("out", SCHEMA)
    instances = [FeedbackUpsert(client, "out", SCHEMA, KEYS) for _ in range(2)]
    upper = 0
    while client.state("out").upper.time != final_upper:
        upper = min(final_upper, upper + rng.randint(1, 3))
        who = rng.randrange(2)
        if rng.random() < 0.2:
            instances[who].close()
            instances[who] = FeedbackUpsert(client, "out", SCHEMA, KEYS)
        for i in (who, 1 - who):
            instances[i].apply(cmds, upper)
    for at in range(final_upper):
        assert content(hold, at) == model(cmds, at), at
    for instance in instances:
        instance.close()
