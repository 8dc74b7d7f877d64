"""The bytewax peer: W1 (KEY VALUE upsert) and W2 (auction views) as bytewax dataflows.

Runs in its own virtual environment, ``bench/.venvs/bytewax/`` (created and
filled with :data:`REQUIREMENTS` on first use), as a child process: this file
is both the module the benchmarks import (:func:`run`, main ``.venv``) and
the program the child runs (``__main__``, the peer's venv, which has no
timeshard, rich or Spark; it uses ``inputs.py`` and ``report.py`` of this
package, which need only pyarrow).

The child releases the input batches itself (``inputs.Releaser``: batch 0
at once, batch ``i >= 1`` on the shared schedule, which starts when batch 0
is visible) into a directory its source watches, and writes the result
document of ``report.py``.

W1 dataflow (one worker, recovery on)::

    watched dir ──> BatchSource ──(str(key), command)──> stateful_map "views": upsert
    batch-*.parquet   (state: next batch, row)           (state: (value, offset))
                                                                 │
                                                  (key, (batch, change lines))
                                                                 v
                                     ChangeSink: output/changes.jsonl (fsync per write,
                                     truncated to its snapshotted offset on resume)

``upsert`` keeps the latest value per key (by offset): a new value emits a
retraction of the old one and an insertion, a delete (null value) drops the
state and emits the retraction. Change lines are JSON
``{"key": k, "value": v, "diff": ±1}``.

W2 dataflow: the auctions and bids of each batch merged by offset (an
auction before the bids of its offset) into one ``stateful_map`` keyed by
``"u:<buyer>"`` (bids per user: their number and sum) and ``"a:<auction>"``
(max bid of an open auction: it opens with its row and is open while the
stream's position, ``max(auctions.id)``, is below its ``end_offset``; the
source emits the close, keeping the pending closes in its snapshot). Lines
``{"view": ..., "key": k, "value": v, "diff": ±1}``.

Recovery: bytewax's SQLite recovery partitions (``init_db_dir(db, 1)`` then
``RecoveryConfig(db)``), snapshotted at the end of every epoch
(``epoch_interval``, default 1 s): the source its position, the sink its
byte offset, ``stateful_map`` its state per key.

Per batch: ``available`` (released), ``start`` (the source opens its
files), ``end`` = ``visible`` (every item the source emitted for it has had
its changes written and fsynced, and so have all earlier batches);
``step`` = the batch index (bytewax has no ticks). ``disk_bytes``: the
recovery store plus the output. At the end the output, consolidated, is
checked against a recomputation from the input (:func:`reference`): W1
puts the live key count in ``totals.final_rows``, W2 the figures of
``bench_w2_views.view_checks`` in ``totals.checks``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
VENV = ROOT / "bench" / ".venvs" / "bytewax"
REQUIREMENTS = ["bytewax==0.21.1", "pyarrow", "psutil"]
CHUNK = 5000
"""Input rows handed to bytewax per ``next_batch`` call."""

if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))


# -- parent side (the main .venv) ---------------------------------------------------------------


def ensure_venv(venv: Path = VENV, requirements: list[str] = REQUIREMENTS) -> Path:
    """The venv's python, after creating the venv and installing ``requirements`` if needed."""
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not stamp.exists() or stamp.read_text() != " ".join(requirements):
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
        stamp.write_text(" ".join(requirements))
    return python


def run(workload: str, input_dir: Path, out_json: Path, **opts: Any) -> None:
    """Run bytewax on ``workload`` over the input in ``input_dir``; write ``out_json``.

    ``opts``: ``interval`` (seconds between batch releases, default 1),
    ``batches`` (the last batch index to process, default all), ``budget_s``
    (no batch is started later than this after the schedule started,
    default 600), ``epoch_interval`` (seconds, default 1), ``timeout_s``
    (default ``budget_s + 600``), ``work_dir`` (kept if given; by default a
    directory next to ``out_json``, removed afterwards). Other options are ignored.
    """
    import report

    python = ensure_venv()
    out_json = Path(out_json)
    work = Path(opts.get("work_dir") or out_json.with_suffix(".work"))
    cmd = [
        str(python),
        str(HERE),
        "--workload",
        workload,
        "--input",
        str(input_dir),
        "--out",
        str(out_json),
        "--work",
        str(work),
        *child_options(opts),
        "--epoch-interval",
        str(float(opts.get("epoch_interval", 1.0))),
    ]
    timeout = float(opts.get("timeout_s") or float(opts.get("budget_s") or 600) + 600)
    report.run_child(cmd, out_json, timeout, "bytewax", workload)
    if not opts.get("work_dir"):
        shutil.rmtree(work, ignore_errors=True)


def child_options(opts: dict[str, Any]) -> list[str]:
    """The schedule options of :func:`run` as command-line arguments of a child."""
    out = ["--interval", str(float(opts.get("interval") or 1.0))]
    out += ["--budget-s", str(float(opts.get("budget_s") or 600.0))]
    if opts.get("batches") is not None:
        out += ["--batches", str(int(opts["batches"]))]
    return out


# -- child side (the peer's venv) ---------------------------------------------------------------


class Progress:
    """Which batches have been read, and which have all their changes on disk.

    The source calls :meth:`started` when it opens batch ``b``, counts items
    with :meth:`emitted` and calls :meth:`ended` after the last one; the sink
    calls :meth:`written` with the number of items of each batch it wrote.
    Batch ``b`` is visible once it has ended, every item emitted for it was
    written, and batch ``b - 1`` is visible. ``on_visible(b)`` is called then.
    """

    def __init__(self, batches: int, on_visible: Callable[[int], None]) -> None:
        self.start: list[float | None] = [None] * batches
        self.visible: list[float | None] = [None] * batches
        self.emitted_items = [0] * batches
        self.written_items = [0] * batches
        self.ended_batches = [False] * batches
        self.next_incomplete = 0
        self.resumed_below = 0
        self.on_visible = on_visible
        self._lock = threading.Lock()

    def resume_at(self, b: int) -> None:
        """Batches below ``b`` were done before a restart: count them as visible."""
        with self._lock:
            self.resumed_below = self.next_incomplete = b

    def started(self, b: int) -> None:
        with self._lock:
            if self.start[b] is None:
                self.start[b] = time.time()

    def emitted(self, b: int, items: int) -> None:
        with self._lock:
            self.emitted_items[b] += items

    def ended(self, b: int) -> None:
        with self._lock:
            self.ended_batches[b] = True
            self._advance(time.time())

    def written(self, counts: dict[int, int], now: float) -> None:
        with self._lock:
            for b, n in counts.items():
                self.written_items[b] += n
            self._advance(now)

    def _advance(self, now: float) -> None:
        b = self.next_incomplete
        while (
            b < len(self.visible)
            and self.ended_batches[b]
            and self.written_items[b] >= self.emitted_items[b]
        ):
            self.visible[b] = now
            self.next_incomplete = b = b + 1
            self.on_visible(b - 1)


def change(key: Any, value: Any, diff: int, view: str | None = None) -> str:
    doc = {"key": key, "value": value, "diff": diff}
    return json.dumps(doc if view is None else {"view": view, **doc}) + "\n"


def upsert(state: tuple[str, int] | None, cmd: tuple[int, int, str | None, int]) -> Any:
    """W1 ``stateful_map`` logic: the latest value per key by offset."""
    b, key, value, offset = cmd
    if state is not None and offset < state[1]:
        return state, (b, "")
    out = ""
    if state is not None:
        if state[0] == value:
            return (value, offset), (b, "")
        out = change(key, state[0], -1)
    if value is None:
        return None, (b, out)
    return (value, offset), (b, out + change(key, value, 1))


def auction_views(state: Any, cmd: tuple[int, str, int, int]) -> Any:
    """W2 ``stateful_map`` logic, by command kind.

    ``("bid_by", buyer, amount)``: one more bid of ``buyer`` (state and value
    ``[count, total]``). ``("open", id, _)``: open an auction (state
    ``[None]``, no bid yet). ``("bid_on", id, amount)``: raise the open
    auction's max. ``("close", id, _)``: drop it.
    """
    b, kind, key, amount = cmd
    if kind == "bid_by":
        new = [1, amount] if state is None else [state[0] + 1, state[1] + amount]
        out = "" if state is None else change(key, state, -1, "bids_per_user")
        return new, (b, out + change(key, new, 1, "bids_per_user"))
    if kind == "open":
        return [None], (b, "")
    if state is None:  # a bid on, or the close of, an auction that is not open
        return None, (b, "")
    best = state[0]
    if kind == "close":
        return None, (b, "" if best is None else change(key, best, -1, "max_bid"))
    if best is not None and amount <= best:
        return state, (b, "")
    out = "" if best is None else change(key, best, -1, "max_bid")
    return [amount], (b, out + change(key, amount, 1, "max_bid"))


def w1_items(tables: dict[str, Any], lo: int, hi: int, pending: list[Any]) -> list[Any]:
    cols = tables["commands"]
    keys, values, offsets = cols["key"][lo:hi], cols["value"][lo:hi], cols["offset"][lo:hi]
    return [(str(k), (k, v, o)) for k, v, o in zip(keys, values, offsets, strict=True)]


def w2_merge(tables: dict[str, Any]) -> dict[str, list[Any]]:
    """The auctions and bids of a batch as one list of events in offset order."""
    auctions, bids = tables["auctions"], tables["bids"]
    events = [
        (o, 0, i, e)
        for o, i, e in zip(auctions["offset"], auctions["id"], auctions["end_offset"], strict=True)
    ] + [
        (o, 1, a, (u, m))
        for o, u, a, m in zip(
            bids["offset"], bids["buyer"], bids["auction_id"], bids["amount"], strict=True
        )
    ]
    events.sort(key=lambda e: (e[0], e[1]))
    return {"events": events}


def w2_items(tables: dict[str, Any], lo: int, hi: int, pending: list[Any]) -> list[Any]:
    """Commands for events ``[lo, hi)``.

    At offset ``o`` (the stream's position, ``max(auctions.id)``, is then
    ``o``) every auction with ``end_offset <= o`` closes first.
    """
    out: list[Any] = []
    for offset, is_bid, ident, payload in tables["events"][lo:hi]:
        while pending and pending[0][0] <= offset:
            _, closed = heapq.heappop(pending)
            out.append((f"a:{closed}", ("close", closed, 0)))
        if is_bid:
            buyer, amount = payload
            out.append((f"u:{buyer}", ("bid_by", buyer, amount)))
            out.append((f"a:{ident}", ("bid_on", ident, amount)))
        else:
            heapq.heappush(pending, (payload, ident))
            out.append((f"a:{ident}", ("open", ident, 0)))
    return out


def w2_close_below(now: int, pending: list[Any]) -> list[Any]:
    """Close commands of the pending auctions with ``end_offset <= now``."""
    out = []
    while pending and pending[0][0] <= now:
        _, closed = heapq.heappop(pending)
        out.append((f"a:{closed}", ("close", closed, 0)))
    return out


def consolidate(lines: Any, view: str | None = None) -> dict[tuple[Any, ...], int]:
    """The multiplicity of each ``(view, key, value)`` after summing the diffs of change lines.

    A line without a ``"view"`` belongs to ``view``; a list value becomes a tuple.
    """
    out: dict[tuple[Any, ...], int] = {}
    for line in lines:
        doc = json.loads(line)
        value = doc["value"]
        row = (
            doc.get("view", view),
            doc["key"],
            tuple(value) if isinstance(value, list) else value,
        )
        out[row] = out.get(row, 0) + doc["diff"]
    return {row: n for row, n in out.items() if n != 0}


def reference(
    workload: str, tables: list[dict[str, dict[str, list[Any]]]], now: int
) -> set[tuple[Any, ...]]:
    """The rows ``(view, key, value)`` the outputs must hold after ``tables`` (batches in order).

    W1: the last value per key, by offset, deleted keys left out. W2: the
    number and sum of the bids per buyer, and the max bid of each auction
    still open at ``now`` (its ``end_offset`` above it) that has a bid.
    """
    if workload == "w1":
        latest: dict[int, tuple[int, str | None]] = {}
        for t in tables:
            c = t["commands"]
            for k, v, o in zip(c["key"], c["value"], c["offset"], strict=True):
                if k not in latest or latest[k][0] < o:
                    latest[k] = (o, v)
        return {(None, k, v) for k, (_, v) in latest.items() if v is not None}
    per_user: dict[int, tuple[int, int]] = {}
    best: dict[int, int] = {}
    open_ids = set()
    for t in tables:
        for a, e in zip(t["auctions"]["id"], t["auctions"]["end_offset"], strict=True):
            if e > now:
                open_ids.add(a)
        b = t["bids"]
        for u, a, m in zip(b["buyer"], b["auction_id"], b["amount"], strict=True):
            n, total = per_user.get(u, (0, 0))
            per_user[u] = (n + 1, total + m)
            best[a] = max(best.get(a, m), m)
    return {("bids_per_user", u, v) for u, v in per_user.items()} | {
        ("max_bid", a, m) for a, m in best.items() if a in open_ids
    }


def view_checks(rows: dict[tuple[Any, ...], int]) -> dict[str, Any]:
    """W2: the figures of ``bench_w2_views.view_checks``, from consolidated output rows."""
    per_user = [v for view, _, v in rows if view == "bids_per_user"]
    max_bid = [v for view, _, v in rows if view == "max_bid"]
    return {
        "checks": {
            "bids_per_user_rows": len(per_user),
            "bids_per_user_bids": sum(int(n) for n, _ in per_user),
            "bids_per_user_total": sum(int(t) for _, t in per_user),
            "max_bid_rows": len(max_bid),
            "max_bid_sum": sum(int(m) for m in max_bid),
        }
    }


def check_output(workload: str, manifest: Any, last: int, got: dict[tuple[Any, ...], int]) -> str:
    """A note comparing consolidated output with :func:`reference`; raises if they differ."""
    import pyarrow.parquet as pq

    tables = [
        {sub: pq.read_table(manifest.path(b, sub)).to_pydict() for sub in manifest.subsources}
        for b in range(last + 1)
    ]
    expected = reference(workload, tables, manifest.batches[last].offset_hi - 1)
    bad = [row for row, n in got.items() if n != 1]
    if bad or set(got) != expected:
        missing, extra = len(expected - set(got)), len(set(got) - expected)
        raise AssertionError(
            f"{workload} output differs from the reference: {missing} rows missing, "
            f"{extra} extra, {len(bad)} with multiplicity other than 1 (e.g. {bad[:3]})"
        )
    return f"output checked: equal to the reference ({len(expected):,} rows)"


class Workload:
    """How the source turns a batch into keyed items, and which logic maps them."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "w1":
            self.prepare: Callable[[dict[str, Any]], dict[str, Any]] = lambda t: t
            self.items = w1_items
            self.length: Callable[[dict[str, Any]], int] = lambda t: len(t["commands"]["key"])
            self.logic: Callable[[Any, Any], Any] = upsert
        elif name == "w2":
            self.prepare = w2_merge
            self.items = w2_items
            self.length = lambda t: len(t["events"])
            self.logic = auction_views
        else:
            raise ValueError(f"bytewax peer: unknown workload {name!r}")


def build_flow(workload: Workload, peer: PeerRun) -> Any:
    """The dataflow of ``workload`` (bytewax imported here)."""
    import bytewax.operators as op
    import pyarrow.parquet as pq
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition

    progress = peer.progress

    class BatchPartition(StatefulSourcePartition):  # type: ignore[misc]
        def __init__(self, resume: tuple[int, int, list[Any]] | None) -> None:
            self.b, self.r, pending = resume or (0, 0, [])
            if resume is not None:
                progress.resume_at(self.b)
            self.pending: list[Any] = [tuple(p) for p in pending]
            self.tables: dict[str, Any] | None = None
            self.awake: Any = None

        def _open(self) -> bool:
            paths = peer.files(self.b)
            if paths is None:
                return False
            progress.started(self.b)
            raw = {
                sub: pq.read_table(p).to_pydict()
                for sub, p in zip(peer.subsources, paths, strict=True)
            }
            self.tables = workload.prepare(raw)
            return True

        def next_batch(self) -> list[Any]:
            from datetime import datetime, timedelta

            if self.tables is None and peer.stopped(self.b):
                raise StopIteration
            if self.tables is None and not self._open():
                self.awake = datetime.now(UTC) + timedelta(milliseconds=10)
                return []
            self.awake = None
            assert self.tables is not None
            n = workload.length(self.tables)
            end = min(self.r + CHUNK, n)
            keyed = workload.items(self.tables, self.r, end, self.pending)
            self.r = end
            ended = self.r >= n
            if ended and workload.name == "w2":
                now = peer.manifest.batches[self.b].offset_hi - 1
                keyed += w2_close_below(now, self.pending)
            b = self.b
            items = [(k, (b, *cmd)) for k, cmd in keyed]
            progress.emitted(b, len(items))
            if ended:
                progress.ended(b)
                self.b, self.r, self.tables = self.b + 1, 0, None
            return items

        def next_awake(self) -> Any:
            return self.awake

        def snapshot(self) -> tuple[int, int, list[Any]]:
            return (self.b, self.r, list(self.pending))

    class BatchSource(FixedPartitionedSource):  # type: ignore[misc]
        def list_parts(self) -> list[str]:
            return ["batches"]

        def build_part(self, step_id: str, for_part: str, resume: Any) -> BatchPartition:
            return BatchPartition(resume)

    class ChangePartition(StatefulSinkPartition):  # type: ignore[misc]
        def __init__(self, path: Path, resume: int | None) -> None:
            self.f = open(path, "a+b")  # noqa: SIM115
            self.f.seek(resume or 0)
            self.f.truncate()

        def write_batch(self, values: list[tuple[int, str]]) -> None:
            counts: dict[int, int] = {}
            for b, text in values:
                if text:
                    self.f.write(text.encode())
                counts[b] = counts.get(b, 0) + 1
            self.f.flush()
            os.fsync(self.f.fileno())
            progress.written(counts, time.time())

        def snapshot(self) -> int:
            return self.f.tell()

        def close(self) -> None:
            self.f.close()

    class ChangeSink(FixedPartitionedSink):  # type: ignore[misc]
        def list_parts(self) -> list[str]:
            return ["changes"]

        def build_part(self, step_id: str, for_part: str, resume: Any) -> ChangePartition:
            return ChangePartition(peer.out_dir / "changes.jsonl", resume)

    def logic(state: Any, cmd: Any) -> Any:
        return workload.logic(state, cmd)

    flow = Dataflow(f"{workload.name}_bytewax")
    commands = op.input("batches", flow, BatchSource())
    changes = op.stateful_map("views", commands, logic)
    op.output("changes", changes, ChangeSink())
    return flow


class PeerRun:
    """One run of a peer in its child: the input, its release, progress, the result.

    Batch 0 is released at once; the schedule of the others starts when it is
    visible. :meth:`files` gives a batch's files once released, or None while
    not yet; :meth:`stopped` says the source must end: past ``--batches``, or
    the schedule ran for ``--budget-s`` before the batch could be started.

    For W3 (recovery): ``--release-all`` releases every batch at once (no
    schedule), ``--events`` prints ``ready`` and ``visible`` events as JSON
    lines on stdout, and ``--resume`` keeps the work directory of a killed
    run, so that the peer resumes from its recovery store.
    """

    def __init__(self, system: str, argv: list[str], extra: dict[str, Any]) -> None:
        import shutil

        from inputs import Manifest, Releaser
        from report import new_result

        parser = argparse.ArgumentParser(prog=f"peer_{system}")
        parser.add_argument("--workload", required=True, choices=["w1", "w2"])
        parser.add_argument("--input", type=Path, required=True)
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("--work", type=Path, required=True)
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument("--budget-s", type=float, default=600.0)
        parser.add_argument("--batches", type=int, default=None)
        parser.add_argument("--release-all", action="store_true")
        parser.add_argument("--events", action="store_true")
        parser.add_argument("--resume", action="store_true")
        for name, default in extra.items():
            parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
        self.args = args = parser.parse_args(argv)
        self.manifest = Manifest.load(args.input)
        self.last = min(
            args.batches or len(self.manifest.batches) - 1, len(self.manifest.batches) - 1
        )
        self.subsources = list(self.manifest.subsources)
        if not args.resume:
            shutil.rmtree(args.work, ignore_errors=True)
        self.out_dir, self.watch = args.work / "output", args.work / "watch"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.releaser = Releaser(
            self.manifest, {sub: self.watch / sub for sub in self.subsources}, self.last
        )
        self.deadline = float("inf")
        self.progress = Progress(self.last + 1, self._on_visible)
        params = {k: v for k, v in vars(args).items() if k not in ("input", "out", "work")}
        self.result = new_result(system, args.workload, params | {"last": self.last})

    def event(self, name: str, **fields: Any) -> None:
        """With ``--events``: one JSON line on stdout for the W3 driver."""
        if self.args.events:
            print(json.dumps({"event": name, "t": time.time(), **fields}), flush=True)

    def release(self) -> None:
        """Release batch 0, or with ``--release-all`` every batch not yet released."""
        if not self.args.release_all:
            self.releaser.release_snapshot()
            return
        for b in range(self.last + 1):
            for sub in self.subsources:
                src = self.manifest.path(b, sub)
                target = self.watch / sub / src.name
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists():
                    os.link(src, target)
            self.releaser.available[b] = time.time()

    def _on_visible(self, b: int) -> None:
        self.event("visible", batch=b)
        if b == 0 and not self.args.release_all:
            schedule = self.releaser.start_schedule(self.args.interval)
            self.deadline = schedule.start + self.args.budget_s

    def files(self, b: int) -> list[Path] | None:
        paths = [self.watch / sub / self.manifest.path(b, sub).name for sub in self.subsources]
        return paths if all(p.exists() for p in paths) else None

    def stopped(self, b: int) -> bool:
        return b > self.last or (b >= 1 and time.time() > self.deadline)

    def finish(self, got: Callable[[], dict[tuple[Any, ...], int]], stores: list[Path]) -> None:
        """Record the processed batches, check the output, write the result document."""
        from report import add_batch, dir_bytes, write_result

        self.releaser.stop()
        done = -1
        for b in range(self.last + 1):
            start, visible = self.progress.start[b], self.progress.visible[b]
            if self.args.resume and b < self.progress.resumed_below:
                done = b  # processed before the restart
                continue
            if start is None or visible is None:
                break
            available = self.releaser.available[b]
            add_batch(self.result, b, self.manifest.rows(b), b, available, start, visible)
            done = b
        if done < self.last:
            self.result["notes"].append(f"stopped after batch {done} of {self.last} (budget)")
        self.result["disk_bytes"] = sum(dir_bytes(p) for p in [*stores, self.out_dir])
        totals: dict[str, Any] = {}
        if done >= 0:
            rows = got()
            totals = view_checks(rows) if self.args.workload == "w2" else {"final_rows": len(rows)}
            try:
                self.result["notes"].append(
                    check_output(self.args.workload, self.manifest, done, rows)
                )
            except AssertionError as e:
                self.result["error"] = str(e)
        else:
            self.result["error"] = "batch 0 was not processed"
        write_result(self.result, self.args.out)
        if totals:  # write_result recomputes the totals
            doc = json.loads(self.args.out.read_text())
            doc["totals"] |= totals
            self.args.out.write_text(json.dumps(doc, indent=1))


def child_main(argv: list[str]) -> None:
    from datetime import timedelta

    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.run import cli_main
    from report import versions

    peer = PeerRun("bytewax", argv, {"epoch_interval": 1.0})
    epoch = peer.args.epoch_interval
    db = peer.args.work / "recovery"
    if not peer.args.resume:
        db.mkdir(parents=True)
        init_db_dir(db, 1)
    flow = build_flow(Workload(peer.args.workload), peer)
    peer.result["versions"] = versions("bytewax", "pyarrow")
    peer.result["notes"] = [
        f"recovery: bytewax.recovery SQLite partitions, epoch_interval {epoch} s; "
        "the sink fsyncs every write",
        "one worker; step = batch; visible = its changes written and fsynced",
    ]
    peer.release()
    peer.event("ready")
    try:
        cli_main(
            flow,
            workers_per_process=1,
            epoch_interval=timedelta(seconds=epoch),
            recovery_config=RecoveryConfig(db),
        )
    finally:
        peer.releaser.stop()

    def got() -> dict[tuple[Any, ...], int]:
        with (peer.out_dir / "changes.jsonl").open() as f:
            return consolidate(f)

    peer.finish(got, [db])


if __name__ == "__main__":
    child_main(sys.argv[1:])
