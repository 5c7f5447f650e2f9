"""A demo site for the scraper life cycle tests, on 127.0.0.1: a news page that sets a session cookie, loads its
stories by fetch with an Authorization header, adds a cache-busting image, and changes its markup from a given week.

  /news?week=W       the page (title "Newsroom"); stories come from /api/news?week=W
  /api/news?week=W   JSON stories; 401 without "Authorization: Bearer <TOKEN>"
  /logo.png?cb=N     an image the page asks for with a new N on every load
From ``change_week`` on (settable while serving), a story's headline is in ``.title`` instead of ``.headline``.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

TOKEN = "demo-token-7f3a"
COOKIE = "session=newsroom-secret-91c2"
STORIES = 12
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")

PAGE = """<!doctype html><html><head><title>Newsroom</title></head><body>
<h1>Newsroom</h1><p id="note">%(note)s</p><ul id="news"></ul>
<script>
const img = document.createElement('img'); img.src = '/logo.png?cb=' + Math.random(); document.body.appendChild(img);
fetch('/api/news?week=%(week)s', {headers: {'Authorization': 'Bearer %(token)s'}})
  .then(r => r.json()).then(stories => {
    const ul = document.getElementById('news');
    for (const s of stories) {
      const li = document.createElement('li'); li.className = 'story'; li.dataset.id = s.id;
      li.innerHTML = '<span class="%(headline)s"></span> <span class="author"></span>';
      li.children[0].textContent = s.headline; li.children[1].textContent = s.author;
      ul.appendChild(li);
    }
    document.body.dataset.loaded = '1';
  });
</script></body></html>"""


class Newsroom:
    def __init__(self, change_week: str | None = None, stories: int = STORIES):
        self.change_week = change_week
        self.note = ""  # text the page shows (settable while serving): a secret a site wrote into its page
        self.stories = stories
        self.hits: list[str] = []  # every request's path and query, in order
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "Newsroom":
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, code: int, body: bytes, ctype: str, extra: dict | None = None):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                parts = urlsplit(self.path)
                site.hits.append(self.path)
                week = (parse_qs(parts.query).get("week") or ["2026-01-05"])[0]
                if parts.path == "/news":
                    changed = site.change_week is not None and week >= site.change_week
                    body = PAGE % {"week": week, "token": TOKEN, "headline": "title" if changed else "headline",
                                   "note": site.note}
                    self.send(200, body.encode(), "text/html; charset=utf-8", {"Set-Cookie": COOKIE + "; Path=/"})
                elif parts.path == "/api/news":
                    if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                        self.send(401, b'{"error": "unauthorized"}', "application/json")
                        return
                    stories = [{"id": i, "headline": f"Story {i} of {week}", "author": None if i % 4 == 0 else f"A{i}"}
                               for i in range(site.stories)]
                    self.send(200, json.dumps(stories).encode(), "application/json")
                elif parts.path == "/logo.png":
                    self.send(200, PNG, "image/png")
                else:
                    self.send(404, b"not found", "text/plain")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


SCRAPER = '''import polars as pl

from fleet import Scraper, site_url


class News(Scraper):
    """Stories of the newsroom demo site."""

    name = "news"
    schema = {"story_id": pl.Int64, "headline": pl.String, "author": pl.String}
    key = ("story_id",)
    timeout_s = 30

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/news?week=" + ctx.week.isoformat()))
        await page.wait_for_selector("body[data-loaded]", timeout=10_000)
        await page.wait_for_selector("li.story .headline", timeout=3_000)
        for li in await page.locator("li.story").all():
            yield {"story_id": int(await li.get_attribute("data-id")),
                   "headline": await li.locator(".headline").text_content(),
                   "author": (await li.locator(".author").text_content()) or None}
'''
"""A scraper of the newsroom (its URL from fleet.site_url), for tests to write into a scrapers folder."""

FRONT = '''import polars as pl

from fleet import Scraper, site_url


class Front(Scraper):
    """The newsroom's title."""

    name = "front"
    schema = {"url": pl.String, "title": pl.String}
    key = ("url",)
    timeout_s = 30

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/news?week=front"))
        yield {"url": page.url, "title": await page.title()}
'''
"""A second newsroom scraper, of the page's title alone: it keeps working when the stories' markup changes."""


def scrapers_folder(folder, news: str = SCRAPER, front: str = FRONT):
    """``folder`` made a scrapers folder with the two newsroom scrapers (``news`` and ``front``); returns it."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "news.py").write_text(news)
    (folder / "front.py").write_text(front)
    return folder
