"""The ``blocked`` category through real Chromium and the demo sites' walls (fleet/demo/walls.py): a 403, a 429 that
does not clear, a captcha page; a 429 whose Retry-After fits is waited out; and, through a real `fleet demo` run,
a blocked source is alerted, never re-executed, and leaves the other sources' week committed."""
import json
import time

import pytest

from fleet.demo.sites import set_mode
from fleet.errors import FleetError
from fleet_tests.trust import demo_env, sites  # noqa: F401 (a fixture)
from fleet_tests.conftest import SOURCE, WEEK, committed_rows, run_fleet
from fleet_tests.gitremote import log
from fleet_tests.test_runner import run, scraper

PAGE = """
        await ctx.goto(page, site_url("/books?week=" + ctx.week.isoformat()))
        for i, cell in enumerate(await page.locator("td.isbn").all_text_contents()):
            yield {"id": i}
"""
IMPORT = "from fleet.demo import site_url\n"


@pytest.mark.parametrize("mode, words", [("forbidden", "HTTP 403"), ("captcha", "a captcha or bot-check page"),
                                         ("rate_limited_long", "Retry-After 3600s does not fit")])
def test_a_site_that_turns_the_scraper_away_is_blocked_not_source(sites, scrape_home, tmp_path, mode, words):
    sites.set_mode("books", mode)
    src = scraper(tmp_path, f"walled_{mode}", PAGE, module=IMPORT, timeout_s=30)
    started = time.monotonic()
    out, _ = run(scrape_home, src)
    assert (out.status, out.category) == ("failed", "blocked"), out
    assert "blocked" in out.error and words in out.error and "/books" in out.url, out.error
    assert time.monotonic() - started < 20  # a Retry-After beyond the source's time is not slept on


def test_a_retry_after_that_fits_is_waited_out(sites, scrape_home, tmp_path):
    sites.set_mode("books", "rate_limited")  # every other request: 429, Retry-After: 1
    src = scraper(tmp_path, "patient", PAGE, module=IMPORT, timeout_s=30)
    started = time.monotonic()
    out, _ = run(scrape_home, src)
    assert (out.status, out.rows) == ("ok", 24), out
    assert time.monotonic() - started >= 1.0  # it waited the second the site asked for
    assert sites.wall_hits["books"] == 2


def test_a_scrapers_own_markers_and_a_bad_marker_setting(sites, scrape_home, tmp_path, monkeypatch):
    src = scraper(tmp_path, "own_marker", PAGE, module=IMPORT + "", timeout_s=30)
    text = src.module_path.read_text().replace('    timeout_s = 30\n', '    timeout_s = 30\n    block_markers = ("THE SILENT RIVER",)\n')
    src.module_path.write_text(text)  # a title on the books page stands for a site's own bot-check text
    out, _ = run(scrape_home, src)
    assert (out.status, out.category) == ("failed", "blocked") and "the silent river" in out.error, out

    from fleet import config
    monkeypatch.setenv("FLEET_BLOCK_MARKERS", "captcha, robot")
    with pytest.raises(FleetError, match=r"^FLEET_BLOCK_MARKERS must be a non-empty JSON list"):
        config.settings()
    monkeypatch.setenv("FLEET_BLOCK_MARKERS", '["are you human"]')
    config.settings()


def test_a_blocked_source_is_alerted_never_reexecuted_and_the_week_goes_on(fleet_env):
    env, state = demo_env(fleet_env, "books", "jobs")
    set_mode(state, "jobs", "forbidden")
    before = log(fleet_env.remote)
    res = run_fleet(env, "demo", "--week", WEEK, "--force")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    status = run_fleet(env, "status", "--week", WEEK).stdout
    line = {l.split()[0]: l.split() for l in status.splitlines()[2:] if l.strip()}
    assert line["jobs"][1:3] == ["failed", "blocked"] and line["jobs"][5] == "1", status  # one attempt only
    new = log(fleet_env.remote)[: -len(before)]
    assert "jobs (failed, blocked)" in new[-1]["message"], new[-1]["message"]
    assert sorted(set(committed_rows(fleet_env.remote, WEEK)[SOURCE])) == ["books"]
    alerts = [json.loads(l) for l in (fleet_env.home / "alerts" / "alerts.jsonl").read_text().splitlines()]
    blocked = [a for a in alerts if a["source"] == "jobs"]
    assert blocked and all(a["category"] == "blocked" for a in blocked), alerts
    assert any("HTTP 403" in a["message"] for a in blocked), blocked

    import os
    os.environ["DAGSTER_HOME"] = str(fleet_env.home / "dagster")
    from dagster import DagsterEventType, DagsterInstance, RunsFilter
    with DagsterInstance.get() as instance:
        runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
        assert sorted(r.tags.get("fleet/kind") for r in runs) == ["publish", "scrape"]  # no rerun run
        scrape = next(r for r in runs if r.tags.get("fleet/kind") == "scrape")
        assert scrape.tags.get("fleet/failure") == "blocked"
        assert not instance.all_logs(scrape.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)


def test_bad_markers_and_limits_are_one_line_and_nothing_runs(fleet_env, tmp_path):
    res = run_fleet({**fleet_env.env, "FLEET_BLOCK_MARKERS": "[1, 2]"}, "run", "--week", WEEK, "--force")
    assert res.returncode == 2 and res.stderr.strip() == (
        "fleet: error: FLEET_BLOCK_MARKERS must be a non-empty JSON list of non-empty strings "
        "(e.g. [\"g-recaptcha\", \"are you a robot\"]), got '[1, 2]'"), res.stderr
    assert not (fleet_env.home / "artifacts").exists()

    from fleet.scraping.discovery import discover
    d = tmp_path / "declared"
    d.mkdir()
    for name, attr in (("bad_markers", "block_markers = ('',)"), ("bad_limit", "polite_concurrency = 0")):
        (d / f"{name}.py").write_text("import polars as pl\nfrom fleet import Scraper\n\nclass S(Scraper):\n"
                                      f"    name = '{name}'\n    schema = {{'id': pl.Int64}}\n    key = ('id',)\n"
                                      f"    {attr}\n\n    async def scrape(self, page, ctx):\n        yield {{}}\n")
    errors = {s.name: s.error for s in discover([d])}
    assert "scraper 'bad_markers': block_markers must be a non-empty JSON list" in errors["bad_markers"], errors
    assert errors["bad_limit"].endswith("scraper 'bad_limit': polite_concurrency must be a whole number >= 1, got 0"), errors
