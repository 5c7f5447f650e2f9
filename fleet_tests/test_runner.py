"""One source attempt through the runner and a real worker (fleet/scraping/runner.py, worker.py), in real Chromium:
what an attempt's outcome says when the scraper times out on its own, closes its own page, hangs at import or
blocks its event loop, how attempts of one week merge, and what a failed re-scrape leaves for consolidation."""
import os
import textwrap

import polars as pl
import pytest

from fleet.scraping import browser, pool
from fleet.scraping.discovery import discover
from fleet.scraping.runner import run_source
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import WEEK

HEADER = "import asyncio, os, time\nimport polars as pl\nfrom fleet import Scraper\n"


class Lines:
    def __init__(self):
        self.lines = []

    def info(self, line):
        self.lines.append(line)

    def __str__(self):
        return "\n".join(self.lines)


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    for name in list(os.environ):
        if name.startswith("FLEET_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLEET_HOME", str(home))
    yield home
    pool.stop(home / "workers")
    browser.stop(home / "browser")


def scraper(tmp_path, name: str, scrape: str, *, timeout_s: float = 30, schema: str = '{"id": pl.Int64}',
            module: str = ""):
    """A one-source scraper module ``name`` whose ``scrape`` body is ``scrape``; its discovered Source."""
    d = tmp_path / "scrapers"
    d.mkdir(exist_ok=True)
    cls = "".join(p.title() for p in name.split("_"))
    (d / f"{name}.py").write_text(HEADER + textwrap.dedent(module) + textwrap.dedent(f"""
        class {cls}(Scraper):
            name = "{name}"
            schema = {schema}
            key = ("id",)
            timeout_s = {timeout_s}

            async def scrape(self, page, ctx):
        """) + textwrap.indent(textwrap.dedent(scrape), " " * 8))
    return {s.name: s for s in discover([d])}[name]


def run(home, source, *, refresh=False, log=None):
    store = LocalArtifactStore(home / "artifacts")
    return run_source(source, WEEK, store=store, run_id="test", refresh=refresh, log=log), store


def test_a_scrapers_own_timeout_is_its_error_not_fleets_deadline(home, tmp_path):
    """asyncio.TimeoutError is the builtin TimeoutError: the scraper's own expired wait_for is a scraper error
    (failed, source, its traceback), not fleet's soft deadline (timeout/partial, "its worker was killed")."""
    src = scraper(tmp_path, "own_timeout", """
        for i in range(3):
            yield {"id": i}
        await asyncio.wait_for(asyncio.sleep(10), 0.2)
        yield {"id": 99}
    """, timeout_s=60)
    out, store = run(home, src)
    assert (out.status, out.category) == ("failed", "source"), out
    assert "TimeoutError" in out.error and "killed" not in out.error and "timed out after" not in out.error, out.error
    trace = (store.path(WEEK, keys.evidence_key("own_timeout")) / "error.txt").read_text()
    assert "wait_for" in trace and "own_timeout.py" in trace, trace


def test_fleets_soft_deadline_stops_an_async_hang_and_keeps_its_rows(home, tmp_path):
    src = scraper(tmp_path, "async_hang", """
        yield {"id": 1}
        await asyncio.sleep(600)
    """, timeout_s=4)
    out, store = run(home, src)
    assert (out.status, out.category, out.rows) == ("partial", "source", 1), out
    assert "soft deadline" in out.error and "killed" not in out.error, out.error  # it stopped itself in time
    assert out.seconds < 4 + 1, out
