"""The dashboard of ``timeshard serve`` in a real headless browser: Debian's Chromium.

The dashboard serves the demo's objects from the scripted engine of
``tests/unit/test_dashboard.py`` (no Spark). Chromium takes a screenshot of
the page, which must be a PNG of the window's size that is not blank, and
dumps the DOM after the page's scripts ran, which must name every object of
the demo and hold the plots plotly drew.

Without a Chromium binary the test is skipped with the reason printed --
except when ``CI`` is set: then it fails (``scripts/bootstrap.sh`` installs
Chromium when ``TIMESHARD_NEED_CHROMIUM=1``, as ``scripts/test.sh`` sets).
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.unavailable import skip_or_fail
from tests.unit.test_dashboard import DEMO_NAMES, SCRIPT_ERROR, Clock, DemoEngine

from timeshard.server.dashboard import Dashboard

pytestmark = pytest.mark.browser

BROWSERS = ("chromium", "chromium-browser", "chromium-headless-shell")
WIDTH, HEIGHT = 1400, 1800
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path is not None:
            return path
    skip_or_fail(f"no Chromium binary ({', '.join(BROWSERS)}) on PATH", "browser")


@pytest.fixture
def dashboard() -> Iterator[Dashboard]:
    """The demo's objects after ten ticks of 2 s, one stalled, on a page that does not reload."""
    engine = DemoEngine()
    engine.errors["auction.bids"] = SCRIPT_ERROR
    d = Dashboard(engine, sample_s=3600, refresh_s=3600, clock=Clock(engine))
    for _ in range(10):
        d.sample()
        engine.tick(2000)
    d.start()
    yield d
    d.close()


def run_chromium(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    command = [
        chromium,
        "--headless",
        "--no-sandbox",  # the tests run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",  # lets plotly draw before the capture
        *args,
    ]
    done = subprocess.run(command, capture_output=True, timeout=180, check=False)
    assert done.returncode == 0, (command, done.returncode, done.stderr.decode()[-3000:])
    return done


def test_the_page_in_chromium_shows_the_demo_objects(
    chromium: str, dashboard: Dashboard, tmp_path: Path
) -> None:
    shot = tmp_path / "dashboard.png"
    run_chromium(
        chromium,
        tmp_path / "profile",
        f"--screenshot={shot}",
        f"--window-size={WIDTH},{HEIGHT}",
        dashboard.url,
    )
    assert shot.is_file(), f"chromium wrote no screenshot at {shot}"
    data = shot.read_bytes()
    check_png_structure(data, WIDTH, HEIGHT)
    check_png_colours(data, WIDTH, HEIGHT)

    dom = run_chromium(chromium, tmp_path / "profile", "--dump-dom", dashboard.url).stdout.decode()
    for name in DEMO_NAMES:
        assert f"<td>{name}</td>" in dom, name  # the objects table
    assert dom.count('class="plot-container plotly"') == 3, "plotly drew lag, rows/s and the graph"
    assert dom.count('class="main-svg"') >= 6
    graph = dom[dom.index('id="plot-graph"') :]
    for name in DEMO_NAMES:
        assert f">{name}</text>" in graph, f"the dependency graph names {name}"
    assert "&lt;script&gt;alert(" in dom and "<script>alert(" not in dom


def check_png_structure(data: bytes, width: int, height: int) -> None:
    """Fail unless ``data`` is a whole 8-bit RGB(A) PNG of ``width`` x ``height`` that is
    not one colour: every chunk's CRC holds, the image data inflates to its scanlines,
    and many of them differ."""
    assert data[:8] == PNG_SIGNATURE, data[:8]
    chunks: list[tuple[bytes, bytes]] = []
    pos = 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in chunk {kind!r} at {pos}"
        chunks.append((kind, body))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", [k for k, _ in chunks]
    w, h, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (w, h) == (width, height)
    assert (depth, colour_type, interlace) in ((8, 2, 0), (8, 6, 0)), (depth, colour_type)
    stride = 1 + width * (3 if colour_type == 2 else 4)
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    assert len(raw) == height * stride
    scanlines = {raw[y * stride : (y + 1) * stride] for y in range(height)}
    assert len(scanlines) > 200, f"{len(scanlines)} distinct scanlines: a blank page?"


def check_png_colours(data: bytes, width: int, height: int) -> None:
    """With Pillow installed: the PNG decodes to ``width`` x ``height`` pixels of many
    colours, the background covering less than 95% of them (a line of text covers ~0.01%)."""
    try:
        from PIL import Image
    except ImportError:
        return  # check_png_structure has checked what it can without a decoder
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (width, height)
        colours = image.convert("RGB").getcolors(maxcolors=width * height)
    assert colours is not None
    background = max(count for count, _ in colours) / (width * height)
    assert len(colours) > 500 and background < 0.95, (len(colours), background)
