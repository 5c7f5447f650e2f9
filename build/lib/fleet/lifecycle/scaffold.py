"""`fleet new NAME URL`: a short working scraper for a new source and its recorded fixture, or nothing at all."""
from __future__ import annotations

import dataclasses
import keyword
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from fleet.errors import FleetError
from fleet.lifecycle import fixtures
from fleet.lifecycle.replay import attempt
from fleet.engine.spec import Trial
from fleet.scraping.contract import NAME_MAX, valid_name
from fleet.scraping.discovery import discover
from fleet.weeks import last_complete_week

TEMPLATE = '''import polars as pl

from fleet import Scraper


class {cls}(Scraper):
    """{name}: what this source collects (the asset's description in the UI)."""

    name = {name!r}
    schema = {{"url": pl.String, "title": pl.String}}
    key = ("url",)
    timeout_s = 120

    async def scrape(self, page, ctx):
        await ctx.goto(page, {url!r})
        yield {{"url": page.url, "title": await page.title()}}
'''


def check_name(name: str, dirs: list[Path]) -> None:
    """A FleetError naming the rule ``name`` breaks: a path, not an identifier, or taken."""
    if any(c in name for c in "/\\") or ".." in name or name.startswith("."):
        raise FleetError(f"name {name!r} is a path; a source's name is a bare identifier such as my_source")
    if not valid_name(name) or keyword.iskeyword(name):
        raise FleetError(f"name {name!r} is not a source name: lowercase letters, digits and _, starting with a letter, "
                         f"at most {NAME_MAX} characters, not a Python keyword")
    for d in dirs:
        for p in (d / f"{name}.py", d / "fixtures" / f"{name}.har.zip", d / "fixtures" / f"{name}.fixture.json"):
            if p.exists():
                raise FleetError(f"name {name!r} is taken: {p} exists (fleet new never overwrites)")
    taken = next((s for s in discover(dirs) if s.name == name), None)
    if taken is not None:
        raise FleetError(f"name {name!r} is taken by the source in {taken.module_path}")


def class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def new(name: str, url: str, dirs: list[Path]) -> tuple[Path, Path, dict]:
    """Write ``<dirs[0]>/NAME.py`` and its fixture, recorded from ``url``; returns the module, the HAR and the
    expectation. Nothing is written unless the new scraper got a row from ``url``."""
    check_name(name, dirs)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FleetError(f"URL {url!r} is not an http(s) URL")
    target = dirs[0] / f"{name}.py"
    week = last_complete_week().isoformat()
    with tempfile.TemporaryDirectory(prefix="fleet-new-") as tmp:
        draft, raw = Path(tmp) / "draft" / f"{name}.py", Path(tmp) / "har" / "raw.har.zip"
        for folder in (draft.parent, raw.parent):
            folder.mkdir(mode=0o755)  # the sandbox's user imports the draft from here
        draft.write_text(TEMPLATE.format(cls=class_name(name), name=name, url=url))
        source = next(s for s in discover([draft.parent]) if s.name == name)
        got = attempt(source, week, Path(tmp), Trial(record_har=raw))
        if got["error"] or not got["rows"]:
            raise FleetError(f"URL {url} gave no row ({(got['error'] or 'empty').splitlines()[0]}); nothing written")
        final = dataclasses.replace(source, module_path=target)
        target.parent.mkdir(parents=True, exist_ok=True)
        fixtures.scrub(raw, fixtures.har_path(final))
        expect = fixtures.expectation(got)
        fixtures.write_meta(final, week, None, expect)  # its URL is in the module, not in FLEET_DEMO_URL
        shutil.copyfile(draft, target)  # last: the source exists only with its fixture
    return target, fixtures.har_path(final), expect
