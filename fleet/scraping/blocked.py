"""Recognising a site that turns fleet away (HTTP 403/429, a captcha or bot-check page), and Retry-After."""
from __future__ import annotations

import datetime as dt
import email.utils
import json

from fleet import config
from fleet.errors import FleetError
from fleet.weeks import utc_now

# Case-insensitive substrings of a page's HTML that mark a bot wall; FLEET_BLOCK_MARKERS replaces them, a
# scraper's ``block_markers`` adds its own. Specific on purpose: the word "captcha" alone is on many login forms.
DEFAULT_MARKERS = ("g-recaptcha", "h-captcha", "cf-challenge", "cf-turnstile", "challenge-platform",
                   "are you a robot", "unusual traffic from your", "verify you are human", "fleet-demo-captcha")
BLOCKED_STATUS = (403, 429)

# One round trip: the lowercased head of the document (title included), searched for every marker in the page.
_FIND_JS = """markers => {
  const html = (document.documentElement ? document.documentElement.outerHTML : '').slice(0, 500000).toLowerCase();
  return markers.find(m => html.includes(m)) ?? null;
}"""


def parse_markers(raw, setting: str) -> tuple[str, ...]:
    """``raw`` (a JSON list as text, or a list) as a tuple of lowercased non-empty strings, else a FleetError
    naming ``setting``."""
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(m, str) and m.strip() for m in value)):
        raise FleetError(f"{setting} must be a non-empty JSON list of non-empty strings "
                         f"(e.g. [\"g-recaptcha\", \"are you a robot\"]), got {raw!r}")
    return tuple(m.strip().lower() for m in value)


def markers_from_env() -> tuple[str, ...]:
    return config.block_markers()


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
