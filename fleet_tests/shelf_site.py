"""A bookshop page for ``fleet doctor``'s tests, served on 127.0.0.1: last week's markup (``normal``) and this week's
(a redesign: ``renamed_classes``, ``moved_table``, ``changed_attribute``, ``testids``, ``data_gone``), and scrapers
reading it in each idiom a scraper author writes (Playwright locator chains)."""
from __future__ import annotations

import html
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BOOKS = [{"isbn": f"978-0-{1000 + i}", "title": f"Volume {i} of the long story", "price": f"£{9.5 + i:.2f}",
          "link": f"/book/{1000 + i}"} for i in range(12)]
MODES = ("normal", "renamed_classes", "moved_table", "changed_attribute", "testids", "data_gone")
RENAMED = {"book": "listing-item", "isbn": "item-code", "title": "item-name", "price": "item-cost", "more": "item-link"}


def page(mode: str) -> str:
    """The shelf as ``mode`` shows it. Last week's page has classes, test ids and a labelled title cell; each
    change breaks some of them and keeps the books (but ``data_gone``)."""
    e = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    books = BOOKS if mode != "data_gone" else [{"isbn": f"000-{i}", "title": f"Gift card {i}", "price": "£5.00",
                                                "link": f"/gift/{i}"} for i in range(4)]
    cls = RENAMED if mode in ("renamed_classes", "data_gone") else {}
    tid = {"changed_attribute": "item-", "testids": "shelf-"}.get(mode, "")
    # testids: classes gone, every part carries its own (new) test id
    c = (lambda k: "") if mode == "testids" else (lambda k: f" class='{cls.get(k, k)}'")
    body = "".join(
        f"<tr{c('book')} data-testid='{tid}book'>"
        f"<td{c('isbn')} data-testid='{tid}isbn'>{e(b['isbn'])}</td>"
        f"<td{c('title')} aria-label='{'Name' if mode == 'changed_attribute' else 'Title'}'>{e(b['title'])}</td>"
        f"<td{c('price')}>{e(b['price'])}</td>"
        f"<td{c('more')}><a href='{e(b['link'])}'>more</a></td></tr>" for b in books)
    table_id = {"moved_table": "", "changed_attribute": " id='book-list'"}.get(mode, " id='books'")
    table = (f"<table{table_id}><thead><tr><th>ISBN</th><th>Title</th><th>Price</th><th></th></tr></thead>"
             f"<tbody>{body}</tbody></table>")
    if mode == "moved_table":
        table = f"<nav><a href='/'>Home</a></nav><main><section id='shelf'><h2>On the shelf</h2>{table}</section></main>"
    return f"<!doctype html><html><head><title>Shelf</title></head><body><h1>The shelf</h1>{table}</body></html>"


class ShelfSite:
    """The shelf on a free port; ``mode`` is this week's markup; ``stop()`` takes the site down."""

    def __init__(self):
        self.mode = "normal"
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = page(site.mode).encode() if self.path.startswith("/shelf") else b"not found"
                self.send_response(200 if self.path.startswith("/shelf") else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread = None


HEAD = '''import polars as pl

from fleet import Scraper, site_url


class Shelf(Scraper):
    """The shelf, read with Playwright locators."""

    name = "shelf"
    schema = {"isbn": pl.String, "title": pl.String, "price": pl.Float64, "link": pl.String}
    key = ("isbn",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/shelf?week=" + ctx.week.isoformat()))
'''

# Each idiom's body of scrape(), after its goto.
IDIOMS = {
    # the README's: rows from .all(), each field a nested row.locator(CSS).inner_text()
    "readme": '''        for row in await page.locator("table#books tr.book").all():
            price = await row.locator("td.price").inner_text()
            yield {"isbn": await row.locator("td.isbn").inner_text(),
                   "title": await row.locator("td.title").inner_text(),
                   "price": float(price.lstrip("£")),
                   "link": await row.locator("td.more a").get_attribute("href")}
''',
    # a bound locator walked with nth(i); fields by position, XPath, first, text_content
    "nth": '''        rows = page.locator("#books").locator("tr.book")
        for i in range(await rows.count()):
            row = rows.nth(i)
            yield {"isbn": (await row.locator("td").first.text_content()).strip(),
                   "title": await row.locator("xpath=td[contains(@class, 'title')]").inner_text(),
                   "price": float((await row.locator("td.price").inner_text()).lstrip("£")),
                   "link": await row.get_by_role("link", name="more").get_attribute("href")}
''',
    # test ids, roles, labels and text
    "testid": '''        for row in await page.get_by_test_id("book").all():
            yield {"isbn": await row.get_by_test_id("isbn").inner_text(),
                   "title": await row.get_by_label("Title").inner_text(),
                   "price": float((await row.get_by_role("cell").nth(2).inner_text()).lstrip("£")),
                   "link": await row.get_by_text("more", exact=True).get_attribute("href")}
''',
    # rows kept in a list, and a scraper that fails (its page kept as evidence) when it finds none
    "guarded": '''        books = await page.locator("table#books tr.book").all()
        if not books:
            raise RuntimeError("no books on the shelf")
        for book in books:
            yield {"isbn": await book.locator(".isbn").inner_text(),
                   "title": await book.locator(".title").text_content(),
                   "price": float((await book.locator(".price").inner_text()).lstrip("£")),
                   "link": await book.locator("a").get_attribute("href")}
''',
}


def scraper(idiom: str) -> str:
    return HEAD + IDIOMS[idiom]
