"""`fleet doctor` through real parts: the books demo site on 127.0.0.1, its fixture recorded by `fleet record`, then
the site's markup changed (fleet/demo/changes.py); Chromium replays last week's page from the fixture, scrapes
today's live, and the proposal runs through the engine before it is shown or applied."""
import shutil

import pytest

from fleet.demo.sites import DemoSites
from fleet_tests.conftest import ROOT, run_fleet


@pytest.fixture
def books(fleet_env):
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    shutil.copy(ROOT / "scrapers" / "books.py", scrapers / "books.py")
    with DemoSites(latency_ms=0) as site:
        fleet_env.env.update(FLEET_SCRAPERS_DIR=str(scrapers), FLEET_DEMO_URL=site.url)
        rec = run_fleet(fleet_env.env, "record", "books")
        assert rec.returncode == 0 and "24 rows" in rec.stdout, rec.stdout + rec.stderr
        fleet_env.site, fleet_env.module = site, scrapers / "books.py"
        yield fleet_env


def test_renamed_classes_proposed_tested_and_applied_only_with_apply(books):
    books.site.set_mode("books", "renamed_classes")
    before = books.module.read_text()
    res = run_fleet(books.env, "doctor", "books")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    # every locator, matched then and now
    assert "table#books tr.book         24     0  broken" in out and ".isbn                       24     0  broken" in out
    assert "24 of last week's rows found on today's page" in out
    # the diff replaces the row locator and each field's class with the renamed ones
    assert '-        for row in await page.locator("table#books tr.book")' in out
    assert "+  isbn: r.querySelector('.item-code')" in out and "+  price: r.querySelector('.item-cost')" in out
    # the patched scraper ran against today's page and got last week's rows back
    assert "the scraper with the proposal, against today's page: 24 rows (last week 24)" in out
    assert "(missing)" not in out and "the proposal passes" in out
    assert books.module.read_text() == before  # no --apply: nothing written

    applied = run_fleet(books.env, "doctor", "books", "--apply")
    assert applied.returncode == 0 and "applied to" in applied.stdout, applied.stdout + applied.stderr
    after = books.module.read_text()
    assert after != before and ".item-code" in after and "table#books tr.book" not in after
    again = run_fleet(books.env, "record", "books")  # the fixed scraper reads today's live site in full
    assert again.returncode == 0 and "no change (24 rows)" in again.stdout, again.stdout + again.stderr


def test_moved_table_and_changed_attribute_fixed_and_data_really_gone_never(books):
    for mode in ("moved_table", "changed_attribute"):
        books.site.set_mode("books", mode)
        res = run_fleet(books.env, "doctor", "books")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "table#books tr.book         24     0  broken" in res.stdout
        assert ".isbn                       24    24  ok" in res.stdout  # the cells' classes still match
        assert '+        for row in await page.locator("tr.book")' in res.stdout
        assert "24 rows (last week 24)" in res.stdout and "the proposal passes" in res.stdout

    books.site.set_mode("books", "data_gone")  # other items, other classes: none of last week's values
    before = books.module.read_text()
    res = run_fleet(books.env, "doctor", "books", "--apply")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "no replacement found for table#books tr.book: 0 of 24 of last week's rows found" in res.stdout
    assert "+++" not in res.stdout  # no diff proposed
    assert books.module.read_text() == before


def test_without_a_fixture_last_weeks_stored_rows_are_looked_for(fleet_env, monkeypatch):
    """No fixture: the newest week whose rows the store holds, its parsed values (a price as a number) found on
    today's page."""
    import dataclasses

    from fleet.engine.runner import EngineSettings, run_source
    from fleet.scraping.discovery import discover
    from fleet.storage.store import LocalArtifactStore

    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    shutil.copy(ROOT / "scrapers" / "books.py", scrapers / "books.py")
    with DemoSites(latency_ms=0) as site:
        monkeypatch.setenv("FLEET_HOME", str(fleet_env.home))
        monkeypatch.setenv("FLEET_DEMO_URL", site.url)
        source = {s.name: s for s in discover([scrapers])}["books"]
        settings = dataclasses.replace(EngineSettings.from_env(), browser_hosts="fresh")
        out = run_source(source, "2026-11-16", store=LocalArtifactStore(fleet_env.home / "artifacts"), run_id="t",
                         settings=settings)
        assert (out.status, out.rows) == ("ok", 24), out
        site.set_mode("books", "renamed_classes")
        fleet_env.env.update(FLEET_SCRAPERS_DIR=str(scrapers), FLEET_DEMO_URL=site.url)
        res = run_fleet(fleet_env.env, "doctor", "books")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "last good week 2026-11-16 (its stored rows; no fixture): 24 rows" in res.stdout
    assert "+  price: r.querySelector('.item-cost')" in res.stdout and "24 rows (last week 24)" in res.stdout
    assert "the proposal passes" in res.stdout


def test_a_class_renamed_in_most_rows_of_a_paginated_list_is_broken_and_repaired(fleet_env):
    """The catalog's bundled fixture (5 pages of a list); today its price class is renamed in 9 rows of 10."""
    scrapers = fleet_env.tmp / "scrapers"
    (scrapers / "fixtures").mkdir(parents=True)
    for name in ("catalog.py", "fixtures/catalog.har.zip", "fixtures/catalog.fixture.json"):
        shutil.copy(ROOT / "scrapers" / name, scrapers / name)
    with DemoSites(latency_ms=0) as site:
        site.set_mode("catalog", "selector_rot")
        fleet_env.env.update(FLEET_SCRAPERS_DIR=str(scrapers), FLEET_DEMO_URL=site.url)
        res = run_fleet(fleet_env.env, "doctor", "catalog")
    assert res.returncode == 0, res.stdout + res.stderr
    assert ".price                       8     1  broken" in res.stdout and "#products li.product         8     8  ok" in res.stdout
    assert "+  price: li.querySelector('span:nth-of-type(4)')" in res.stdout
    assert "40 rows (last week 40)" in res.stdout and "the proposal passes" in res.stdout
