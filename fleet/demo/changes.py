"""Markup changes of the books site, the kinds a site's redesign brings (``fleet doctor`` and the structural early
warning are tested on them). Every mode but ``data_gone`` keeps the rows; only the markup around them changes:
  renamed_classes    the rows' and cells' CSS classes are renamed (``tr.book`` -> ``tr.listing-item``, ...)
  moved_table        the table moves into a new section and loses its id (the section has another)
  changed_attribute  the table's id attribute changes value (``books`` -> ``book-list``)
  restyled           a new landmark, heading, caption and column header names; every scraper locator still matches
  data_gone          the list is replaced by other items, classes renamed: none of the week's books is on the page
"""
from __future__ import annotations

import html

CHANGE_MODES = ("renamed_classes", "moved_table", "changed_attribute", "restyled", "data_gone")
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
