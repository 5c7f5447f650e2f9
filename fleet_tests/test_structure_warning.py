"""Structural early warning through real parts: the books demo scraper scraped by the engine (attempt process,
Chromium) for three weeks into a real store; its regions' aria structure is kept per week, and the source's checks
(fleet/defs/assets.py run_source_checks) warn when a redesign that keeps the rows moved it, and stay silent when
nothing moved."""
import pytest

from fleet.demo.sites import DemoSites
from fleet.engine.runner import EngineSettings, run_source
from fleet.quality.structure import structure
from fleet.scraping.discovery import discover
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import ROOT

WEEKS = ("2026-11-09", "2026-11-16", "2026-11-23")


def test_structure_of_an_aria_snapshot_leaves_the_data_out():
    aria = "\n".join([
        '- table "Prices":', "  - caption: Prices", "  - rowgroup:", '    - row "isbn price":',
        '      - columnheader "isbn"', '      - columnheader "price"', "  - rowgroup:", '    - row "978 £1.00":',
        '      - cell "978"', '      - cell "£1.00"', '    - row "979 £2.00":', '      - cell "979"',
        '      - link "Details":', "        - /url: /books/979", '- heading "Our books" [level=2]'])
    got = structure(aria)
    assert 'columnheader "isbn"' in got and 'caption "Prices"' in got and 'heading[level=2] "Our books"' in got
    assert "table/rowgroup/row/cell" in got and "table/rowgroup/row/link" in got
    assert not any("978" in x or "£" in x or "Details" in x or "/url" in x for x in got), got


@pytest.fixture
def books(scrape_home, monkeypatch):
    with DemoSites(latency_ms=0) as site:
        monkeypatch.setenv("FLEET_DEMO_URL", site.url)
        source = {s.name: s for s in discover([ROOT / "scrapers"])}["books"]
        yield site, source, LocalArtifactStore(scrape_home / "artifacts")


def _week(site, source, store, week, mode):
    from fleet.defs.assets import run_source_checks

    site.set_mode("books", mode)
    out = run_source(source, week, store=store, run_id=f"t-{week}", settings=EngineSettings.from_env())
    assert out.status == "ok" and out.rows == 24, out
    assert store.read_json(week, keys.structure_key("books")), "no structure stored"
    return {o.name: o for o in run_source_checks(source, week, store, out.attempt)}["structure"]


def test_a_redesign_that_keeps_the_rows_warns_and_an_unchanged_week_is_silent(books):
    site, source, store = books
    first = _week(site, source, store, WEEKS[0], "normal")
    assert first.passed and "no earlier week" in first.message
    same = _week(site, source, store, WEEKS[1], "normal")  # other prices, same markup
    assert same.passed and same.message == f"structure as in week {WEEKS[0]}", same.message
    moved = _week(site, source, store, WEEKS[2], "restyled")  # still 24 rows
    assert not moved.passed and moved.severity == "WARN", moved
    msg = moved.message
    assert f"markup changed since week {WEEKS[1]}" in msg and "24 rows still come out" in msg, msg
    assert "region of `table#books tr.book`" in msg and "/books?week=*" in msg, msg
    assert 'gone columnheader "isbn"' in msg and 'caption "Prices this week"' in msg, msg
    assert "frame: new landmarks main \"Bookshop\"" in msg and "fleet doctor books" in msg, msg
    assert "the region of `table#books tr.book` now at main > table (was table)" in msg, msg
    assert moved.metadata["structure/changed"] > 0.2
