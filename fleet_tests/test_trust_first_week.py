"""A new source is checked from its first week, through a real `fleet demo` run: with no history, each source is
judged against its recorded fixture (row count, per-column fill) or, without one, its declared schema. A new
source whose `price` selector matches nothing is held by the quality gate instead of committed with "checks: 0
failed"; so is one whose rows collapse against its fixture's; the bundled demo sources pass, shops' `rating`
(filled only by deep runs) as an `optional` column; `fleet status` says what was judged instead of the history."""
import os
import shutil

from dagster import AssetCheckKey, AssetKey, DagsterInstance

from fleet.demo.sites import set_mode
from fleet_tests.conftest import ROOT, committed_sources, run_fleet
from fleet_tests.gitremote import log

W = "2026-11-16"
DEMO = ("books", "catalog", "jobs", "parts", "shops", "stocks")

# A new source whose author's selector for the price matches nothing on the page (the site calls it `.price`).
FRESH = '''import polars as pl

from fleet import Scraper, site_url

ROWS_JS = """rows => rows.map(r => ({
  isbn: r.querySelector('.isbn')?.textContent ?? null,
  price: r.querySelector('.amount')?.textContent ?? null,
}))"""


class Fresh(Scraper):
    """Book prices, new this week."""

    name = "fresh"
    schema = {"isbn": pl.Utf8, "price": pl.Float64}
    key = ("isbn",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/books?week=" + ctx.week.isoformat()))
        for row in await page.locator("table#books tr.book").evaluate_all(ROWS_JS):
            yield {"isbn": row["isbn"], "price": float(row["price"].lstrip("£")) if row["price"] else None}
'''


def test_a_new_source_is_checked_from_its_first_week(fleet_env):
    scrapers = fleet_env.tmp / "scrapers"
    (scrapers / "fixtures").mkdir(parents=True)
    for name in DEMO:
        shutil.copy(ROOT / "scrapers" / f"{name}.py", scrapers)
        if name != "shops":  # shops is judged against its schema, where `rating` is declared optional
            for part in (f"{name}.fixture.json", f"{name}.har.zip"):
                shutil.copy(ROOT / "scrapers" / "fixtures" / part, scrapers / "fixtures")
    (scrapers / "fresh.py").write_text(FRESH)
    state = fleet_env.tmp / "sites"
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_DEMO_STATE_DIR": str(state)}
    set_mode(state, "jobs", "volume_collapse")  # 2 rows; its fixture recorded 35

    res = run_fleet(env, "demo", "--week", W, "--force")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert "HELD fresh: 24 rows" in res.stderr and "HELD jobs: 2 rows" in res.stderr, res.stderr[-3000:]
    raw = log(fleet_env.remote)[1]
    assert "Sources held by the quality gate (2;" in raw["message"], raw["message"]
    assert "fresh (24 rows: coverage: selector rot suspected: column `price` is null in 24 of 24 rows" in raw["message"]
    assert "jobs (2 rows: volume: volume collapse: 2 rows, the fixture 35)" in raw["message"]
    assert sorted(committed_sources(fleet_env.remote, W)) == ["books", "catalog", "parts", "shops", "stocks"]

    status = run_fleet(env, "status", "--week", W)
    assert status.returncode == 0, status.stdout + status.stderr
    out = status.stdout
    failed = out.partition("checks: ")[2].partition("checks skipped: ")[0]
    assert failed.startswith("2 failed:"), out
    assert "WARN  fresh                coverage   selector rot suspected: column `price` is null in 24 of 24" in failed
    assert "ERROR jobs                 volume     volume collapse: 2 rows, the fixture 35" in failed
    skipped = out.partition("checks skipped: ")[2].partition("commit raw")[0]
    assert skipped.startswith("21:"), out  # volume, coverage and structure of 7 sources
    assert ("  volume     0 weeks of history, needs 2; rows judged against the fixture instead (books, catalog, "
            "jobs, parts, stocks)") in skipped, out
    assert ("  volume     0 weeks of history, needs 2; no fixture to judge the row count against (`fleet record` "
            "records one) (fresh, shops)") in skipped
    assert ("  coverage   0 weeks of history, needs 2; fill judged against the declared schema instead, value shape "
            "not judged (fresh, shops)") in skipped
    assert "  structure  no earlier week (books, catalog, fresh, jobs, parts, shops, stocks)" in skipped

    # the UI's check: its description and metadata say the same
    os.environ["DAGSTER_HOME"] = str(fleet_env.home / "dagster")
    with DagsterInstance.get() as instance:
        for source, passed in (("fresh", False), ("shops", True), ("books", True)):
            key = AssetCheckKey(AssetKey(["raw", source]), "quality")
            rec = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
            evaluation = rec.event.dagster_event.event_specific_data
            assert evaluation.passed is passed, (source, evaluation.description)
            assert "Skipped: volume (0 weeks of history, needs 2; " in evaluation.description
            assert evaluation.metadata["coverage/skipped"].value.startswith("0 weeks of history, needs 2; fill judged")
        assert evaluation.metadata["coverage/fixture_coverage/price"].value == 1.0  # books, against its fixture
