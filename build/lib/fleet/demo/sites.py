"""A small set of third-party-style websites on 127.0.0.1, for the demo scrapers and the tests.

Everything is deterministic per week (``?week=YYYY-MM-DD``): item names and keys are stable across weeks,
prices/ratings shift with the week. Every response waits ``latency_ms`` first, like a real network.

Sites (name -> path):
  books    /books                   static HTML table
  catalog  /catalog?page=N          paginated listing (5 pages of 8, "next" links)
  stocks   /stocks                  rows built by JavaScript after load (setTimeout + fetch /api/stocks)
  jobs     /jobs                    first 10 rows, a "Load more" button fetches /api/jobs (JSON)
  parts    /parts, /parts/results   search form (q) -> results page
  shops    /shops, /shops/<id>      listing; detail pages carry the rating
Faults:
  /hang                             never answers (but never blocks ``stop()``)
  /flaky?key=K                      HTTP 503 for the first 2 requests per key, then 200
  /missing                          HTTP 404 (as is any unknown path)
  /empty                            a valid page with an empty table
  /crawl?page=N                     200 pages of 3 items, each linking the next (fleet/demo/crawl.py)
  /robots.txt                       allows what the demo scrapers visit (:data:`ROBOTS`); ``<state_dir>/robots.txt``
                                    replaces it while it exists (a test's Disallow or Crawl-delay)
Site modes (per site, read on each request from ``<state_dir>/modes.json``, or set via ``/_control``):
  normal | selector_rot (a column's CSS class changes for 9 rows in 10) | volume_collapse (5% of rows) | empty
  | forbidden | captcha | rate_limited | rate_limited_long (a site that turns scrapers away: fleet/demo/walls.py)
  | renamed_classes | moved_table | changed_attribute | restyled | data_gone (books only: a redesign,
  fleet/demo/changes.py) | redesigned | promoted (catalog only: a new page template around intact rows, and a
  week's banner, counts and ad without one)
The rows are fleet/demo/data.py's, the pages fleet/demo/pages.py's; this module serves them and keeps the modes.
"""
from __future__ import annotations

import json
import os
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

from fleet import config
# The rows are read through this module too (the tests' expected rows): one import for a site and its data.
from fleet.demo.data import (EPOCH, MODES, ROT_COLUMN, SITES, apply_volume, books_rows, catalog_rows,  # noqa: F401
                             flaky_rows, jobs_rows, parts_rows, parts_search, rot_class, shops_rows, stocks_rows,
                             week_index)
from fleet.demo.pages import Handler


ROBOTS = "User-agent: *\nDisallow: /_control\nAllow: /\n"


def _modes_path(state_dir: Path | str | None) -> Path | None:
    if state_dir is None:
        state_dir = config.demo_state_dir()
    return Path(state_dir) / "modes.json" if state_dir is not None else None


def read_modes(state_dir: Path | str | None) -> dict[str, str]:
    path = _modes_path(state_dir)
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def set_mode(state_dir: Path | str, site: str, mode: str = "normal") -> None:
    """Switch ``site`` to ``mode`` for every later request of a server using ``state_dir``."""
    if site not in SITES:
        raise ValueError(f"unknown demo site {site!r}; one of {SITES}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; one of {MODES}")
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    path = _modes_path(state_dir)
    modes = read_modes(state_dir)
    if mode == "normal":
        modes.pop(site, None)
    else:
        modes[site] = mode
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(modes, sort_keys=True))
    os.replace(tmp, path)


def clear_modes(state_dir: Path | str) -> None:
    path = _modes_path(state_dir)
    if path is not None and path.exists():
        path.unlink()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    sites: "DemoSites"


class DemoSites:
    """The demo websites on ``127.0.0.1:port`` (0 = any free port), served from a background thread.

    ``state_dir`` (default: ``FLEET_DEMO_STATE_DIR``) holds ``modes.json``; without one, modes live in memory.
    """

    def __init__(self, port: int = 0, latency_ms: float | None = None, state_dir: Path | None = None):
        if latency_ms is None:
            latency_ms = config.demo_latency_ms()
        self.port = port
        self.latency_s = max(0.0, latency_ms) / 1000
        if state_dir is None:
            state_dir = config.demo_state_dir()
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.flaky_hits: dict[str, int] = {}
        self.wall_hits: dict[str, int] = {}  # per site, for the rate_limited mode
        self.requests: list[tuple[str, float, float]] = []  # (path, start, end), monotonic: what a client asked when
        self._memory_modes: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hang_started = threading.Event()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("DemoSites is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "DemoSites":
        if self._server is not None:
            return self
        self._stop.clear()
        self._server = Server(("127.0.0.1", self.port), Handler)
        self._server.sites = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"fleet-demo-sites:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stop.set()  # releases /hang and latency waits
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> "DemoSites":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- control
    def robots_txt(self) -> str:
        """The sites' robots.txt: ``<state_dir>/robots.txt`` when there is one, else :data:`ROBOTS`."""
        if self.state_dir is not None:
            try:
                return (self.state_dir / "robots.txt").read_text()
            except OSError:
                pass
        return ROBOTS

    def modes(self) -> dict[str, str]:
        if self.state_dir is not None:
            return read_modes(self.state_dir)
        with self._lock:
            return dict(self._memory_modes)

    def set_mode(self, site: str, mode: str = "normal") -> None:
        if self.state_dir is not None:
            return set_mode(self.state_dir, site, mode)
        if site not in SITES or mode not in MODES:
            raise ValueError(f"unknown site/mode {site!r}/{mode!r}; sites {SITES}, modes {MODES}")
        with self._lock:
            if mode == "normal":
                self._memory_modes.pop(site, None)
            else:
                self._memory_modes[site] = mode

    def peak_concurrency(self, path: str | None = None, since: int = 0) -> int:
        """The most requests (of ``path``, or of any) the sites were serving at one moment, from their own log of
        requests (``requests[since:]``): each source loads one page at a time, so this counts sources loading pages
        at once. A request that ends when another starts does not overlap it."""
        with self._lock:
            spans = [(start, end) for p, start, end in self.requests[since:] if path is None or p == path]
        edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])  # ends first on a tie
        peak = now = 0
        for _, step in edges:
            now += step
            peak = max(peak, now)
        return peak

    def reset_flaky(self, key: str | None = None) -> None:
        with self._lock:
            if key is None:
                self.flaky_hits.clear()
            else:
                self.flaky_hits.pop(key, None)


def site_url(path: str = "") -> str:
    """``path`` on the running demo sites (base URL from ``FLEET_DEMO_URL``)."""
    base = config.demo_url()
    if not base:
        raise RuntimeError("demo sites are not running; use `fleet demo` (FLEET_DEMO_URL is not set)")
    if path and not path.startswith("/"):
        path = "/" + path
    return base.rstrip("/") + path
