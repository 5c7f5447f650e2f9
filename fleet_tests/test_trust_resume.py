"""Resuming never loses a page: a real crawl of PAGES pages (the first 80 of the demo's 200) in Chromium, whose
worker is SIGKILLed mid-navigation, between a page's load and its rows, and between two rows of a page, then
re-executed. A URL counts as seen only once the rows that came from it are stored, so the resumed rows equal an
uninterrupted run's: none missing, none doubled."""
import datetime as dt

import polars as pl

from fleet.demo import crawl
from fleet.scraping.discovery import discover
from fleet.engine.runner import EngineSettings, run_source
from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.trust import sites  # noqa: F401 (a fixture)
from fleet_tests.conftest import WEEK, writable_dir
from fleet_tests.test_runner import HEADER

PAGES = 80  # of crawl.PAGES: enough pages before, between and after the three kills; each page costs every run

MODULE = """from fleet.demo import site_url
import signal

def kill_here(phase, n):
    # once per test: this worker dies by SIGKILL, as on an OOM kill
    plan = os.environ.get("KILL_AT", "")
    marker = os.environ.get("KILL_MARKER", "")
    if plan == f"{phase}:{n}" and marker and not os.path.exists(marker):
        open(marker, "w").close()
        if phase == "navigation":  # while the page is loading (the site answers after 300 ms)
            asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGKILL)
        else:
            os.kill(os.getpid(), signal.SIGKILL)
"""
CRAWL = f"""
        for n in range(1, {PAGES} + 1):
            url = site_url(f"/crawl?week={{ctx.week.isoformat()}}&page={{n}}")
            if ctx.seen(url):  # as the README tells authors: a re-execution skips what is done
                continue
            kill_here("navigation", n)
            await ctx.goto(page, url)
            kill_here("loaded", n)
            for i, code in enumerate(await page.locator("li.item .code").all_text_contents()):
                if i == 1:
                    kill_here("yield", n)
                yield {{"code": code, "page": n}}
"""


def crawler(tmp_path, name: str):
    d = tmp_path / name
    d.mkdir()
    cls = "".join(p.title() for p in name.split("_"))
    (d / f"{name}.py").write_text(HEADER + MODULE + f"""

class {cls}(Scraper):
    name = "{name}"
    schema = {{"code": pl.String, "page": pl.Int64}}
    key = ("code",)
    timeout_s = 300

    async def scrape(self, page, ctx):""" + CRAWL)
    (src,) = discover([d])
    assert not src.broken, src.error
    return src


def _scrape(home, source, reexecution=False):
    store = LocalArtifactStore(home / "artifacts")
    out = run_source(source, WEEK, store=store, run_id="resume", settings=EngineSettings.from_env(),
                     reexecution=reexecution)
    frame = store.read_parquet(WEEK, keys.raw_key(source.name, out.attempt)) if out.succeeded else None
    return out, frame


def test_a_killed_crawl_resumes_with_every_row_once(sites, scrape_home, tmp_path, monkeypatch):
    week = dt.date.fromisoformat(WEEK)
    expected = pl.DataFrame([{"code": r["code"], "page": r["page"]} for n in range(1, PAGES + 1)
                             for r in crawl.items(week, n)]).sort("code")
    whole = crawler(tmp_path, "crawl_whole")
    out, frame = _scrape(scrape_home, whole)
    assert out.status == "ok", out
    assert frame.drop(provenance.COLUMNS).sort("code").equals(expected)

    for phase, n in (("navigation", 23), ("loaded", 48), ("yield", 65)):
        name = f"crawl_{phase}"
        src = crawler(tmp_path, name)
        monkeypatch.setenv("KILL_AT", f"{phase}:{n}")
        monkeypatch.setenv("KILL_MARKER", str(writable_dir(scrape_home) / f"killed-{phase}"))
        if phase == "navigation":
            sites.latency_s = 0.3  # only the page it dies on is slow: set back once it has died
        killed, _ = _scrape(scrape_home, src)
        sites.latency_s = 0
        assert (killed.status, killed.category) == ("failed", "infra"), killed
        assert (scrape_home / "counters" / f"killed-{phase}").exists()
        resumed, frame = _scrape(scrape_home, src, reexecution=True)
        assert resumed.status == "ok", resumed
        got = frame.drop(provenance.COLUMNS).sort("code")
        assert got.height == expected.height and got.equals(expected), (phase, got.height)
        # the re-execution fetched only what was not stored: from the page the worker died on
        assert resumed.pages == PAGES - n + 1, (phase, resumed.pages)
