"""Recognising a site that turns fleet away (HTTP 403/429, a captcha or bot-check page), and Retry-After."""
from __future__ import annotations

import datetime as dt
import email.utils

from fleet.weeks import utc_now

BLOCKED_STATUS = (403, 429)

# One round trip: the lowercased head of the document (title included), searched for every marker in the page.
_FIND_JS = """markers => {
  const html = (document.documentElement ? document.documentElement.outerHTML : '').slice(0, 500000).toLowerCase();
  return markers.find(m => html.includes(m)) ?? null;
}"""


async def find_marker(page, markers) -> str | None:
    """The first of ``markers`` in ``page``'s HTML, or None (also when the page cannot be read)."""
    if not markers:
        return None
    try:
        return await page.evaluate(_FIND_JS, list(markers))
    except Exception:  # a page that navigated away or closed is judged by what happens next, not here
        return None


def retry_after_s(value: str | None, now: dt.datetime | None = None) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return max(0.0, (when - (now or utc_now())).total_seconds())
