"""The dashboard of ``timeshard serve`` over a scripted engine (no Spark).

:class:`DemoEngine` stands for an engine running the demo's objects: the
AUCTION source ``auction`` and its five shards, the KEY VALUE source ``kv``,
and the views ``winning_bids`` and ``bids_per_user``. The browser test
(``tests/integration/test_dashboard_browser.py``) serves it too.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest

from timeshard.errors import InvalidUsage
from timeshard.server.dashboard import (
    Dashboard,
    History,
    dependency_graph,
    graph_figure,
    layers,
    plotly_js_path,
)

#: 2023-11-14 22:13:20 UTC.
T0 = 1_700_000_000_000
AUCTION_SHARDS = [
    "auction.organizations",
    "auction.users",
    "auction.accounts",
    "auction.auctions",
    "auction.bids",
]
VIEWS = {"winning_bids": ["auction.auctions", "auction.bids"], "bids_per_user": ["auction.bids"]}
DEMO_NAMES = ["auction", *AUCTION_SHARDS, "kv", *VIEWS]
SCRIPT_ERROR = "ValueError: bad row <script>alert('x')</script> & more"


class DemoEngine:
    """``object_rows`` and ``objects`` of an engine running the demo; :meth:`tick` moves it."""

    def __init__(self, now_ms: int = T0) -> None:
        self.objects = {
            "auction": SimpleNamespace(
                name="auction", kind="source", shards=list(AUCTION_SHARDS), reads=[]
            ),
            "kv": SimpleNamespace(name="kv", kind="source", shards=["kv"], reads=[]),
            **{
                name: SimpleNamespace(name=name, kind="view", shards=[name], reads=reads)
                for name, reads in VIEWS.items()
            },
        }
        self.now_ms = now_ms
        self.ticks = 0
        self.errors: dict[str, str] = {}
        self.failure: Exception | None = None

    def tick(self, ms: int = 1000) -> None:
        self.now_ms += ms
        self.ticks += 1

    def object_rows(self) -> list[dict[str, Any]]:
        if self.failure is not None:
            raise self.failure
        out = []
        owners = {s: o for o in self.objects.values() for s in o.shards}
        for i, shard in enumerate(sorted(owners)):
            obj = owners[shard]
            lag = 300 + 100 * i + 50 * (self.ticks % 3)
            out.append(
                {
                    "name": shard,
                    "object": obj.name,
                    "type": "materialized view" if obj.kind == "view" else "source",
                    "status": "stalled" if shard in self.errors else "running",
                    "since": self.now_ms - 60_000,
                    "upper": self.now_ms - lag,
                    "lag_ms": lag,
                    "generation": 1 if obj.kind == "view" else None,
                    "rows": (10 + i) * self.ticks,
                    "bytes": 1000 * (self.ticks + 1),
                    "error": self.errors.get(shard),
                }
            )
        for system in ("timeshard_catalog", "timeshard_status"):
            out.append(
                {
                    "name": system,
                    "object": None,
                    "type": "shard",
                    "status": None,
                    "since": 0,
                    "upper": 7,  # a logical time: shown as the integer alone
                    "lag_ms": None,
                    "generation": None,
                    "rows": 3,
                    "bytes": 100,
                    "error": None,
                }
            )
        return out


class Clock:
    def __init__(self, engine: DemoEngine) -> None:
        self.engine = engine

    def __call__(self) -> int:
        return self.engine.now_ms


def dashboard(engine: DemoEngine, **kwargs: Any) -> Dashboard:
    return Dashboard(engine, clock=Clock(engine), **kwargs)


def test_page_shows_every_object_its_health_and_readable_frontiers() -> None:
    engine = DemoEngine()
    engine.errors["auction.bids"] = SCRIPT_ERROR
    d = dashboard(engine)
    try:
        for _ in range(3):
            d.sample()
            engine.tick(2000)
        page = d.page()
    finally:
        d.close()
    for name in DEMO_NAMES:
        assert f"<td>{name}</td>" in page, name
    # since and upper: readable UTC above the epoch ms
    since = T0 + 4000 - 60_000
    assert f'2023-11-14 22:12:24.000 UTC<br><span class="ms">{since}</span>' in page
    assert '<td class="time">7</td>' in page  # a logical time alone
    assert page.count('<td class="ok">running</td>') == len(DEMO_NAMES) - 2  # kv and auction.bids
    assert '<td class="bad">stalled</td>' in page
    assert '<td class="warn">unknown</td>' in page  # the system shards report no health
    # the error, escaped, in the objects table and in the recent errors
    escaped = "ValueError: bad row &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more"
    assert page.count(escaped) == 2
    assert "<script>alert(" not in page
    # plotly.js is fetched once, from the dashboard (the page needs no network), and cached
    assert page.count(f'<script src="{plotly_js_path()}"></script>') == 1
    assert len(page) < 100_000, len(page)
    assert page.count("Plotly.newPlot(") == 3  # lag, rows/s, dependencies
    assert '<meta http-equiv="refresh" content="5">' in page
    assert "retractions" in page


def test_rows_per_second_is_the_change_of_rows_over_the_seconds_between_samples() -> None:
    history = History()
    history.observe(T0, [{"name": "kv", "rows": 100, "lag_ms": 5}])
    history.observe(T0 + 2000, [{"name": "kv", "rows": 160, "lag_ms": 7}])
    history.observe(T0 + 2500, [{"name": "kv", "rows": 150, "lag_ms": None}])
    history.observe(T0 + 3500, [{"name": "kv", "rows": None, "lag_ms": None}])
    history.observe(T0 + 4500, [{"name": "kv", "rows": 10, "lag_ms": None}])
    points = history.points()["kv"]
    assert [p.rows_per_s for p in points] == [None, 30.0, -20.0, None, None]
    assert [p.lag_ms for p in points] == [5, 7, None, None, None]


def test_history_is_bounded() -> None:
    history = History(points=5, errors=3)
    for i in range(20):
        rows = [
            {"name": "stuck", "rows": 0, "lag_ms": 1, "error": "always"},
            {"name": "kv", "rows": i, "lag_ms": 1, "error": f"error {i % 7}"},
        ]
        if i < 10:
            rows.append({"name": "gone", "rows": i, "lag_ms": 1, "error": None})
        history.observe(T0 + 1000 * i, rows)
    points = history.points()
    assert sorted(points) == ["kv", "stuck"]  # a shard gone from the sample is forgotten
    assert [p.t_ms for p in points["kv"]] == [T0 + 1000 * i for i in range(15, 20)]
    assert [p.rows_per_s for p in points["kv"]] == [1.0] * 5
    seen = [(e.name, e.error, e.first_ms, e.last_ms, e.samples) for e in history.errors()]
    assert seen == [  # the one seen last first; an error dropped and seen again starts afresh
        ("kv", "error 5", T0 + 19000, T0 + 19000, 1),
        ("stuck", "always", T0, T0 + 19000, 20),
        ("kv", "error 4", T0 + 18000, T0 + 18000, 1),
    ]


def test_the_dependency_graph_of_the_demo() -> None:
    nodes, edges = dependency_graph(DemoEngine().objects.values())
    assert nodes == {
        "auction": "source",
        **{s: "shard" for s in AUCTION_SHARDS},
        "kv": "source",
        "winning_bids": "view",
        "bids_per_user": "view",
    }
    assert edges == {("auction", s) for s in AUCTION_SHARDS} | {
        ("auction.auctions", "winning_bids"),
        ("auction.bids", "winning_bids"),
        ("auction.bids", "bids_per_user"),
    }
    assert layers(nodes, edges) == {
        "auction": 0,
        "kv": 0,
        **{s: 1 for s in AUCTION_SHARDS},
        "winning_bids": 2,
        "bids_per_user": 2,
    }
    # a view over a view is one column further
    assert layers(["a", "b", "c"], {("a", "b"), ("b", "c"), ("a", "c")}) == {"a": 0, "b": 1, "c": 2}


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::", "example.com", ""])
def test_a_host_that_is_not_loopback_is_refused(host: str) -> None:
    with pytest.raises(InvalidUsage, match="loopback"):
        Dashboard(DemoEngine(), host=host)


def test_the_endpoints() -> None:
    engine = DemoEngine()
    d = dashboard(engine, host="localhost", sample_s=0.05)
    d.sample()
    d.start()
    try:

        def get(path: str, host: str | None = None) -> tuple[int, str, str]:
            headers = {} if host is None else {"Host": host}
            request = urllib.request.Request(f"http://127.0.0.1:{d.port}{path}", headers=headers)
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, r.headers["Content-Type"], r.read().decode()

        assert get("/healthz") == (200, "text/plain; charset=utf-8", "ok")
        status, kind, body = get("/api/objects")
        assert (status, kind) == (200, "application/json")
        sample = json.loads(body)
        assert sample["sampled_ms"] == T0
        assert {r["name"] for r in sample["objects"]} >= set(AUCTION_SHARDS) | {"kv"}
        status, kind, body = get("/")
        assert (status, kind) == (200, "text/html; charset=utf-8")
        assert all(name in body for name in DEMO_NAMES)
        request = urllib.request.Request(f"http://127.0.0.1:{d.port}{plotly_js_path()}")
        with urllib.request.urlopen(request, timeout=10) as r:
            script = r.read().decode()
            assert r.headers["Content-Type"] == "text/javascript; charset=utf-8"
            assert r.headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert "plotly.js v" in script[:1000] and len(script) > 1_000_000
        with pytest.raises(urllib.error.HTTPError) as e:
            get("/nothing")
        assert e.value.code == 404
        for host in ("localhost:6876", "[::1]:6876", "127.0.0.2"):
            assert get("/healthz", host)[2] == "ok", host
        for host in ("evil.example:6876", "evil.example", "10.0.0.1", ""):
            with pytest.raises(urllib.error.HTTPError) as e:
                get("/api/objects", host)
            assert e.value.code == 403, host  # DNS rebinding: another site's page
        # the sampler thread goes on sampling
        engine.tick()
        deadline = time.monotonic() + 10
        while len(d.history.points()["kv"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(d.history.points()["kv"]) >= 3
    finally:
        d.close()


def test_a_failing_sample_is_a_recent_error_and_the_page_still_renders() -> None:
    engine = DemoEngine()
    engine.failure = OSError("consensus <unreachable>")
    d = dashboard(engine)
    try:
        d.sample()
        page = d.page()
        assert d.history.latest() == (None, [])
        assert "dashboard sampler" in page
        assert "OSError: consensus &lt;unreachable&gt;" in page
        assert "No shards yet." in page
        engine.failure = None
        d.sample()
        assert all(f"<td>{name}</td>" in d.page() for name in DEMO_NAMES)
    finally:
        d.close()


def test_the_dependency_graph_draws_a_sink_and_every_other_kind_of_object() -> None:
    engine = DemoEngine()
    engine.objects["kv_out"] = SimpleNamespace(name="kv_out", kind="sink", shards=[], reads=["kv"])
    engine.objects["odd"] = SimpleNamespace(name="odd", kind="other", shards=["odd"], reads=[])
    nodes, edges = dependency_graph(engine.objects.values())
    assert nodes["kv_out"] == "sink" and ("kv", "kv_out") in edges
    figure = graph_figure(engine.objects.values())
    drawn = {name: trace.name for trace in figure.data for name in trace.text}
    assert drawn == nodes  # every node is a marker of its kind, none an arrow into nothing
