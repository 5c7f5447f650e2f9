"""A long crawl for the resume tests: ``/crawl?page=N`` (1..PAGES), each page a few items and a link to the next."""
from __future__ import annotations

import datetime as dt
import html

PAGES = 200
PER_PAGE = 3


def items(week: dt.date, n: int) -> list[dict]:
    return [{"code": f"C-{n:04d}-{i}", "page": n, "value": (n * 31 + i * 7 + week.toordinal()) % 1000}
            for i in range(PER_PAGE)]


def page(q: dict, week: dt.date) -> tuple[int, str]:
    """(status, body) of ``/crawl``."""
    try:
        n = int(q.get("page") or 1)
    except ValueError:
        n = 0
    if not 1 <= n <= PAGES:
        return 404, "<html><body><p>no such page</p></body></html>"
    rows = "".join(f"<li class='item'><span class='code'>{html.escape(r['code'])}</span> "
                   f"<span class='value'>{r['value']}</span></li>" for r in items(week, n))
    nxt = f"<a class='next' href='/crawl?week={week.isoformat()}&page={n + 1}'>next</a>" if n < PAGES else ""
    return 200, f"<!doctype html><html><head><title>Crawl {n}</title></head><body><ul>{rows}</ul>{nxt}</body></html>"
