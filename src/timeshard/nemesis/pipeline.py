"""The nemesis pipeline: what every replica runs, and the input the runner writes for it.

:func:`pipeline_spec` declares a KEY VALUE source and a FILE source of JSON
lines, both with the UPSERT envelope, and a view over each, all retaining
their history for the whole run (so that verify compares them at times
sampled across it). It is small on purpose: every replica runs all of it on
one core, and a tick costs a few Spark jobs per object whatever the data.

The FILE source's input: an :class:`InputWriter` adds a file of
:func:`input_lines` every :data:`INPUT_EVERY_S` (written whole: a rename) --
upserts, deletes (``{"id": k}``: every value column null) and a few
undecodable lines (err rows), seeded by the run. :func:`unread_input` names
the files that the source's last binding does not cover yet.

Runs in the runner's process: the runner writes the spec to the run
directory as JSON, and each replica process builds its Spark pipeline from
it (:mod:`timeshard.nemesis.replica`).
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from timeshard.persist import PersistClient
from timeshard.spec import LocationSpec, RunSpec, SourceSpec, ViewSpec

INPUT_EVERY_S = 1.5
INPUT_LINES = 12
#: The pipeline's retained history: the whole run, so that verify compares the views and
#: the upsert at times sampled across it. (A clean stop moves every hold to the last time:
#: without it, verify's window was often that one time.)
RETAINED = "1h"
INPUT_KEYS = 40

KV_BY_PREFIX = "SELECT substr(value, 1, 1) AS p, count(*) AS n FROM kv GROUP BY p"
EVENTS_BY_GRP = "SELECT grp, count(*) AS n, sum(v) AS s FROM events GROUP BY grp"


def pipeline_spec(blob_uri: str, consensus_uri: str, events_dir: Path) -> RunSpec:
    """The pipeline every replica runs (see the module doc)."""
    return RunSpec(
        location=LocationSpec(blob=blob_uri, consensus=consensus_uri),
        source=[
            SourceSpec(
                name="kv",
                kind="key_value",
                envelope="upsert",
                key_columns=["key"],
                options={"keys": 100, "value_size": 8, "rate": 10, "partitions": 2},
                retain_history=RETAINED,
            ),
            SourceSpec(
                name="events",
                kind="file",
                envelope="upsert",
                key_columns=["id"],
                options={"path": str(events_dir), "format": "json"},
                columns={"id": "int64", "grp": "string", "v": "int64"},
                retain_history=RETAINED,
            ),
        ],
        view=[
            ViewSpec(
                name="kv_by_prefix",
                inputs={"kv": "kv"},
                sql=KV_BY_PREFIX,
                retain_history=RETAINED,
            ),
            ViewSpec(
                name="events_by_grp",
                inputs={"events": "events"},
                sql=EVENTS_BY_GRP,
                retain_history=RETAINED,
            ),
        ],
    )


def input_lines(rng: random.Random, n: int) -> list[str]:
    """``n`` lines for the FILE source: upserts, about 10% deletes and 3% undecodable lines."""
    lines = []
    for _ in range(n):
        key = rng.randrange(INPUT_KEYS)
        roll = rng.random()
        if roll < 0.03:
            lines.append('{"id": ' + str(key) + ', "v": "not a number"')
        elif roll < 0.13:
            lines.append(json.dumps({"id": key}))
        else:
            lines.append(json.dumps({"id": key, "grp": f"g{key % 5}", "v": rng.randrange(1000)}))
    return lines


class InputWriter:
    """New files for the FILE source, every ``INPUT_EVERY_S``, written whole (rename)."""

    def __init__(self, directory: Path, rng: random.Random) -> None:
        self.directory = directory
        self.rng = rng
        self.files = 0
        self.last = 0.0

    def write(self) -> None:
        tmp = self.directory.parent / "events.tmp"
        tmp.write_text("\n".join(input_lines(self.rng, INPUT_LINES)) + "\n")
        os.replace(tmp, self.directory / f"part-{self.files:05d}.jsonl")
        self.files += 1
        self.last = time.monotonic()

    def maybe_write(self) -> None:
        if time.monotonic() - self.last >= INPUT_EVERY_S:
            self.write()


def unread_input(client: PersistClient, source: str, directory: Path) -> dict[str, str]:
    """The files of ``directory`` that FILE ``source``'s latest binding does not cover to
    their end: name to ``"bound/size"`` bytes.

    After the recovery every file was written before the source's last tick,
    so its last binding must cover them all. Verify cannot tell: it reads
    each file up to what the bindings name.
    """
    from timeshard.verify.replay import frontier_at, remap_bindings

    reader = client.open_unleased_reader(f"{source}.remap")
    upper = reader.state().upper.time
    last = (upper if upper is not None else 2**63) - 1
    bound = frontier_at(remap_bindings(client, reader, last), last)
    out = {}
    for f in sorted(p for p in directory.iterdir() if p.is_file()):
        size = f.stat().st_size
        if bound.get(f.name, 0) < size:
            out[f.name] = f"{bound.get(f.name, 0)}/{size}"
    return out


__all__ = [
    "InputWriter",
    "input_lines",
    "pipeline_spec",
    "unread_input",
]
