"""``timeshard demo``: sources, upserts and views on the embedded default.

The demo creates an AUCTION source (organizations, users, accounts, auctions
and bids, each its own shard) and a KEY VALUE source ingested with the UPSERT
envelope, and maintains two materialized views over the auction data:
``winning_bids`` (the highest bid of every closed auction) and
``bids_per_user``. It runs for ``--seconds`` with a live table of every
object's write frontier, rows per second and lag (:class:`DemoBoard`: drawn
from the start, before Spark is up, redrawn as each object steps, its lags
moving between ticks); then it lets the views
catch up, prints query results, and checks each view against a from-scratch
recomputation of its query over the inputs at the same time. The exit code
is 0 only if every check passed.

The demo starts afresh (:func:`fresh_location`): it marks the locations it
creates, deletes what an earlier demo left, and refuses a location it did
not create, or one a ``timeshard serve`` runs on, rather than delete it.

Runs on the driver; reading sources, reclocking, envelopes and views run in
Spark tasks.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table

from timeshard.cli.options import TIME_COLUMNS, fit, time_cell, time_text
from timeshard.compute import MaterializedView, ViewDefinition
from timeshard.errors import InvalidUsage
from timeshard.location import Location
from timeshard.persist import PersistClient, ReadHandle
from timeshard.server.discovery import running_server
from timeshard.spec import DEFAULT_DIR

WINNING_BIDS = """
SELECT auction_id, item, buyer, amount FROM (
  SELECT a.id AS auction_id, a.item, b.buyer, b.amount,
         row_number() OVER (PARTITION BY a.id ORDER BY b.amount DESC, b.id) AS rank
  FROM auctions a JOIN bids b ON b.auction_id = a.id
  WHERE a.end_offset <= (SELECT max(id) FROM auctions)
) WHERE rank = 1
"""
BIDS_PER_USER = "SELECT buyer, count(*) AS bids, sum(amount) AS total FROM bids GROUP BY buyer"
#: The file that marks a location as the demo's own, to delete when the demo runs again.
DEMO_MARKER = "demo-location.txt"
VIEWS = {
    "winning_bids": ({"auctions": "auction.auctions", "bids": "auction.bids"}, WINNING_BIDS),
    "bids_per_user": ({"bids": "auction.bids"}, BIDS_PER_USER),
}


#: The query the demo's last line gives to paste into psql (against ``timeshard serve``).
SQL_HINT = "SELECT buyer, bids, total FROM bids_per_user ORDER BY total DESC LIMIT 5"


@contextmanager
def live(board: RenderableType, console: Console) -> Iterator[None]:
    """``board`` redrawn in place (four times a second) while the block runs, its last
    frame left on the console and ended by a newline.

    Written to a file or a pipe (not a terminal), rich's :class:`Live` prints the last
    frame with no newline after it, so the next line was glued to the table's border.
    """
    with Live(board, console=console, refresh_per_second=4):
        yield
    if not console.is_terminal:
        console.line()


def run_demo(location_dir: Path, seconds: float, console: Console) -> int:
    from timeshard.spark import snapshot_df, spark_session
    from timeshard.storage.ingest import Ingestion
    from timeshard.storage.sources import AuctionGenerator, KeyValueGenerator

    location = fresh_location(location_dir)
    console.print(f"[bold]timeshard demo[/bold]: {location.describe()}")
    objects = ["auction.auctions", "auction.bids", "kv", *VIEWS]
    board = DemoBoard(objects, seconds)
    # The live table is drawn from the start (by rich's refresh thread, from what
    # the board last observed), and each object's row is redrawn after each step.
    with live(board, console):
        started = time.monotonic()
        spark = spark_session(app_name="timeshard-demo")
        console.print(
            f"Spark {spark.version} on {spark.sparkContext.master} "
            f"(started in {time.monotonic() - started:.1f} s)"
        )
        client = PersistClient(location)
        auction = Ingestion(spark, client, AuctionGenerator(rate=100))
        kv = Ingestion(
            spark,
            client,
            KeyValueGenerator(keys=5000, value_size=16, rate=1000),
            envelope="upsert",
            key_columns=["key"],
        )
        board.phase = "first ticks"
        auction.step()
        board.observe(client, "auction.auctions", "auction.bids")
        kv.step()
        board.observe(client, "kv")
        # Hold the inputs' history so the final check can read them where the views are.
        holds = [client.open_leased_reader(s) for s in ("auction.auctions", "auction.bids")]
        views = {
            name: MaterializedView.install(spark, client, ViewDefinition(name, inputs, sql))
            for name, (inputs, sql) in VIEWS.items()
        }
        board.phase = "running"
        board.start()
        while not board.done():
            tick = time.monotonic()
            auction.step()
            board.observe(client, "auction.auctions", "auction.bids")
            kv.step()
            board.observe(client, "kv")
            for name, v in views.items():
                v.step()
                board.observe(client, name)
            board.last_tick_s = time.monotonic() - tick
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        board.phase = "catching up"
        for name, v in views.items():
            v.catch_up()
            board.observe(client, name)
        board.phase = "checking"
    ok = True
    for name, view in views.items():
        inputs, sql = VIEWS[name]
        as_of = (view.frontiers().persist.time or 1) - 1
        for alias, shard in inputs.items():
            snap = snapshot_df(spark, _reader(client, shard, holds), as_of).drop("_ts", "_err")
            cols = [c for c in snap.columns if c != "_diff"]
            snap.selectExpr(*cols, "explode(sequence(1, CAST(_diff AS INT))) AS _n").drop(
                "_n"
            ).createOrReplaceTempView(alias)
        expected = spark.sql(sql)
        got = snapshot_df(spark, _reader(client, name, holds), as_of)
        got = got.selectExpr(*expected.columns, "explode(sequence(1, CAST(_diff AS INT))) AS _n")
        got = got.drop("_n")
        same = got.exceptAll(expected).isEmpty() and expected.exceptAll(got).isEmpty()
        ok = ok and same
        console.print(
            f"{name} AS OF {time_text(as_of)}: {got.count()} rows; matches a from-scratch "
            f"recomputation: {'[green]yes[/green]' if same else '[red]NO[/red]'}"
        )
    top = _reader(client, "bids_per_user", holds)
    upper = (top.fetch_recent_upper().time or 1) - 1
    rows = sorted(top.snapshot(upper).to_pylist(), key=lambda r: -r["total"])[:5]
    table = Table("buyer", "bids", "total", title="top bidders")
    for r in rows:
        table.add_row(str(r["buyer"]), str(r["bids"]), str(r["total"]))
    console.print(table)
    kv_rows = (
        _reader(client, "kv", holds).snapshot((client.state("kv").upper.time or 1) - 1).num_rows
    )
    console.print(f"kv (UPSERT): {kv_rows} live keys")
    console.print("[green]consistent[/green]" if ok else "[red]INCONSISTENT[/red]")
    where = "" if location_dir == Path(DEFAULT_DIR) else f" --location {location_dir}"
    console.print(f"look around: timeshard status{where}")
    console.print(f'             timeshard query "SELECT * FROM bids_per_user"{where}')
    console.print(f"with SQL:    timeshard serve{where}    (then, in another terminal)")
    console.print(f"             psql -h 127.0.0.1 -p 6875 -U timeshard -c {SQL_HINT!r}")
    for v in views.values():
        v.close()
    auction.close()
    kv.close()
    for h in holds:
        h.expire()
    spark.stop()
    return 0 if ok else 1


def _reader(client: PersistClient, shard: str, opened: list[ReadHandle]) -> ReadHandle:
    """A leased reader of ``shard``, added to ``opened`` (expired when the demo ends)."""
    reader = client.open_leased_reader(shard)
    opened.append(reader)
    return reader


def fresh_location(directory: Path) -> Location:
    """An empty embedded location at ``directory``, marked as the demo's.

    An earlier demo's location there is deleted (its ``blob/`` and consensus
    files; anything else in the directory stays). A location without the mark
    is refused with InvalidUsage and left as it is, and so is one a live
    ``timeshard serve`` announces it serves (its objects would lose their shards),
    and one that holds shards besides the demo's own (:func:`demo_shards`: another
    command wrote its objects there since, ``timeshard run`` using the same
    default directory, say).
    """
    held = [p for p in (directory / "blob", directory / "consensus.sqlite") if p.exists()]
    if held and not (directory / DEMO_MARKER).exists():
        raise InvalidUsage(
            f"{str(directory)!r} holds a timeshard location the demo did not create, and "
            "the demo starts afresh: give the demo another --location"
        )
    server = running_server(directory) if held else None
    if server is not None:
        raise InvalidUsage(
            f"timeshard serve runs on {str(directory)!r} (at {server[0]}:{server[1]}), and "
            "the demo starts afresh by deleting it: stop the server, or give the demo "
            "another --location"
        )
    foreign = _foreign_shards(directory) if held else []
    if foreign:
        raise InvalidUsage(
            f"{str(directory)!r} is a location an earlier demo created, and it now also holds "
            f"objects the demo does not write ({len(foreign)} shards, such as "
            f"{foreign[0]!r}; written by timeshard run or serve, say), which the demo would "
            "delete to start afresh: give the demo another --location"
        )
    shutil.rmtree(directory / "blob", ignore_errors=True)
    for f in directory.glob("consensus.sqlite*"):
        f.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / DEMO_MARKER).write_text(
        "Made by `timeshard demo`, which deletes this location when it runs here again.\n"
    )
    return Location.embedded(directory)


def demo_shards() -> set[str]:
    """Every shard a demo writes: its sources' outputs and remaps, its views, and the
    location's catalog and status collection."""
    from timeshard.catalog import CATALOG_SHARD
    from timeshard.storage.health import STATUS_SHARD
    from timeshard.storage.sources import AuctionGenerator, KeyValueGenerator

    auction, kv = AuctionGenerator(), KeyValueGenerator()
    outputs = {f"{auction.name}.{sub}" for sub in auction.outputs()}
    remaps = {f"{auction.name}.remap", f"{kv.name}.remap"}
    return {*outputs, *remaps, kv.name, *VIEWS, CATALOG_SHARD, STATUS_SHARD}


def _foreign_shards(directory: Path) -> list[str]:
    """The shards of the location at ``directory`` that no demo writes, sorted."""
    if not (directory / "consensus.sqlite").is_file():
        return []  # blobs alone: no shard to keep
    shards = PersistClient(Location.embedded(directory)).list_shards()
    return sorted(set(shards) - demo_shards())


class DemoBoard:
    """The demo's live table: each object's write frontier, rows, rows/s and lag.

    The main thread observes objects after their steps (:meth:`observe`); rich's refresh
    thread renders (``__rich__``) what was last observed, with the lag and the
    elapsed time computed at drawing time, so the table moves between ticks.
    """

    def __init__(self, objects: list[str], seconds: float) -> None:
        self.objects = objects
        self.seconds = seconds
        self.phase = "starting Spark"
        self.last_tick_s: float | None = None
        self._created = time.monotonic()
        self._running_since: float | None = None
        #: object -> (write frontier, rows, rows/s, when observed)
        self._seen: dict[str, tuple[int | None, int, float | None, float]] = {}

    def start(self) -> None:
        """The sources and views run from now for ``seconds``."""
        self._running_since = time.monotonic()

    def done(self) -> bool:
        return self._running_since is not None and (
            time.monotonic() - self._running_since >= self.seconds
        )

    def observe(self, client: PersistClient, *objects: str) -> None:
        """Read the shard states of ``objects`` (no Spark)."""
        for o in objects:
            state = client.state(o)
            rows, now = state.num_rows(), time.monotonic()
            before = self._seen.get(o)
            rate = None if before is None else (rows - before[1]) / max(now - before[3], 1e-3)
            self._seen[o] = (state.upper.time, rows, rate, now)

    def __rich__(self) -> Table:
        elapsed = time.monotonic() - self._created
        running = (
            f", {time.monotonic() - self._running_since:.0f} of {self.seconds:.0f} s"
            if self._running_since is not None and not self.done()
            else ""
        )
        tick = "" if self.last_tick_s is None else f", last tick {self.last_tick_s:.2f} s"
        table = Table(
            "object",
            "write frontier",
            "rows",
            "rows/s",
            "lag",
            title=f"timeshard demo: {self.phase}{running}{tick} ({elapsed:.0f} s)",
        )
        now_ms = time.time_ns() // 1_000_000
        for o in self.objects:
            seen = self._seen.get(o)
            if seen is None:
                table.add_row(o, "", "", "", "waiting")
                continue
            upper, rows, rate, _ = seen
            lag = (
                "closed"
                if upper is None
                else "hydrating"
                if upper == 0
                else f"{(now_ms - upper) / 1000:.1f} s"
            )
            table.add_row(
                o,
                time_cell(upper, none="closed"),
                f"{rows:,}",
                "" if rate is None else f"{rate:,.0f}",
                lag,
            )
        return fit(table, whole=TIME_COLUMNS)


__all__ = ["DEMO_MARKER", "DemoBoard", "fresh_location", "run_demo"]
