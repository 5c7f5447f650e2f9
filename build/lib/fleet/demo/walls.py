"""Site modes that turn a scraper away, for the ``blocked`` category: 403, 429 (with Retry-After), a captcha page.

They apply to a site's own pages (``/books``, ``/catalog?page=N``, ...), not to its JSON APIs:
  forbidden          HTTP 403
  captcha            HTTP 200 with a bot-check page (marker class ``fleet-demo-captcha``)
  rate_limited       every other request to the site is HTTP 429 with ``Retry-After: 1``: a client that waits gets in
  rate_limited_long  HTTP 429 with ``Retry-After: 3600``, always
"""
from __future__ import annotations

WALL_MODES = ("forbidden", "captcha", "rate_limited", "rate_limited_long")
CAPTCHA_PAGE = ("<!doctype html><html><head><title>Just a moment...</title></head><body>"
                "<div class='fleet-demo-captcha'><h1>Are you a robot?</h1><p>Tick the box to continue.</p>"
                "<input type='checkbox' id='not-a-robot'></div></body></html>")


def answer(sites, site: str, mode: str | None) -> tuple[int, str, dict] | None:
    """(status, body, headers) the wall answers with for a page of ``site`` in ``mode``, or None to serve it."""
    if mode not in WALL_MODES:
        return None
    if mode == "forbidden":
        return 403, "<html><body><h1>403 Forbidden</h1><p>Access denied.</p></body></html>", {}
    if mode == "captcha":
        return 200, CAPTCHA_PAGE, {}
    if mode == "rate_limited_long":
        return 429, "<html><body><h1>Too many requests</h1></body></html>", {"Retry-After": "3600"}
    with sites._lock:
        sites.wall_hits[site] = n = sites.wall_hits.get(site, 0) + 1
    if n % 2:
        return 429, "<html><body><h1>Too many requests</h1></body></html>", {"Retry-After": "1"}
    return None
