"""The dashboard of ``timeshard serve``: one HTTP page on loopback.

The page shows every shard of the location with its object, health and
frontiers (readable UTC above the epoch ms), two plots over time -- each
shard's lag and its rows/s -- the recent errors, and the dependency graph of
the engine's objects. It reloads itself every ``refresh_s``. The plots and
the graph are plotly figures. plotly.js is served by this server too, at a
path named by plotly's version (:func:`plotly_js_path`), which a browser
caches (``immutable``), so a reload fetches the page and not 4.8 MB of
script; the page needs nothing but this server.

A sampler thread calls :meth:`Engine.object_rows` every ``sample_s`` and
keeps a bounded :class:`History`. ``rows`` is a shard's stored row count:
every update it holds, retractions included, until compaction consolidates
them. rows/s is that count's change between two samples over the seconds
between them, so it is the rate at which updates are stored (negative when a
compaction consolidates), not the growth of the collection.

Endpoints: ``/`` the page, ``/api/objects`` the latest sample as JSON,
``/healthz`` ``ok``, and :func:`plotly_js_path` plotly.js.

Everything here runs on the driver, on threads of its own: the HTTP server's
and the sampler's. Neither takes the engine's lock: the sampler calls
``object_rows``, and the dependency graph is drawn from a copy of
``engine.objects``.

Invariants:

1. The dashboard listens on loopback only: it has no authentication. It is an
   error to give it another host (:class:`InvalidUsage`). It answers only
   requests whose ``Host`` is loopback (403 otherwise), so that a page of
   another site cannot read it through DNS rebinding.
2. Every value put in the page is escaped (``html.escape``); plotly's JSON
   escapes ``<``, ``>`` and ``/`` itself.
3. The history is bounded: at most ``points`` samples of each shard present
   in the latest sample, and at most ``errors`` distinct errors.
"""

from __future__ import annotations

import functools
import graphlib
import html
import json
import logging
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from timeshard.errors import InvalidUsage
from timeshard.progress.wallclock import readable_utc
from timeshard.server.discovery import is_loopback

log = logging.getLogger(__name__)

#: The history kept of each shard, in samples (10 minutes at the default rate).
DEFAULT_POINTS = 300
#: The distinct (name, error) pairs kept.
DEFAULT_ERRORS = 50
_SAMPLER = "dashboard sampler"


@dataclass(frozen=True, slots=True)
class Point:
    """One sample of one shard: when, its lag, its stored rows and rows/s since the last."""

    t_ms: int
    lag_ms: int | None
    rows: int | None
    rows_per_s: float | None


@dataclass(slots=True)
class SeenError:
    """One distinct error of one shard: when first and last sampled, and in how many samples."""

    name: str
    error: str
    first_ms: int
    last_ms: int
    samples: int


class History:
    """The recent samples of every shard and the recent distinct errors; thread-safe."""

    def __init__(self, points: int = DEFAULT_POINTS, errors: int = DEFAULT_ERRORS) -> None:
        if points < 2 or errors < 1:
            raise InvalidUsage(
                f"a history keeps >= 2 points and >= 1 error, got {points}, {errors}"
            )
        self._points = points
        self._errors = errors
        self._lock = threading.Lock()
        self._series: dict[str, deque[Point]] = {}
        self._seen: OrderedDict[tuple[str, str], SeenError] = OrderedDict()
        self._latest: list[dict[str, Any]] = []
        self._latest_ms: int | None = None

    def observe(self, t_ms: int, rows: list[dict[str, Any]]) -> None:
        """Add the sample ``rows`` (of ``Engine.object_rows``) taken at ``t_ms``."""
        with self._lock:
            series: dict[str, deque[Point]] = {}
            for row in rows:
                name = str(row["name"])
                points = self._series.get(name) or deque(maxlen=self._points)
                points.append(_point(t_ms, row, points[-1] if points else None))
                series[name] = points
                if row.get("error"):
                    self._note(t_ms, name, str(row["error"]))
            self._series = series  # a shard gone from the sample takes its history along
            self._latest = [dict(r) for r in rows]
            self._latest_ms = t_ms

    def error(self, t_ms: int, name: str, error: str) -> bool:
        """Note an error that is no shard's (the sampler's own); whether it is new."""
        with self._lock:
            return self._note(t_ms, name, error)

    def _note(self, t_ms: int, name: str, error: str) -> bool:
        seen = self._seen.pop((name, error), None)
        new = seen is None
        seen = seen or SeenError(name, error, t_ms, t_ms, 0)
        seen.last_ms = t_ms
        seen.samples += 1
        self._seen[(name, error)] = seen
        while len(self._seen) > self._errors:
            self._seen.popitem(last=False)  # the one seen longest ago
        return new

    def latest(self) -> tuple[int | None, list[dict[str, Any]]]:
        """The time of the latest sample and its rows."""
        with self._lock:
            return self._latest_ms, [dict(r) for r in self._latest]

    def points(self) -> dict[str, list[Point]]:
        """Each shard's samples, oldest first."""
        with self._lock:
            return {name: list(points) for name, points in self._series.items()}

    def errors(self) -> list[SeenError]:
        """The distinct errors, the one seen last first."""
        with self._lock:
            return [
                SeenError(e.name, e.error, e.first_ms, e.last_ms, e.samples)
                for e in reversed(self._seen.values())
            ]


def _point(t_ms: int, row: dict[str, Any], last: Point | None) -> Point:
    rows = row.get("rows")
    rate = None
    if last is not None and last.rows is not None and rows is not None and t_ms > last.t_ms:
        rate = (rows - last.rows) * 1000 / (t_ms - last.t_ms)
    return Point(t_ms, row.get("lag_ms"), rows, rate)


class Dashboard:
    """The page of ``timeshard serve`` on ``host:port`` (0: any free port); loopback only.

    ``engine`` needs ``object_rows()`` and ``objects`` (name -> object with
    ``kind``, ``shards`` and ``reads``).
    """

    def __init__(
        self,
        engine: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        sample_s: float = 2.0,
        refresh_s: float = 5.0,
        points: int = DEFAULT_POINTS,
        errors: int = DEFAULT_ERRORS,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if not is_loopback(host):
            raise InvalidUsage(
                f"the dashboard has no authentication: it listens on loopback only, not {host!r}"
            )
        if sample_s <= 0 or refresh_s <= 0:
            raise InvalidUsage(
                f"sample_s and refresh_s must be positive, got {sample_s}, {refresh_s}"
            )
        self.engine = engine
        self.sample_s = sample_s
        self.refresh_s = refresh_s
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.history = History(points, errors)
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._server = _Server((host, port), self)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    def start(self) -> None:
        """Sample (at once, then every ``sample_s``) and serve on daemon threads until
        :meth:`close`."""
        self._sampler = threading.Thread(
            target=self._sample_loop, name="dashboard-sampler", daemon=True
        )
        self._sampler.start()
        self._listener = threading.Thread(
            target=self._server.serve_forever, name="dashboard", daemon=True
        )
        self._listener.start()

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._server.shutdown()
            self._listener.join()
        self._server.server_close()
        if self._sampler is not None:
            self._sampler.join()

    def sample(self) -> None:
        """One sample of the engine's objects into :attr:`history`."""
        t_ms = self.clock()
        try:
            rows = self.engine.object_rows()
        except Exception as e:  # a storage hiccup: shown on the page, sampled again next time
            error = f"{type(e).__name__}: {str(e)[:300]}"
            if self.history.error(t_ms, _SAMPLER, error):
                log.warning("dashboard: cannot sample the objects: %s", error)
            return
        self.history.observe(t_ms, rows)

    def _sample_loop(self) -> None:
        self.sample()
        while not self._stop.wait(self.sample_s):
            self.sample()

    def page(self) -> str:
        """The HTML page."""
        return render_page(self.history, list(self.engine.objects.values()), self.refresh_s)

    def objects_json(self) -> str:
        t_ms, rows = self.history.latest()
        return json.dumps({"sampled_ms": t_ms, "objects": rows}, default=str)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        host = self.headers.get("Host")  # a browser always sends one
        if host is not None and not is_loopback(_hostname(host)):  # a page of another site
            self._send(403, "text/plain; charset=utf-8", f"not a loopback Host: {host!r}")
        elif path == "/":
            self._send(200, "text/html; charset=utf-8", self.server.dashboard.page())
        elif path == "/api/objects":
            self._send(200, "application/json", self.server.dashboard.objects_json())
        elif path == "/healthz":
            self._send(200, "text/plain; charset=utf-8", "ok")
        elif path == plotly_js_path():
            self._send(200, "text/javascript; charset=utf-8", _plotly_js(), cache=IMMUTABLE)
        else:
            self._send(404, "text/plain; charset=utf-8", f"no page {path}")

    def _send(self, status: int, content_type: str, body: str, cache: str = "no-store") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", cache)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("dashboard: " + format, *args)


def _hostname(host: str) -> str:
    """The name of a Host header: ``127.0.0.1`` of ``127.0.0.1:8080``, ``::1`` of ``[::1]:80``."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


# -- the page


def render_page(history: History, objects: list[Any], refresh_s: float) -> str:
    """The page of ``history`` and the dependency graph of ``objects``."""
    import plotly.io as pio

    t_ms, rows = history.latest()
    points = history.points()
    figures = {
        "lag": _lag_figure(points),
        "rate": _rate_figure(points),
        "graph": graph_figure(objects),
    }
    config = {"displaylogo": False, "responsive": True}
    plots = {
        key: pio.to_html(
            fig, full_html=False, include_plotlyjs=False, div_id=f"plot-{key}", config=config
        )
        for key, fig in figures.items()
    }
    sampled = "no sample yet" if t_ms is None else _time_html(t_ms)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{refresh_s:g}">
<title>timeshard serve</title>
<style>{_CSS}</style>
<script src="{plotly_js_path()}"></script>
</head><body>
<h1>timeshard serve</h1>
<p class="note">Sampled {sampled}; this page reloads every {refresh_s:g} s.</p>
<h2>Objects</h2>
{_objects_table(rows, points)}
<div class="pair">
<div><h2>Lag</h2>
{plots["lag"]}</div>
<div><h2>Rows per second</h2>
{plots["rate"]}
<p class="note">rows is a shard's stored row count: every update it holds, retractions
included, until compaction consolidates them. rows/s is its change between two samples,
the rate updates are stored at (negative when a compaction consolidates).</p></div>
<div><h2>Dependencies</h2>
{plots["graph"]}</div>
<div><h2>Recent errors</h2>
{_errors_table(history.errors())}</div>
</div>
</body></html>
"""


#: How a browser may keep plotly.js: a year, unrevalidated (its path names its version).
IMMUTABLE = "public, max-age=31536000, immutable"


def plotly_js_path() -> str:
    """The path plotly.js is served at: named by its version, so a cached copy is never stale."""
    import plotly

    return f"/plotly-{plotly.__version__}.min.js"


@functools.cache
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #eef; }
td.num { text-align: right; }
.ms { color: #777; font-size: 0.85em; }
.note { color: #555; font-size: 0.9em; max-width: 60em; }
.ok { background: #dfd; } .warn { background: #ffd; } .bad { background: #fdd; }
.error { font-family: monospace; white-space: pre-wrap; max-width: 40em; }
td.num, td.time { white-space: nowrap; }
.pair { display: grid; grid-template-columns: repeat(auto-fill, minmax(36em, 1fr)); gap: 0 2em; }
.pair > div { min-width: 0; }
.pair table { width: 100%; }
.pair td.time { white-space: normal; }
h2 { margin: 0.8em 0 0.4em; }
"""


def _objects_table(rows: list[dict[str, Any]], points: dict[str, list[Point]]) -> str:
    head = ["object", "shard", "type", "health", "since", "upper", "lag", "generation"]
    head += ["rows", "rows/s", "bytes", "error"]
    body = []
    for row in sorted(
        rows, key=lambda r: (r.get("object") is None, str(r.get("object")), r["name"])
    ):
        series = points.get(str(row["name"])) or []
        rate = series[-1].rows_per_s if series else None
        cells = [
            _cell(row.get("object")),
            _cell(row["name"]),
            _cell(row.get("type")),
            f'<td class="{_health(row)}">{_text(row.get("status") or "unknown")}</td>',
            f'<td class="time">{_time_html(row.get("since"))}</td>',
            f'<td class="time">{_time_html(row.get("upper"), none=_no_upper(row))}</td>',
            _cell(None if row.get("lag_ms") is None else f"{row['lag_ms'] / 1000:.1f} s", "num"),
            _cell(row.get("generation"), "num"),
            _cell(row.get("rows"), "num"),
            _cell(None if rate is None else f"{rate:.1f}", "num"),
            _cell(row.get("bytes"), "num"),
            _cell(row.get("error"), "error"),
        ]
        body.append(f"<tr>{''.join(cells)}</tr>")
    if not body:
        return '<p class="note">No shards yet.</p>'
    header = "".join(f"<th>{_text(h)}</th>" for h in head)
    return f'<table id="objects"><tr>{header}</tr>{"".join(body)}</table>'


def _errors_table(errors: list[SeenError]) -> str:
    if not errors:
        return '<p class="note">None.</p>'
    body = "".join(
        "<tr>"
        + _cell(e.name)
        + _cell(e.error, "error")
        + f'<td class="time">{_time_html(e.first_ms)}</td>'
        + f'<td class="time">{_time_html(e.last_ms)}</td>'
        + _cell(e.samples, "num")
        + "</tr>"
        for e in errors
    )
    header = "<th>name</th><th>error</th><th>first seen</th><th>last seen</th><th>samples</th>"
    return f'<table id="errors"><tr>{header}</tr>{body}</table>'


def _no_upper(row: dict[str, Any]) -> str:
    """What an upper of None means: an empty frontier, unless the shard could not be read."""
    return "" if row.get("type") == "unreadable" else "closed"


def _health(row: dict[str, Any]) -> str:
    status = row.get("status")
    if row.get("error") or status not in (None, "running", "starting", "paused", "stopped"):
        return "bad"
    return "ok" if status == "running" else "warn"


def _text(value: Any) -> str:
    return html.escape(str(value))


def _cell(value: Any, cls: str | None = None) -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{'' if value is None else _text(value)}</td>"


def _time_html(t: Any, *, none: str = "") -> str:
    """A time: readable UTC above its epoch ms, or the integer alone (a logical time)."""
    if not isinstance(t, int):
        return _text(none if t is None else t)
    readable = readable_utc(t)
    if readable is None:
        return _text(t)
    return f'{_text(readable)} UTC<br><span class="ms">{t}</span>'


# -- the figures


def _utc(t_ms: int) -> datetime:
    return datetime.fromtimestamp(t_ms / 1000, tz=UTC)


def _lag_figure(points: dict[str, list[Point]]) -> Any:
    return _series_figure(
        {
            n: [(p.t_ms, None if p.lag_ms is None else p.lag_ms / 1000) for p in s]
            for n, s in points.items()
        },
        "lag (s)",
    )


def _rate_figure(points: dict[str, list[Point]]) -> Any:
    return _series_figure(
        {n: [(p.t_ms, p.rows_per_s) for p in s] for n, s in points.items()}, "stored rows/s"
    )


def _series_figure(series: dict[str, list[tuple[int, float | None]]], unit: str) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for name in sorted(series):
        values = [(t, v) for t, v in series[name] if v is not None]
        if values:
            fig.add_trace(
                go.Scatter(
                    x=[_utc(t) for t, _ in values],
                    y=[v for _, v in values],
                    name=html.escape(name),
                    mode="lines+markers",
                )
            )
    fig.update_layout(
        height=340,
        margin={"l": 60, "r": 20, "t": 20, "b": 40},
        xaxis_title="time (UTC)",
        yaxis_title=unit,
    )
    return fig


def dependency_graph(objects: Iterable[Any]) -> tuple[dict[str, str], set[tuple[str, str]]]:
    """The nodes (name -> ``source``, ``shard``, ``view`` or ``sink``: an object's kind)
    and edges of ``objects``.

    A source points at each shard it writes, each shard a view or a sink reads
    points at it. An object that writes one shard named after it is one node.
    """
    nodes: dict[str, str] = {}
    edges: set[tuple[str, str]] = set()
    for obj in objects:
        nodes[obj.name] = obj.kind
        for shard in obj.shards:
            nodes.setdefault(shard, "shard")
            if shard != obj.name:
                edges.add((obj.name, shard))
    for obj in objects:
        for shard in obj.reads:
            nodes.setdefault(shard, "shard")
            if shard != obj.name:
                edges.add((shard, obj.name))
    return nodes, edges


def layers(nodes: Iterable[str], edges: set[tuple[str, str]]) -> dict[str, int]:
    """Each node's depth: the length of the longest path to it from a node nothing points at."""
    before: dict[str, set[str]] = {n: set() for n in nodes}
    for a, b in edges:
        before[b].add(a)
    depth: dict[str, int] = {}
    for node in graphlib.TopologicalSorter(before).static_order():
        depth[node] = max((depth[p] + 1 for p in before[node]), default=0)
    return depth


#: The colour of each kind of node; a node of another kind is drawn in :data:`_OTHER`.
_KINDS = {"source": "#1f77b4", "shard": "#7f7f7f", "view": "#2ca02c", "sink": "#d62728"}
_OTHER = "#9467bd"


def graph_figure(objects: Iterable[Any]) -> Any:
    """The dependency graph as a plotly figure: a column per depth, an arrow per edge, a
    marker per node coloured by its kind (every kind drawn, a sink's too)."""
    import plotly.graph_objects as go

    nodes, edges = dependency_graph(list(objects))
    depth = layers(nodes, edges)
    position: dict[str, tuple[int, int]] = {}
    for d in sorted(set(depth.values())):
        for rank, name in enumerate(sorted(n for n in nodes if depth[n] == d)):
            position[name] = (d, -rank)
    fig = go.Figure()
    others = sorted(set(nodes.values()) - set(_KINDS))
    for kind, colour in [*_KINDS.items(), *((k, _OTHER) for k in others)]:
        names = sorted(n for n in nodes if nodes[n] == kind)
        if not names:
            continue
        fig.add_trace(
            go.Scatter(
                x=[position[n][0] for n in names],
                y=[position[n][1] for n in names],
                text=[html.escape(n) for n in names],
                name=kind,
                mode="markers+text",
                textposition="top center",
                marker={"size": 18, "color": colour},
                hoverinfo="text",
            )
        )
    for a, b in sorted(edges):
        fig.add_annotation(
            x=position[b][0],
            y=position[b][1],
            ax=position[a][0],
            ay=position[a][1],
            xref="x",
            yref="y",
            axref="x",
            ayref="y",
            showarrow=True,
            arrowhead=2,
            arrowsize=1.5,
            standoff=10,
            startstandoff=10,
            text="",
        )
    rows = max((1 - y for _, y in position.values()), default=1)
    fig.update_layout(
        height=max(300, 70 * rows),
        margin={"l": 20, "r": 20, "t": 20, "b": 20},
        xaxis={"visible": False, "range": [-0.5, max(depth.values(), default=0) + 0.5]},
        yaxis={"visible": False, "range": [-rows + 0.5, 0.7]},
        plot_bgcolor="white",
    )
    return fig


__all__ = [
    "DEFAULT_ERRORS",
    "DEFAULT_POINTS",
    "Dashboard",
    "History",
    "Point",
    "SeenError",
    "dependency_graph",
    "graph_figure",
    "layers",
    "render_page",
]
