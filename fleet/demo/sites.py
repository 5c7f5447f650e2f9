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
Site modes (per site, read on each request from ``<state_dir>/modes.json``, or set via ``/_control``):
  normal | selector_rot (a column's CSS class changes for 9 rows in 10) | volume_collapse (5% of rows) | empty
  | forbidden | captcha | rate_limited | rate_limited_long (a site that turns scrapers away: fleet/demo/walls.py)
"""
from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
import math
import os
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from fleet.demo import crawl, walls

SITES = ("books", "catalog", "stocks", "jobs", "parts", "shops")
MODES = ("normal", "selector_rot", "volume_collapse", "empty", *walls.WALL_MODES)
# The column whose CSS class changes under ``selector_rot``, per site.
ROT_COLUMN = {"books": "price", "catalog": "price", "stocks": "close", "jobs": "salary", "parts": "price", "shops": "city"}
EPOCH = dt.date(2026, 1, 5)
CATALOG_PAGE_SIZE = 8
JOBS_BATCH = 10
PART_KINDS = ("bolt", "nut", "washer", "screw", "rivet")
FLAKY_FAILURES = 2


# --------------------------------------------------------------------------- deterministic data
def _rng(*parts) -> random.Random:
    seed = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()
    return random.Random(int(seed[:16], 16))


def week_index(week: dt.date) -> int:
    return (week - EPOCH).days // 7


def _shift(site: str, item, week: dt.date, base: float, spread: float = 0.1) -> float:
    """``base`` moved by up to +-``spread`` (fraction), differently each week."""
    return base * (1 + _rng(site, item, week.isoformat()).uniform(-spread, spread))


_ADJ = ("Silent", "Crimson", "Hidden", "Last", "Golden", "Broken", "Northern", "Quiet", "Lost", "Iron", "Paper", "Glass")
_NOUN = ("River", "Garden", "Empire", "Letter", "Harbor", "Machine", "Orchard", "Winter", "Signal", "Atlas", "Bridge", "Lantern")
_CITIES = ("Lyon", "Porto", "Ghent", "Tartu", "Basel", "Turin", "Graz", "Malmo", "Cork", "Brno")


def books_rows(week: dt.date) -> list[dict]:
    rows = []
    for i in range(24):
        r = _rng("books", i)
        isbn = "978" + "".join(str(r.randrange(10)) for _ in range(10))
        title = f"The {_ADJ[i % 12]} {_NOUN[(i * 5) % 12]}"
        rows.append({"isbn": isbn, "title": title, "price": round(_shift("books", i, week, r.uniform(6, 40)), 2)})
    return rows


def catalog_rows(week: dt.date) -> list[dict]:
    cats = ("kitchen", "garden", "office", "toys")
    rows = []
    for i in range(40):
        r = _rng("catalog", i)
        rows.append({"sku": f"SKU-{1000 + i}", "name": f"{_ADJ[(i * 7) % 12]} {_NOUN[i % 12].lower()} set",
                     "category": cats[i % 4], "price": round(_shift("catalog", i, week, r.uniform(3, 120)), 2)})
    return rows


def stocks_rows(week: dt.date) -> list[dict]:
    rows = []
    for i in range(20):
        r = _rng("stocks", i)
        symbol = "".join(chr(65 + r.randrange(26)) for _ in range(3)) + str(i % 10)
        base = r.uniform(10, 500)
        close = round(_shift("stocks", i, week, base, 0.2), 2)
        prev = round(_shift("stocks", i, week - dt.timedelta(days=7), base, 0.2), 2)
        rows.append({"symbol": symbol, "company": f"{_NOUN[i % 12]} {_ADJ[(i * 3) % 12]} Corp",
                     "close": close, "change_pct": round((close - prev) / prev * 100, 2)})
    return rows


def jobs_rows(week: dt.date) -> list[dict]:
    titles = ("Data engineer", "Line cook", "Nurse", "Electrician", "Teacher", "Welder", "Accountant")
    rows = []
    for i in range(35):
        r = _rng("jobs", i)
        rows.append({"job_id": 5000 + i, "title": titles[i % 7], "city": _CITIES[(i * 3) % 10],
                     "salary": int(round(_shift("jobs", i, week, r.uniform(28_000, 90_000), 0.05), -2))})
    return rows


def parts_rows(week: dt.date) -> list[dict]:
    """The whole parts inventory (30 parts, 6 per kind); the site only shows it through search."""
    rows = []
    for i in range(30):
        kind = PART_KINDS[i % 5]
        r = _rng("parts", i)
        size = f"M{(i // 5) * 2 + 3}"
        rows.append({"part_no": f"P-{i:04d}", "name": f"{size} {kind} ({('zinc', 'steel', 'brass')[i % 3]})",
                     "price": round(_shift("parts", i, week, r.uniform(0.05, 3)), 3),
                     "in_stock": (week_index(week) + i) % 4 != 0})
    return rows


def parts_search(week: dt.date, q: str) -> list[dict]:
    q = q.strip().lower()
    return [row for row in parts_rows(week) if q and q in row["name"].lower()]


def shops_rows(week: dt.date) -> list[dict]:
    """Shops with their detail-page field ``rating``."""
    rows = []
    for i in range(15):
        r = _rng("shops", i)
        rows.append({"shop_id": f"s{i:03d}", "name": f"{_ADJ[(i * 5) % 12]} {_NOUN[(i * 7) % 12]} Shop",
                     "city": _CITIES[i % 10], "visitors": int(_shift("shops", i, week, r.uniform(200, 5000), 0.3)),
                     "rating": round(min(5.0, _shift("shops-rating", i, week, r.uniform(2.5, 4.8), 0.05)), 1)})
    return rows


def flaky_rows(week: dt.date) -> list[dict]:
    return [{"code": f"F{i}", "value": round(_shift("flaky", i, week, 10 + i), 2)} for i in range(5)]


def apply_volume(rows: list, mode: str) -> list:
    """What a site shows of ``rows`` in ``mode``: all, 5% (at least one), or nothing."""
    if mode == "empty":
        return []
    if mode == "volume_collapse":
        return rows[: max(1, round(len(rows) * 0.05))]
    return rows


def rot_class(col: str, i: int, site: str, mode: str) -> str:
    """The CSS class of a cell; under ``selector_rot`` the site's rot column is renamed for 9 rows in 10."""
    if mode == "selector_rot" and ROT_COLUMN.get(site) == col and i % 10 != 0:
        return col + "-v2"
    return col


# --------------------------------------------------------------------------- modes
def _modes_path(state_dir: Path | str | None) -> Path | None:
    if state_dir is None:
        env = os.environ.get("FLEET_DEMO_STATE_DIR")
        state_dir = Path(env) if env else None
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


# --------------------------------------------------------------------------- HTML
def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _page(title: str, body: str, head: str = "") -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>{head}</head>"
            f"<body><h1>{_e(title)}</h1>{body}</body></html>")


def _cells(site: str, mode: str, i: int, row: dict, cols: list[str], fmt: dict | None = None) -> str:
    fmt = fmt or {}
    return "".join(f"<td class='{rot_class(c, i, site, mode)}'>{_e(fmt.get(c, str)(row[c]))}</td>" for c in cols)


def _table(site: str, mode: str, rows: list[dict], cols: list[str], row_class: str, table_id: str,
           fmt: dict | None = None, start: int = 0) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join(f"<tr class='{row_class}'>{_cells(site, mode, start + i, r, cols, fmt)}</tr>" for i, r in enumerate(rows))
    return f"<table id='{table_id}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STOCKS_JS = """
<script>
window.addEventListener('load', () => setTimeout(async () => {
  const res = await fetch('/api/stocks?week=' + encodeURIComponent(WEEK));
  const data = await res.json();
  const tbody = document.querySelector('#quotes tbody');
  for (const r of data.rows) {
    const tr = document.createElement('tr');
    tr.className = 'quote';
    for (const [col, cls] of [['symbol', 'symbol'], ['company', 'company'], ['close', r._close_class], ['change_pct', 'change_pct']]) {
      const td = document.createElement('td');
      td.className = cls;
      td.textContent = col === 'change_pct' ? r[col].toFixed(2) + '%' : String(r[col]);
      tr.appendChild(td);
    }
    tbody.appendChild(tr);
  }
  document.querySelector('#quotes').dataset.ready = '1';
}, 300));
</script>"""

_JOBS_JS = """
<script>
async function loadMore(btn) {
  btn.disabled = true;
  const res = await fetch('/api/jobs?week=' + encodeURIComponent(WEEK) + '&offset=' + btn.dataset.offset + '&limit=%d');
  const data = await res.json();
  const tbody = document.querySelector('#jobs tbody');
  for (const r of data.rows) {
    const tr = document.createElement('tr');
    tr.className = 'job';
    for (const col of ['job_id', 'title', 'city', 'salary']) {
      const td = document.createElement('td');
      td.className = col === 'salary' ? r._salary_class : col;
      td.textContent = col === 'salary' ? r.salary.toLocaleString('en-US') : String(r[col]);
      tr.appendChild(td);
    }
    tbody.appendChild(tr);
  }
  if (data.next_offset === null) { btn.remove(); } else { btn.dataset.offset = data.next_offset; btn.disabled = false; }
}
</script>""" % JOBS_BATCH


# --------------------------------------------------------------------------- server
class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    # -- plumbing
    def _send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8", headers: dict | None = None) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _json(self, obj, status: int = 200) -> None:
        self._send(status, json.dumps(obj), "application/json")

    def do_HEAD(self):
        self.do_GET()

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.do_GET()

    def do_GET(self):
        sites: DemoSites = self.server.sites
        started = time.monotonic()
        try:
            self._get(sites)
        finally:
            sites.requests.append((urlsplit(self.path).path, started, time.monotonic()))

    def _get(self, sites: "DemoSites"):
        if sites.latency_s > 0 and sites._stop.wait(sites.latency_s):
            self.close_connection = True
            return
        parts = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        path = parts.path.rstrip("/") or "/"
        try:
            week = dt.date.fromisoformat(q["week"]) if q.get("week") else dt.date.today() - dt.timedelta(days=dt.date.today().weekday())
        except ValueError:
            return self._send(400, _page("Bad request", f"<p>bad week {_e(q['week'])}</p>"))
        modes = sites.modes()
        site = path.strip("/").split("/")[0]
        wall = walls.answer(sites, site, modes.get(site)) if site in SITES else None
        if wall is not None:
            return self._send(wall[0], wall[1], headers=wall[2])
        try:
            self._route(path, q, week, modes, sites)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _route(self, path: str, q: dict, week: dt.date, modes: dict, sites: "DemoSites") -> None:
        wk = week.isoformat()
        head = f"<script>const WEEK = {json.dumps(wk)};</script>"
        if path == "/":
            links = "".join(f"<li><a href='/{s}?week={wk}'>{s}</a></li>" for s in SITES)
            return self._send(200, _page("Demo sites", f"<ul>{links}</ul>"))
        if path == "/books":
            m = modes.get("books", "normal")
            rows = apply_volume(books_rows(week), m)
            table = _table("books", m, rows, ["isbn", "title", "price"], "book", "books", {"price": lambda p: f"£{p:.2f}"})
            return self._send(200, _page(f"Books, week {wk}", table))
        if path == "/catalog":
            m = modes.get("catalog", "normal")
            rows = apply_volume(catalog_rows(week), m)
            pages = max(1, math.ceil(len(rows) / CATALOG_PAGE_SIZE))
            try:
                n = int(q.get("page") or 1)
            except ValueError:
                n = 0
            if not 1 <= n <= pages:
                return self._send(404, _page("Not found", f"<p>no page {_e(q.get('page'))}</p>"))
            start = (n - 1) * CATALOG_PAGE_SIZE
            chunk = rows[start:start + CATALOG_PAGE_SIZE]
            items = "".join(
                f"<li class='product'><span class='sku'>{_e(r['sku'])}</span> <span class='name'>{_e(r['name'])}</span> "
                f"<span class='category'>{_e(r['category'])}</span> "
                f"<span class='{rot_class('price', start + i, 'catalog', m)}'>{r['price']:.2f}</span></li>"
                for i, r in enumerate(chunk))
            nav = f"<span class='page-info'>page {n} of {pages}</span>"
            if n < pages:
                nav += f" <a rel='next' class='next' href='/catalog?week={wk}&page={n + 1}'>next &raquo;</a>"
            return self._send(200, _page(f"Catalog, page {n}", f"<ul id='products'>{items}</ul><nav>{nav}</nav>"))
        if path == "/stocks":
            body = ("<table id='quotes'><thead><tr><th>Symbol</th><th>Company</th><th>Close</th><th>Change</th></tr></thead>"
                    "<tbody></tbody></table><noscript>This page needs JavaScript.</noscript>")
            return self._send(200, _page(f"Quotes, week {wk}", body, head + _STOCKS_JS))
        if path == "/api/stocks":
            m = modes.get("stocks", "normal")
            rows = [dict(r, _close_class=rot_class("close", i, "stocks", m))
                    for i, r in enumerate(apply_volume(stocks_rows(week), m))]
            return self._json({"week": wk, "rows": rows})
        if path == "/jobs":
            m = modes.get("jobs", "normal")
            rows = apply_volume(jobs_rows(week), m)
            first = rows[:JOBS_BATCH]
            table = _table("jobs", m, first, ["job_id", "title", "city", "salary"], "job", "jobs", {"salary": lambda s: f"{s:,}"})
            button = (f"<button id='load-more' data-offset='{len(first)}' onclick='loadMore(this)'>Load more</button>"
                      if len(rows) > len(first) else "")
            return self._send(200, _page(f"Jobs, week {wk}", table + button, head + _JOBS_JS))
        if path == "/api/jobs":
            m = modes.get("jobs", "normal")
            rows = apply_volume(jobs_rows(week), m)
            offset, limit = int(q.get("offset") or 0), int(q.get("limit") or JOBS_BATCH)
            chunk = [dict(r, _salary_class=rot_class("salary", offset + i, "jobs", m))
                     for i, r in enumerate(rows[offset:offset + limit])]
            nxt = offset + limit if offset + limit < len(rows) else None
            return self._json({"week": wk, "rows": chunk, "total": len(rows), "next_offset": nxt})
        if path in ("/parts", "/parts/results"):
            m = modes.get("parts", "normal")
            form = (f"<form id='search' action='/parts/results' method='get'><input type='hidden' name='week' value='{wk}'>"
                    f"<input id='q' name='q' type='search' placeholder='bolt, nut, ...' value='{_e(q.get('q', ''))}'>"
                    f"<button type='submit'>Search</button></form>")
            if path == "/parts":
                return self._send(200, _page("Parts search", form))
            hits = apply_volume(parts_search(week, q.get("q", "")), m)
            table = _table("parts", m, hits, ["part_no", "name", "price", "in_stock"], "part", "results",
                           {"price": lambda p: f"{p:.3f}", "in_stock": lambda s: "yes" if s else "no"})
            body = form + f"<p id='result-count'>{len(hits)} results for “{_e(q.get('q', ''))}”</p>" + table
            return self._send(200, _page("Parts search results", body))
        if path == "/shops":
            m = modes.get("shops", "normal")
            rows = apply_volume(shops_rows(week), m)
            body = "".join(
                f"<tr class='shop'><td class='shop_id'>{_e(r['shop_id'])}</td>"
                f"<td class='name'><a href='/shops/{_e(r['shop_id'])}?week={wk}'>{_e(r['name'])}</a></td>"
                f"<td class='{rot_class('city', i, 'shops', m)}'>{_e(r['city'])}</td>"
                f"<td class='visitors'>{r['visitors']}</td></tr>" for i, r in enumerate(rows))
            return self._send(200, _page(f"Shops, week {wk}", f"<table id='shops'><tbody>{body}</tbody></table>"))
        if path.startswith("/shops/"):
            shop_id = path.split("/", 2)[2]
            found = [r for r in shops_rows(week) if r["shop_id"] == shop_id]
            if not found:
                return self._send(404, _page("Not found", f"<p>no shop {_e(shop_id)}</p>"))
            r = found[0]
            body = (f"<dl id='shop'><dt>Name</dt><dd class='name'>{_e(r['name'])}</dd><dt>City</dt><dd class='city'>{_e(r['city'])}</dd>"
                    f"<dt>Rating</dt><dd class='rating'>{r['rating']:.1f}</dd></dl>")
            return self._send(200, _page(r["name"], body))
        if path == "/hang":
            sites._hang_started.set()
            while not sites._stop.wait(0.05):
                pass
            self.close_connection = True
            return
        if path == "/flaky":
            key = q.get("key", "")
            with sites._lock:
                sites.flaky_hits[key] = n = sites.flaky_hits.get(key, 0) + 1
            if n <= FLAKY_FAILURES:
                return self._send(503, _page("Service unavailable", f"<p>try again ({n})</p>"))
            table = _table("flaky", "normal", flaky_rows(week), ["code", "value"], "item", "items")
            return self._send(200, _page(f"Flaky feed, week {wk}", table))
        if path == "/crawl":
            return self._send(*crawl.page(q, week))
        if path == "/empty":
            return self._send(200, _page(f"Feed, week {wk}", "<table id='items'><tbody></tbody></table><p>No items this week.</p>"))
        if path == "/_control":
            if "site" in q:
                try:
                    sites.set_mode(q["site"], q.get("mode", "normal"))
                except ValueError as exc:
                    return self._json({"error": str(exc)}, 400)
            if "reset" in q:
                sites.reset_flaky(q["reset"] or None)
            return self._json({"modes": sites.modes(), "flaky_hits": dict(sites.flaky_hits)})
        return self._send(404, _page("Not found", f"<p>nothing at {_e(path)}</p>"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    sites: "DemoSites"


class DemoSites:
    """The demo websites on ``127.0.0.1:port`` (0 = any free port), served from a background thread.

    ``state_dir`` (default: env ``FLEET_DEMO_STATE_DIR``) holds ``modes.json``; without one, modes live in memory.
    """

    def __init__(self, port: int = 0, latency_ms: float | None = None, state_dir: Path | None = None):
        if latency_ms is None:
            from fleet.config import env_number  # a FleetError naming the variable, as for every FLEET_ setting

            latency_ms = env_number("FLEET_DEMO_LATENCY_MS", 50.0)
        self.port = port
        self.latency_s = max(0.0, latency_ms) / 1000
        if state_dir is None and os.environ.get("FLEET_DEMO_STATE_DIR"):
            state_dir = Path(os.environ["FLEET_DEMO_STATE_DIR"])
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.flaky_hits: dict[str, int] = {}
        self.wall_hits: dict[str, int] = {}  # per site, for the rate_limited mode
        self.requests: list[tuple[str, float, float]] = []  # (path, start, end), monotonic: what a client asked when
        self._memory_modes: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hang_started = threading.Event()
        self._server: _Server | None = None
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
        self._server = _Server(("127.0.0.1", self.port), _Handler)
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

    def reset_flaky(self, key: str | None = None) -> None:
        with self._lock:
            if key is None:
                self.flaky_hits.clear()
            else:
                self.flaky_hits.pop(key, None)


def site_url(path: str = "") -> str:
    """``path`` on the running demo sites (base URL from env ``FLEET_DEMO_URL``)."""
    base = os.environ.get("FLEET_DEMO_URL", "").strip()
    if not base:
        raise RuntimeError("demo sites are not running; use `fleet demo` (FLEET_DEMO_URL is not set)")
    if path and not path.startswith("/"):
        path = "/" + path
    return base.rstrip("/") + path
