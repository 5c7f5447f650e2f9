"""Provenance through a real worker and Chromium: every raw row carries when its page was fetched (UTC) and its
scraper module's git blob id; a rerun that reuses the stored rows keeps both unchanged."""
import datetime as dt
import subprocess

import polars as pl

from fleet.scraping.discovery import discover
from fleet.storage import store as keys
from fleet_tests.trust import sites  # noqa: F401 (a fixture)
from fleet.storage.provenance import FETCHED_AT, SCRAPER_REV
from fleet_tests.conftest import WEEK
from fleet_tests.test_runner import run, scraper

TWO_PAGES = """
        for n in (1, 2):
            await ctx.goto(page, site_url(f"/catalog?week={ctx.week.isoformat()}&page={n}"))
            for sku in await page.locator("li.product .sku").all_text_contents():
                yield {"id": int(sku.split("-")[1]), "page": n}
            await asyncio.sleep(0.3)
"""


def test_every_raw_row_carries_its_fetch_time_and_scraper_revision(sites, scrape_home, tmp_path):
    src = scraper(tmp_path, "provenanced", TWO_PAGES, module="from fleet.demo import site_url\n",
                  schema='{"id": pl.Int64, "page": pl.Int64}')
    before = dt.datetime.now(dt.timezone.utc)
    out, store = run(scrape_home, src)
    after = dt.datetime.now(dt.timezone.utc)
    assert (out.status, out.rows) == ("ok", 16), out
    path = store.path(WEEK, keys.rows_key(keys.read_outcome(store, WEEK, "provenanced")))
    frame = pl.read_parquet(path)
    assert frame.schema[FETCHED_AT] == pl.Datetime("us", "UTC") and frame[FETCHED_AT].null_count() == 0
    blob = subprocess.run(["git", "hash-object", str(src.module_path)], capture_output=True, text=True).stdout.strip()
    assert set(frame[SCRAPER_REV]) == {blob}
    by_page = {n: frame.filter(pl.col("page") == n)[FETCHED_AT] for n in (1, 2)}
    assert all(before <= t <= after for t in frame[FETCHED_AT])
    # rows of a page share the time it was fetched, which is before the next page's
    assert by_page[1].n_unique() == 1 and by_page[2].n_unique() == 1
    assert by_page[1][0] + dt.timedelta(seconds=0.25) < by_page[2][0]

    # the checks do not take fleet's columns for schema drift
    checks = store.read_json(WEEK, "raw/provenanced.checks.json") or []
    assert all(c["passed"] for c in checks if c["name"] == "schema")

    # a rerun reuses the stored rows, their provenance included, even after the module changed
    src.module_path.write_text(src.module_path.read_text() + "\n# a new revision\n")
    src = {s.name: s for s in discover([src.module_path.parent])}["provenanced"]
    again, store = run(scrape_home, src)
    assert again.reused
    assert pl.read_parquet(path).equals(frame)


def test_a_scraper_may_name_any_column_a_site_uses_but_not_fleets_own(tmp_path):
    """``source``, ``url``, ``fetched_at``… are a site's names as much as anyone's: a schema may use them. Only
    fleet's namespace (``_fleet_``) is reserved."""
    d = tmp_path / "s"
    d.mkdir()
    body = ("import polars as pl\nfrom fleet import Scraper\n\nclass Clash(Scraper):\n"
            "    name = 'clash'\n    schema = {{'id': pl.Int64, '{col}': pl.String}}\n"
            "    key = ('id',)\n\n    async def scrape(self, page, ctx):\n        yield {{}}\n")
    for col in ("source", "fetched_at", "scraper_rev", "stale_since", "row_id", "week", "url"):
        (d / "clash.py").write_text(body.format(col=col))
        (src,) = discover([d])
        assert not src.broken, (col, src.error)
    (d / "clash.py").write_text(body.format(col=FETCHED_AT))
    (src,) = discover([d])
    assert src.broken and f"column '{FETCHED_AT}' is reserved" in src.error, src.error
