"""The pathway peer: W1 (KEY VALUE upsert) and W2 (auction views) as pathway programs.

Runs in its own virtual environment, ``bench/.venvs/pathway/`` (created and
filled with :data:`REQUIREMENTS` on first use), as a child process: this file
is both the module the benchmarks import (:func:`run`, main ``.venv``) and
the program the child runs (``__main__``, the peer's venv). Like the bytewax
peer, the child releases the input batches itself (``inputs.Releaser``) into
a directory its input connector watches, and writes ``report.py``'s result
document. If pathway cannot be installed or imported, the result says why in
``error`` and ``unavailable``.

W1::

    watched dir ──> BatchSubject (pw.io.python, session_type="upsert", primary key `key`)
                     │  per batch: next(key, value, offset) / delete, then a marker row
                     │  (key = -1 - batch), then commit()
                     v
                  table ──filter key >= 0──> pw.io.jsonlines.write(output/changes.jsonl)
                     └────filter key < 0───> pw.io.subscribe(on_time_end: batch visible)

The upsert session keeps the latest row per key (a delete removes it); the
jsonlines sink gets retractions and insertions (``diff`` ±1).

W2: one insert-only subject of events (auctions, bids, and a marker per
batch carrying its ``offset_hi``); bids per user is
``bids.groupby(buyer).reduce((count, sum of amount))``; max bid per open
auction is ``bids.groupby(auction).reduce(max)`` joined with the auctions
whose ``end_offset`` is above the stream's position (``max(auctions.id)``,
carried by the markers: a one-row table joined to every auction, so each
batch re-evaluates every auction). Two jsonlines sinks.

Persistence: ``pw.persistence.Config(pw.persistence.Backend.filesystem(
work/pstore))`` passed to ``pw.run`` (mode ``PERSISTING``: the input is
logged and operator state snapshotted; default snapshot interval).

Per batch: ``available`` (released), ``start`` (the subject opens its files),
``end`` = ``visible``: the end (``on_time_end``) of the pathway time that
carried its marker, at the marker subscriber. The jsonlines sinks of that time
run in the same engine step, but their flush is not observed separately.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path
from time import time as wall_time
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
VENV = ROOT / "bench" / ".venvs" / "pathway"
REQUIREMENTS = ["pathway==0.33.0", "pyarrow", "psutil"]

if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))


# -- parent side (the main .venv) ---------------------------------------------------------------


def run(workload: str, input_dir: Path, out_json: Path, **opts: Any) -> None:
    """Run pathway on ``workload`` over the input in ``input_dir``; write ``out_json``.

    ``opts``: as the bytewax peer's (``interval``, ``batches``, ``budget_s``,
    ``timeout_s``, ``work_dir``), and ``threads`` (pathway workers, default
    1). If the venv cannot be set up or pathway not imported, the result has
    ``unavailable`` (and ``error``) set to the reason.
    """
    import subprocess

    import report
    from peer_bytewax import child_options, ensure_venv

    out_json = Path(out_json)
    try:
        python = ensure_venv(VENV, REQUIREMENTS)
        subprocess.run(
            [str(python), "-c", "import pathway"],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        detail = getattr(e, "stderr", None) or str(e)
        reason = f"pathway cannot be installed or imported here: {detail.strip()[-500:]}"
        result = report.new_result("pathway", workload, {})
        result["unavailable"] = reason
        result["error"] = reason
        report.write_result(result, out_json)
        return
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
        "--threads",
        str(int(opts.get("threads") or 1)),
    ]
    timeout = float(opts.get("timeout_s") or float(opts.get("budget_s") or 600) + 600)
    report.run_child(cmd, out_json, timeout, "pathway", workload)
    if not opts.get("work_dir"):
        shutil.rmtree(work, ignore_errors=True)


# -- child side (the peer's venv) ---------------------------------------------------------------


def w1_program(pw: Any, subject_base: Any, feed: Any, out_dir: Path) -> Any:
    """The W1 tables and sinks; returns the marker table."""

    class Commands(pw.Schema):  # type: ignore[misc]
        key: int = pw.column_definition(primary_key=True)
        value: str | None
        offset: int

    class Subject(subject_base):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(session_type="upsert")

        def run(self) -> None:
            for b, tables, _ in feed():
                c = tables["commands"]
                for k, v, o in zip(c["key"], c["value"], c["offset"], strict=True):
                    if v is None:
                        self._remove_inner(None, {"key": k, "value": None, "offset": o})
                    else:
                        self.next(key=k, value=v, offset=o)
                self.next(key=-1 - b, value=None, offset=-1)
                self.commit()

    table = pw.io.python.read(Subject(), schema=Commands, name="w1_commands")
    data = table.filter(pw.this.key >= 0).select(pw.this.key, pw.this.value)
    pw.io.jsonlines.write(data, str(out_dir / "changes.jsonl"), name="changes")
    return table.filter(pw.this.key < 0).select(batch=-1 - pw.this.key)


def w2_program(pw: Any, subject_base: Any, feed: Any, out_dir: Path) -> Any:
    """The W2 tables and sinks; returns the marker table."""

    class Events(pw.Schema):  # type: ignore[misc]
        kind: int  # 0 auction, 1 bid, 2 marker
        ident: int
        who: int
        auction: int
        amount: int
        end_offset: int

    class Subject(subject_base):  # type: ignore[misc]
        def run(self) -> None:
            for b, tables, offset_hi in feed():
                a, bids = tables["auctions"], tables["bids"]
                for i, s, e in zip(a["id"], a["seller"], a["end_offset"], strict=True):
                    self.next(kind=0, ident=i, who=s, auction=i, amount=0, end_offset=e)
                for i, u, x, m in zip(
                    bids["id"], bids["buyer"], bids["auction_id"], bids["amount"], strict=True
                ):
                    self.next(kind=1, ident=i, who=u, auction=x, amount=m, end_offset=0)
                now = offset_hi - 1  # max(auctions.id)
                self.next(kind=2, ident=b, who=0, auction=0, amount=now, end_offset=0)
                self.commit()

    events = pw.io.python.read(Subject(), schema=Events, name="w2_events")
    bids = events.filter(pw.this.kind == 1)
    auctions = events.filter(pw.this.kind == 0)
    markers = events.filter(pw.this.kind == 2)
    per_user = bids.groupby(pw.this.who).reduce(
        key=pw.this.who,
        value=pw.make_tuple(pw.reducers.count(), pw.reducers.sum(pw.this.amount)),
    )
    frontier = markers.reduce(frontier=pw.reducers.max(pw.this.amount))
    open_auctions = (
        auctions.join(frontier)
        .select(pw.left.auction, pw.left.end_offset, pw.right.frontier)
        .filter(pw.this.end_offset > pw.this.frontier)
    )
    best = bids.groupby(pw.this.auction).reduce(
        pw.this.auction, top=pw.reducers.max(pw.this.amount)
    )
    max_bid = open_auctions.join(best, pw.left.auction == pw.right.auction).select(
        key=pw.left.auction, value=pw.right.top
    )
    pw.io.jsonlines.write(per_user, str(out_dir / "bids_per_user.jsonl"), name="bids_per_user")
    pw.io.jsonlines.write(max_bid, str(out_dir / "max_bid.jsonl"), name="max_bid")
    return markers.select(batch=pw.this.ident)


def child_main(argv: list[str]) -> None:
    import pyarrow.parquet as pq
    from peer_bytewax import PeerRun, consolidate
    from report import versions, write_result

    peer = PeerRun("pathway", argv, {"threads": 1})
    os.environ["PATHWAY_THREADS"] = str(peer.args.threads)
    try:
        import pathway as pw
    except Exception as e:  # an import failure is why it is unavailable
        peer.result["unavailable"] = peer.result["error"] = f"import pathway failed: {e!r}"
        write_result(peer.result, peer.args.out)
        return
    peer.result["versions"] = versions("pathway", "pyarrow")
    store = peer.args.work / "pstore"
    progress = peer.progress

    def feed() -> Any:
        """Each batch as it is released: (index, columns per subsource, offset_hi)."""
        b = 0
        while not peer.stopped(b):
            paths = peer.files(b)
            if paths is None:
                time.sleep(0.005)
                continue
            progress.started(b)
            tables = {
                s: pq.read_table(p).to_pydict() for s, p in zip(peer.subsources, paths, strict=True)
            }
            progress.emitted(b, 1)  # the marker
            progress.ended(b)
            yield b, tables, peer.manifest.batches[b].offset_hi
            b += 1

    program = {"w1": w1_program, "w2": w2_program}[peer.args.workload]
    markers = program(pw, pw.io.python.ConnectorSubject, feed, peer.out_dir)
    lock = threading.Lock()
    seen: list[tuple[int, int]] = []

    def on_change(key: Any, row: dict[str, Any], time: int, is_addition: bool) -> None:
        if is_addition:
            with lock:
                seen.append((time, row["batch"]))

    def on_time_end(t: int) -> None:
        now = wall_time()
        with lock:
            done = [b for tm, b in seen if tm <= t]
            seen[:] = [(tm, b) for tm, b in seen if tm > t]
        for b in sorted(done):
            if peer.args.resume:  # batches replayed from the store show no marker: no order
                peer.event("visible", batch=b)
            else:
                progress.written({b: 1}, now)

    pw.io.subscribe(markers, on_change=on_change, on_time_end=on_time_end, name="markers")
    peer.result["notes"] = [
        "persistence: pw.persistence.Config(Backend.filesystem(pstore)), mode PERSISTING",
        f"PATHWAY_THREADS={peer.args.threads}; visible = end of the pathway time of the "
        "batch's marker row",
    ]
    if peer.args.resume:  # pathway rewrites its jsonlines outputs: keep the killed run's
        for f in sorted(peer.out_dir.glob("*.jsonl")):
            if not f.name.endswith(".run1.jsonl"):
                f.rename(f.with_suffix(".run1.jsonl"))
    peer.release()
    peer.event("ready")
    try:
        pw.run(
            monitoring_level=pw.MonitoringLevel.NONE,
            persistence_config=pw.persistence.Config(pw.persistence.Backend.filesystem(str(store))),
        )
    finally:
        peer.releaser.stop()
    if peer.args.resume:  # it ended after reading every batch: all are in the output
        progress.resume_at(peer.last + 1)

    def got() -> dict[tuple[Any, ...], int]:
        files: dict[str, dict[str, str | None]] = {
            "w1": {"changes.jsonl": None},
            "w2": {"bids_per_user.jsonl": "bids_per_user", "max_bid.jsonl": "max_bid"},
        }
        out: dict[tuple[Any, ...], int] = {}
        for name, view in files[peer.args.workload].items():
            paths = [peer.out_dir / Path(name).with_suffix(".run1.jsonl"), peer.out_dir / name]
            lines = [line for p in paths if p.exists() for line in p.open()]
            out.update(consolidate(lines, view))
        return out

    peer.finish(got, [store])


if __name__ == "__main__":
    child_main(sys.argv[1:])
