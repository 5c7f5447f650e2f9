"""Structural early warning: the week's accessibility ("aria") structure of the regions a scraper reads and the
page's frame around them, kept per week, and a WARN check when either moved since the last week that has one, while
rows still come out.

A *region* is, for each locator the scraper module names (fleet/scraping/locators.py: its ``page.locator``,
``fill``, ``click``... literals, not the row-relative sub-selectors), the nearest container of the locator's first
match: its closest ``table``, list, ``form``, ``main``, ``section``, ``nav`` or ``article``, or the element itself
(``frames.FRAME_JS``). The choice is deterministic and independent of the data: the region is where the scraper's
rows live. It is taken once per page the rows come from (a page: its URL's path and its query's names,
``page_key``), when the first row of that page is yielded, by Playwright's public ``Locator.aria_snapshot()``, one
call per region, and stored reduced to its *structure*: the role paths of its nodes (``table/rowgroup/row/cell``: a
set, so the number of rows does not count) and the names of labelling roles (column headers, headings, captions,
buttons, fields' labels). Cell, row, list item, link and text contents are data and never compared.

The *frame* is the page template around the regions (fleet/quality/frame.py): its landmarks, its headings' levels
and each region's chain of ancestors. A redesign around intact rows moves it before the regions themselves; text,
counts, dates, ads and a rotating banner do not. A snapshot that fails is left out; it never fails the attempt.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from fleet.quality import frame as frames
from fleet.quality.checks import CheckOutcome
from fleet.storage import store as keys

# roles whose name labels the structure; any other role's name or text is data (a cell, a row, a link, ...)
LABEL_ROLES = frozenset({
    "table", "grid", "treegrid", "list", "listbox", "columnheader", "rowheader", "heading", "caption", "region",
    "navigation", "main", "form", "search", "button", "searchbox", "textbox", "combobox", "spinbutton", "checkbox",
    "radio", "tab", "tablist", "menu", "menubar", "dialog", "group", "figure", "banner", "contentinfo",
    "complementary", "article", "term"})
TEXT_NAMED = frozenset({"caption", "heading", "columnheader", "rowheader", "button", "term"})  # their text names them
LINE_RE = re.compile(r'^(?P<indent>\s*)- (?P<role>[a-z]+)?(?: "(?P<name>(?:[^"\\]|\\.)*)")?(?P<attrs>(?: \[[^\]]*\])*)'
                     r'(?::(?: (?P<value>.*))?)?$')
MAX_PAGES = 10          # pages per attempt whose regions are kept
SNAPSHOT_TIMEOUT_MS = 2_000
WARN_SHARE = 0.2        # the share of the structure that changed above which the check warns
SHOWN = 6               # changes named per region in the message
VERSION = 2             # the stored form: regions and the frame around them, per page


def page_key(url: str) -> str:
    """A page as a template: its path and its query's names (``/catalog?page=*&week=*``): the pages of one listing,
    or of one search, share their markup, and are taken once per attempt."""
    parts = urlsplit(url)
    names = sorted(dict.fromkeys(k for k, _ in parse_qsl(parts.query, keep_blank_values=True)))
    return parts.path + (f"?{'&'.join(f'{k}=*' for k in names)}" if names else "")


def structure(aria: str) -> list[str]:
    """The structure of an aria snapshot (YAML lines ``- role "name" [attr]: value``), sorted, without its data."""
    out, stack = set(), []
    for line in aria.splitlines():
        m = LINE_RE.match(line)
        if not m or line.strip().startswith("- /"):
            continue  # a property (``/url: ...``) or a line this reader does not know
        depth = len(m["indent"]) // 2
        role = m["role"] or "text"
        level = "".join(a for a in re.findall(r"\[level=\d+\]", m["attrs"] or ""))
        del stack[depth:]
        stack.append(role + level)
        out.add("/".join(stack))
        name = m["name"] or (m["value"] if role in TEXT_NAMED else None)
        if role in LABEL_ROLES and name and not any(r.split("[")[0] in ("cell", "gridcell", "listitem") for r in stack[:-1]):
            out.add(f'{role}{level} "{frames.mask(name)}"')  # a button's "Load more (25)": its count is data
    return sorted(out)


class Snapshots:
    """The regions of one attempt, taken in its attempt process (fleet/engine/attempt.py) as rows come out."""

    def __init__(self, module_path: Path, path: str | None):
        self.path, self.taken, self.stamp = path, {}, object()
        try:
            from fleet.scraping.locators import parse

            self.selectors = parse(Path(module_path)).selectors if path else []
        except Exception:  # a module this reader cannot parse: no regions, never a failed attempt
            self.selectors = []

    async def take(self, page, stamp) -> None:
        """The regions of ``page`` if it changed since the last call (``stamp``: its last navigation)."""
        if stamp == self.stamp or not self.selectors or len(self.taken) >= MAX_PAGES:
            return
        self.stamp = stamp
        key = page_key(page.url)
        if key in self.taken:
            return
        with contextlib.suppress(Exception):
            regions, seen = {}, {}
            where, frame = frames.take(await page.evaluate(frames.FRAME_JS, self.selectors), self.selectors)
            for sel, css in where.items():
                if css not in seen:  # one snapshot per region, however many of its locators it holds
                    seen[css] = structure(await page.locator(css).aria_snapshot(timeout=SNAPSHOT_TIMEOUT_MS))
                regions[sel] = seen[css]
            self.taken.setdefault(key, {"regions": regions, **frame})

    def save(self) -> None:
        if self.path and self.taken:
            with contextlib.suppress(OSError):
                tmp = Path(self.path + ".tmp")
                tmp.write_text(json.dumps({"version": VERSION, "pages": self.taken}, sort_keys=True))
                os.replace(tmp, self.path)


async def take(shots: Snapshots, page, stamp) -> None:
    """``shots.take`` bounded in time: a page that does not answer costs at most a few seconds, never the attempt."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(shots.take(page, stamp), SNAPSHOT_TIMEOUT_MS / 1000 * 3)


def keep(store, week: str, source: str, path: Path) -> None:
    """Store an attempt's regions as the source's structure of ``week`` (the attempt's rows came out)."""
    if path.exists():
        store.write_bytes(week, keys.structure_key(source), path.read_bytes(), "application/json")
        path.unlink()


def previous(store, week: str, source: str) -> tuple[str, dict] | None:
    """The last week before ``week`` with a stored structure, and that structure."""
    for w in sorted((w for w in store.weeks() if w < week), reverse=True):
        data = store.read_json(w, keys.structure_key(source))
        if data:
            return w, data
    return None


def pages(data: dict) -> dict:
    """A stored structure's pages, each ``{"regions": {selector: structure}, ...frame}``; a week stored before the
    frame (version 1: ``{page: {selector: structure}}``) has regions only, and its landmark lines are the frame's now."""
    if "version" in data:
        return data.get("pages") or {}
    return {page: {"regions": {sel: [x for x in lines if not x.startswith("landmark ")] for sel, lines in regions.items()}}
            for page, regions in data.items() if isinstance(regions, dict)}


def compare(before: dict, now: dict) -> tuple[float, list[str], int, list[str]]:
    """Over the pages seen both weeks: the share of the regions' structure that changed and what moved in them, per
    region; and the most that moved in one page's frame around them and what, per page (fleet/quality/frame.py)."""
    before, now = pages(before), pages(now)
    changed = total = framed = 0
    moved, around = [], {}  # around: a frame's description -> its pages (a listing's first and later pages share one)
    for page in sorted(set(before) & set(now)):
        b_regions, n_regions = before[page].get("regions", {}), now[page].get("regions", {})
        for sel in sorted(set(b_regions) | set(n_regions)):
            a, b = set(b_regions.get(sel, [])), set(n_regions.get(sel, []))
            changed, total = changed + len(a ^ b), total + len(a | b)
            if a == b:
                continue
            if not b:
                moved.append(f"{page}: the region of `{sel}` is gone")
                continue
            gone, new = sorted(a - b), sorted(b - a)
            parts = ([f"gone {', '.join(gone[:SHOWN])}{' ...' if len(gone) > SHOWN else ''}"] if gone else []) + \
                    ([f"new {', '.join(new[:SHOWN])}{' ...' if len(new) > SHOWN else ''}"] if new else [])
            moved.append(f"{page}: region of `{sel}`: {'; '.join(parts)}")
        if "chains" in before[page] and "chains" in now[page]:  # a week stored before the frame has none
            count, said = frames.compare(before[page], now[page])
            framed = max(framed, count)  # per page: one template's churn, seen on each of its pages, counts once
            if said:
                around.setdefault("; ".join(said), []).append(page)
    return (changed / total if total else 0.0), moved, framed, [f"{', '.join(p)}: frame: {d}" for d, p in around.items()]


def structure_check(store, week: str, source: str, rows: int) -> CheckOutcome:
    """WARN when, while rows still come out, this week's regions differ from the last stored week's by more than
    ``WARN_SHARE``, or the frame around them moved (``frames.FRAME_WARN``); passes (silent) otherwise, or when there is
    nothing to compare yet."""
    now = store.read_json(week, keys.structure_key(source))
    last = previous(store, week, source) if now else None
    if not rows or not now or not last:
        why = "no rows (see non_empty)" if not rows else "no structure this week" if not now else "no earlier week"
        return CheckOutcome("structure", True, "WARN", f"nothing to compare: {why}", {}, skipped=why)
    share, moved, framed, around = compare(last[1], now)
    meta = {"structure/changed": round(share, 4), "structure/frame_changes": framed}
    what = ([f"{share:.0%} of the structure of the regions it reads"] if share > WARN_SHARE else []) + \
           (["the page's frame around them"] if framed >= frames.FRAME_WARN else [])
    if what:
        return CheckOutcome("structure", False, "WARN",
                            f"markup changed since week {last[0]} ({' and '.join(what)}) while its {rows} rows still "
                            f"come out; check its locators before they stop matching (`fleet doctor {source}`):\n" +
                            "\n".join(moved + around), meta)
    small = ([f"{share:.0%} changed"] if share else []) + around
    return CheckOutcome("structure", True, "WARN", f"structure as in week {last[0]}" +
                        (f" ({'; '.join(small)})" if small else ""), meta)
