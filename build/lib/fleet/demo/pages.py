"""The demo sites' pages: HTML and JSON for every path (fleet/demo/sites.py lists them), served by :class:`Handler`."""
from __future__ import annotations

import datetime as dt
import html
import json
import math
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from fleet.demo import changes, crawl, walls
from fleet.demo.data import (CATALOG_PAGE_SIZE, FLAKY_FAILURES, JOBS_BATCH, SITES, apply_volume, books_rows,
                             catalog_rows, flaky_rows, jobs_rows, parts_search, rot_class, shops_rows, stocks_rows)
from fleet.weeks import current_week

if TYPE_CHECKING:
    from fleet.demo.sites import DemoSites, Server


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


class Handler(BaseHTTPRequestHandler):
    server: "Server"
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
        sites = self.server.sites
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
            week = dt.date.fromisoformat(q["week"]) if q.get("week") else current_week()
        except ValueError:
            return self._send(400, _page("Bad request", f"<p>bad week {_e(q['week'])}</p>"))
        if path == "/robots.txt":  # fleet obeys it (fleet/scraping/robots.py)
            return self._send(200, sites.robots_txt(), "text/plain; charset=utf-8")
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
            table = (changes.books_table(rows, m) if m in changes.CHANGE_MODES else
                     _table("books", m, rows, ["isbn", "title", "price"], "book", "books", {"price": lambda p: f"£{p:.2f}"}))
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
            listing = f"<ul id='products'>{items}</ul><nav>{nav}</nav>"
            return self._send(200, _page(f"Catalog, page {n}", changes.catalog_page(listing, len(rows), m, week)))
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
