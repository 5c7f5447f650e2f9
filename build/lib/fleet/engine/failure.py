"""The line a failed attempt is known by (its stored ``error``, `fleet run`'s table, the alerts): the call that
failed and its locator or selector, what went wrong, the URL, and the commands that show more. Playwright puts
the call and what went wrong on its message's first line and the locator in the call log after it; the rest of
that log (each retry, each element it resolved to) is in the attempt's trace and its ``error.txt``."""
from __future__ import annotations

import re

CALL_LOG = "Call log:"
# the call log's line that names what the call waited for, or where it went
_TARGET = re.compile(r"^\s*-\s+((?:waiting for|navigating to) .*)$")
# a locator's call, or a page's call given a selector: Playwright names either as a locator in the call log
_SELECTOR = re.compile(r"\b(?:Locator|FrameLocator)\.|\b(?:locator|get_by_\w+|frame_locator)\(|_selector\b")


def describe(exc: BaseException) -> str:
    """``Type: first line[, what it waited for]``: Playwright's ``Locator.inner_text: Timeout 30000ms exceeded.``
    keeps ``waiting for locator("td.price")`` from its call log, and drops the rest of it."""
    text = str(exc).strip()
    if CALL_LOG not in text:
        return f"{type(exc).__name__}: {text}"
    head, _, log = text.partition(CALL_LOG)
    target = next((m.group(1).strip() for m in map(_TARGET.match, log.splitlines()) if m), None)
    head = head.strip().rstrip(".")
    where = re.match(r'navigating to "([^"]*)"', target or "")
    if where and where.group(1) in head:  # "Page.goto: net::ERR_ABORTED at URL" says it already
        target = None
    return f"{type(exc).__name__}: {head}" + (f", {target}" if target else "")


def names_selector(line: str) -> bool:
    """Whether the failing call was a locator's or a selector's (what ``fleet doctor`` repairs)."""
    return bool(_SELECTOR.search(line))


def one_line(error: str, *, source: str, week: str, url: str | None, trace: bool, doctor: bool) -> str:
    """``error`` (already one line) with the URL it failed at, unless it names it, and what to run next: the
    trace (``fleet debug``) when one was kept, ``fleet doctor`` when the source's locator or selector failed."""
    line = error.strip().replace("\n", " ")
    if url and url not in line:
        line += f", at {url}"
    see = ([f"`fleet debug {source} --week {week}`"] if trace else []) + \
        ([f"`fleet doctor {source}`"] if doctor else [])
    return line + (f"; see {' and '.join(see)}" if see else "")
