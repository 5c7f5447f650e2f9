"""What ``fleet doctor`` examines in a browser: every locator of a scraper counted on last week's pages and today's
(two HARs, offline), last week's values read through its row locators, and a proposal per broken row locator
(fleet/lifecycle/repair.py for the JavaScript style, fleet/lifecycle/relocate.py for locator chains). Runs in a
sandboxed process of its own (:func:`examine_sandboxed`), as an attempt does: the recorded pages are the site's."""
from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from fleet import config
from fleet.errors import FleetError
from fleet.lifecycle import relocate, repair
from fleet.scraping import chains, locators
from fleet.scraping.discovery import Source

# A proposal needs this share of last week's rows found on today's page, and of their keys in its rows.
MIN_SHARE = 0.5


@dataclasses.dataclass
class Examined:
    then: dict[str, int | str | None]                 # selector -> matches on last week's pages (the most on one;
    now: dict[str, int | str | None]                  # today's): None no valid selector, "?" not known
    proposals: dict[str, dict]                        # row selector or chain -> repair's or relocate's propose


def broken(ex: Examined, selector: str) -> bool:
    return _broke(ex.then, ex.now, selector)


def _broke(then: dict, now: dict, selector: str) -> bool:
    """Matched last week (a count; "?" when last week's page is not kept) and not today, or on under half as many
    elements (the same week's page: as many rows as then; a class renamed in most rows is broken too). A field of
    a row locator that found no rows today is "?": not known, its row locator is what broke."""
    before, after = then.get(selector), now.get(selector) or 0
    return isinstance(before, int) and before > 0 and after != "?" and after < before * MIN_SHARE


def in_chains(used: locators.Used) -> set[str]:
    """The literals of the locator chains of rows (counted as parts of their chains, not each on the whole page),
    and the attribute names their fields read (``get_attribute("href")``, no selector); not one the module also
    names elsewhere (``page.wait_for_selector("tr.book")``), which is counted on the whole page as any other."""
    out = set()
    for row in used.chains:
        for chain in (row.chain, *(f.chain for f in row.fields)):
            out.update(a for step in chains.parse_text(chain) if step.method == "locator" for a in step.args)
        out.update(f.attribute for f in row.fields if f.attribute)
    return out - used.outside


def _most(a, b):
    """The larger of two pages' counts; None (no valid locator) wins, "?" (not known on that page) loses."""
    if a is None or b is None:
        return None
    return b if a == "?" else a if b == "?" else max(a, b)


def _labels(row: chains.Row) -> list[str]:
    return [relocate.label(row.root, row.chain), *(relocate.label("row", f.chain) for f in row.fields)]


async def examine(old_har: Path | None, new_har: Path | None, used: locators.Used,
                  stored: list[dict] | None = None) -> Examined:
    """The locators' matches on last week's pages (``old_har``; without one, ``stored`` are last week's rows from
    the store, and only the row locators are known to have matched) and today's, and a proposal per row locator."""
    from fleet.engine.attempt import open_browser

    selectors = [s for s in dict.fromkeys(used.selectors + used.sub_selectors()) if s not in in_chains(used)]
    then, now = {s: 0 if old_har else "?" for s in selectors}, {s: 0 for s in selectors}
    for row in used.chains:  # a field is counted in its row locator's rows: "?" until a page has some
        labels = _labels(row)
        then.update({s: 0 if old_har and s == labels[0] else "?" for s in labels})
        now.update({s: 0 if s == labels[0] else "?" for s in labels})
    # row selector -> (its page, last week's values there); from the store: on whichever page of today's
    values: dict[str, tuple[str, list[dict]]] = {}
    if old_har is None:
        for row in used.rows:  # its rows matched the row locator; a field filled in N rows matched N times
            then[row.selector] = len(stored or [])
            then.update({sub: sum(r.get(f) is not None for r in stored or []) for f, sub in row.fields.items()
                         if any(f in r for r in stored or [])})
            values[row.selector] = ("", [{f: r.get(f) for f in row.fields} for r in stored or []])
        for row in used.chains:
            labels, names = _labels(row), [f.name for f in row.fields]
            then[labels[0]] = len(stored or [])
            then.update({s: sum(r.get(f.name) is not None for r in stored or []) for s, f in zip(labels[1:], row.fields)
                         if any(f.name in r for r in stored or [])})
            values[labels[0]] = ("", [{f: r.get(f) for f in names} for r in stored or []])
    proposals: dict[str, dict] = {}
    async with open_browser(config.chromium_path()) as own:
        for har, counts, old in ((old_har, then, True), (new_har, now, False)):
            urls = repair.documents(har) if har and har.exists() else []
            for i, url in enumerate(urls):
                context, page = await repair.open_har_page(own.browser, har, url)
                try:
                    for s in selectors:
                        n = await repair.count(page, s)
                        counts[s] = None if n is None else max(counts[s] or 0, n)
                    for row in used.chains:
                        here = await relocate.counts(page, row)
                        for s, n in here.items():
                            counts[s] = _most(counts[s], n)
                        key = relocate.label(row.root, row.chain)
                        if old and key not in values and here[key]:
                            values[key] = (repair.page_id(url), await relocate.values(page, row))
                    for row in used.rows:
                        if old and row.selector not in values and (await repair.count(page, row.selector) or 0):
                            values[row.selector] = (repair.page_id(url), await repair.old_values(page, row.selector,
                                                                                                row.fields))
                    if old:
                        continue
                    for row in used.rows:  # repaired on today's version of the page its values came from
                        want = values.get(row.selector)
                        if want and row.selector not in proposals and (repair.page_id(url) == want[0]
                                                                       or i == len(urls) - 1):
                            proposals[row.selector] = await repair.propose(page, want[1], row.selector, row.fields,
                                                                           MIN_SHARE)
                    for row in used.chains:
                        key = relocate.label(row.root, row.chain)
                        want = values.get(key)
                        if want and key not in proposals and (repair.page_id(url) == want[0] or i == len(urls) - 1):
                            proposals[key] = await relocate.propose(page, want[1], row, MIN_SHARE)
                finally:
                    await context.close()
    for key in rows_of(used):
        if key not in proposals and needs_repair(then, now, used, key):
            proposals[key] = {"error": "today's pages were not recorded (the scraper reached none)"
                              if not now or not any(v not in (0, "?") for v in now.values())
                              else "no values of last week to look for"}
    return Examined(then, now, {s: p for s, p in proposals.items() if needs_repair(then, now, used, s)})


EXAMINE_TIMEOUT_S = 300


def examine_sandboxed(source: Source, old_har: Path | None, new_har: Path, stored: list[dict] | None,
                      tmp: Path) -> Examined:
    """:func:`examine` in a process of its own, as the engine's attempts run: as the sandbox's user with Chromium's
    own sandbox on (fleet/engine/sandbox.py), since the recorded pages are the site's, scripts and all. Refused,
    as an attempt is, where the sandbox cannot be had."""
    import json
    import subprocess

    from fleet.engine import sandbox
    from fleet.engine.settings import EngineSettings

    settings = EngineSettings.from_env()
    box = sandbox.for_attempt(settings, source.module_path)
    folder = tmp / "examine"
    (folder / "tmp").mkdir(parents=True)
    spec = folder / "spec.json"
    spec.write_text(json.dumps({"module": str(source.module_path), "old_har": str(old_har) if old_har else None,
                                "new_har": str(new_har), "stored": stored, "out": str(folder / "examined.json")},
                               default=str))
    sandbox.hand_over(box, folder)
    proc = sandbox.popen_python(box, settings, ["fleet.lifecycle.examine", str(spec)], tmp=folder / "tmp",
                                home=sandbox.prepare(box, settings), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=EXAMINE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise FleetError(f"source {source.name}: comparing last week's pages with today's took over "
                         f"{EXAMINE_TIMEOUT_S} s; nothing was changed") from None
    if proc.returncode != 0 or not (folder / "examined.json").exists():
        last_line = (err.strip().splitlines() or ["no output"])[-1]
        raise FleetError(f"source {source.name}: comparing last week's pages with today's failed: {last_line}")
    return Examined(**json.loads((folder / "examined.json").read_text()))


def _examine_main(spec_path: str) -> int:
    """The sandboxed process of :func:`examine_sandboxed`."""
    import json

    spec = json.loads(Path(spec_path).read_text())
    used = locators.parse(Path(spec["module"]))
    ex = asyncio.run(examine(Path(spec["old_har"]) if spec["old_har"] else None, Path(spec["new_har"]), used,
                             spec["stored"]))
    Path(spec["out"]).write_text(json.dumps(dataclasses.asdict(ex), default=str))
    return 0


def js_row(used: locators.Used, selector: str) -> locators.RowLocator:
    return next(r for r in used.rows if r.selector == selector)


def chain_row(used: locators.Used, key: str) -> chains.Row | None:
    return next((r for r in used.chains if relocate.label(r.root, r.chain) == key), None)


def rows_of(used: locators.Used) -> dict[str, list[str]]:
    """Each row locator's key (its selector, or its chain's label) -> the keys of it and its parts."""
    out = {r.selector: [r.selector, *r.fields.values(), *r.other_fields.values()] for r in used.rows}
    out.update({(labels := _labels(r))[0]: labels for r in used.chains})
    return out


def needs_repair(then: dict, now: dict, used: locators.Used, key: str) -> bool:
    return any(_broke(then, now, s) for s in rows_of(used)[key])


if __name__ == "__main__":
    import sys

    sys.exit(_examine_main(sys.argv[1]))
