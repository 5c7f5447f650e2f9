"""Markup changes of the books site, the kinds a site's redesign brings (``fleet doctor`` and the structural early
warning are tested on them). Every mode but ``data_gone`` keeps the rows; only the markup around them changes:
  renamed_classes    the rows' and cells' CSS classes are renamed (``tr.book`` -> ``tr.listing-item``, ...)
  moved_table        the table moves into a new section and loses its id (the section has another)
  changed_attribute  the table's id attribute changes value (``books`` -> ``book-list``)
  restyled           a new landmark, heading, caption and column header names; every scraper locator still matches
  data_gone          the list is replaced by other items, classes renamed: none of the week's books is on the page
and of the catalog site, both keeping every row and every locator's match:
  redesigned         the page template changes: a header with a site navigation, an aside, a footer, a new
                     heading, and the product list with its pagination moved into a main landmark's section
  promoted           what changes every week on a live shop without a redesign: a rotating banner (another slogan
                     and end date each week), a line with the week's count and date, an ad that comes and goes
"""
from __future__ import annotations

import datetime as dt
import html

CHANGE_MODES = ("renamed_classes", "moved_table", "changed_attribute", "restyled", "data_gone")
CATALOG_MODES = ("redesigned", "promoted")
_SLOGANS = ("Spring clean-up: 20% off", "Free delivery over £50", "New in: garden tools", "Two for one on toys",
            "Last chance: office chairs")
_RENAMED = {"book": "listing-item", "isbn": "item-code", "title": "item-name", "price": "item-cost"}


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def books_table(rows: list[dict], mode: str) -> str:
    """The books list as ``mode`` shows it (``rows`` as the site's data has them, prices in pounds)."""
    if mode == "data_gone":
        rows = [{"isbn": f"000-{i:04d}", "title": f"Gift card {i}", "price": 5.0 * (i + 1)} for i in range(4)]
    cls = _RENAMED if mode in ("renamed_classes", "data_gone") else {}
    cols = ("isbn", "title", "price")
    head = "".join(f"<th>{_e(('ISBN', 'Book title', 'Price (GBP)')[i] if mode == 'restyled' else c)}</th>"
                   for i, c in enumerate(cols))
    body = "".join(
        f"<tr class='{cls.get('book', 'book')}'>" + "".join(
            f"<td class='{cls.get(c, c)}'>{_e(f'£{r[c]:.2f}' if c == 'price' else r[c])}</td>" for c in cols) + "</tr>"
        for r in rows)
    table_id = {"moved_table": "", "changed_attribute": " id='book-list'"}.get(mode, " id='books'")
    caption = "<caption>Prices this week</caption>" if mode == "restyled" else ""
    table = f"<table{table_id}>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if mode == "moved_table":
        return f"<nav><a href='/'>Home</a></nav><main><section id='shelf'><h2>On the shelf</h2>{table}</section></main>"
    if mode == "restyled":
        return f"<main aria-label='Bookshop'><h2>Our books</h2>{table}</main>"
    return table


def catalog_page(listing: str, rows: int, mode: str, week: dt.date) -> str:
    """The body of a catalog page around ``listing`` (its product list and pagination) as ``mode`` shows it."""
    if mode == "redesigned":
        return ("<header><a href='/'>Demo shop</a><nav aria-label='Site'><a href='/'>Home</a> "
                "<a href='/catalog'>Catalog</a></nav></header>"
                f"<main><section aria-label='Products'><h2>All products</h2>{listing}</section></main>"
                "<aside><h2>Bestsellers</h2><p>See what others bought.</p></aside>"
                "<footer><p>&copy; 2026 Demo shop</p></footer>")
    if mode == "promoted":
        k = week.toordinal() // 7  # a week's number: what rotates
        ends = week + dt.timedelta(days=3 + k % 4)
        banner = (f"<div class='banner'><h2>{_e(_SLOGANS[k % len(_SLOGANS)])}</h2>"
                  f"<p>Offer ends {ends:%A %d %B %Y}.</p></div>")
        count = f"<p class='count'>{rows} products, updated {week.isoformat()}</p>"
        ad = f"<aside class='ad'><p>Sponsored: {_e(_SLOGANS[(k + 2) % len(_SLOGANS)])}</p></aside>" if k % 2 else ""
        return banner + count + listing + ad
    return listing
