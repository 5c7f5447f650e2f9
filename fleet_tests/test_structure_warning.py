"""Structural early warning through real parts: the books demo scraper scraped by the engine (attempt process,
Chromium) for three weeks into a real store; its regions' aria structure is kept per week, and the source's checks
(fleet/defs/assets.py run_source_checks) warn when a redesign that keeps the rows moved it, and stay silent when
nothing moved."""
import pytest

from fleet.demo.sites import DemoSites
from fleet.engine.runner import EngineSettings, run_source
from fleet.defs.assets import run_source_checks
from fleet.quality import frame as frames
from fleet.quality.structure import compare, pages, structure
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


CATALOG_WEEKS = ("2026-11-02", "2026-11-09", "2026-11-16", "2026-11-23", "2026-11-30")


@pytest.fixture
def catalog(scrape_home, monkeypatch):
    with DemoSites(latency_ms=0) as site:
        monkeypatch.setenv("FLEET_DEMO_URL", site.url)
        source = {s.name: s for s in discover([ROOT / "scrapers"])}["catalog"]
        yield site, source, LocalArtifactStore(scrape_home / "artifacts")


def test_a_redesign_around_intact_rows_warns_and_weekly_banners_ads_and_counts_do_not(catalog):
    """Four weeks of a live shop's churn (a rotating banner, the week's count and dates, an ad that comes and goes)
    stay silent; the fifth week's new template around the same rows (header, navigation, aside, footer, a new
    heading, the list moved into a section) warns, naming what moved."""
    site, source, store = catalog
    checks = []
    for week in CATALOG_WEEKS[:4]:
        site.set_mode("catalog", "promoted")
        out = run_source(source, week, store=store, run_id=f"t-{week}", settings=EngineSettings.from_env())
        assert out.status == "ok" and out.rows == 40, out
        checks.append({o.name: o for o in run_source_checks(source, week, store, out.attempt)}["structure"])
    assert all(c.passed for c in checks), [c.message for c in checks]
    # the churn was there and was seen: the banner's heading text moved, and the ad's landmark came and went
    stored = [pages(store.read_json(w, keys.structure_key("catalog")))["/catalog?week=*"] for w in CATALOG_WEEKS[:4]]
    assert len({s["headings"]["h2"] for s in stored}) == 4, [s["headings"] for s in stored]
    assert any("complementary" in s["landmarks"] for s in stored) and \
        any("complementary" not in s["landmarks"] for s in stored), [s["landmarks"] for s in stored]
    assert any("frame: new landmarks complementary" in c.message for c in checks[1:]), [c.message for c in checks]
    assert all(c.metadata["structure/changed"] == 0 for c in checks[1:]), [c.metadata for c in checks]

    site.set_mode("catalog", "redesigned")
    out = run_source(source, CATALOG_WEEKS[4], store=store, run_id="t-redesign", settings=EngineSettings.from_env())
    assert out.status == "ok" and out.rows == 40, out  # the scraper did not notice
    moved = {o.name: o for o in run_source_checks(source, CATALOG_WEEKS[4], store, out.attempt)}["structure"]
    assert not moved.passed and moved.severity == "WARN", moved
    msg = moved.message
    assert f"markup changed since week {CATALOG_WEEKS[3]} (the page's frame around them)" in msg, msg
    assert "40 rows still come out" in msg and "fleet doctor catalog" in msg, msg
    assert "/catalog?page=*&week=*, /catalog?week=*: frame: new landmarks banner, banner > navigation \"Site\", " \
           "complementary, contentinfo, main, main > region \"Products\";" in msg, msg
    assert msg.count("frame:") == 1, msg  # the listing's first and later pages: one template, said once
    assert "the region of `#products li.product` now at main > region/section > ul (was ul)" in msg, msg
    assert "the region of `a[rel=next]` now at main > region/section > navigation/nav (was navigation/nav)" in msg
    assert "heading 'All products' new (main > region > h2)" in msg, msg
    assert moved.metadata["structure/changed"] == 0  # the regions themselves did not change: only the frame did


def test_the_frame_counts_what_moved_and_reads_weeks_stored_before_it():
    week = {"chains": {"ul.items li": "main > ul"}, "landmarks": {"main": "", "banner": ""},
            "headings": {"h1": "Shop", "main > h2": "Week #"}}
    ad = dict(week, landmarks={**week["landmarks"], "complementary": ""})  # an ad's aside: one change, silent
    assert frames.compare(week, ad) == (1, ["new landmarks complementary"])
    retitled = dict(week, headings={"h1": "Shop", "main > h2": "Summer sale"})  # a heading's text is data
    assert frames.compare(week, retitled) == (0, [])
    wrapped = dict(week, chains={"ul.items li": "main > region/section > ul"})  # a region moved: warns on its own
    count, said = frames.compare(week, wrapped)
    assert count >= frames.FRAME_WARN and said == ["the region of `ul.items li` now at main > region/section > ul "
                                                   "(was main > ul)"]
    # a week stored before the frame: its regions compare, its landmark lines (now the frame's) left out
    old = {"/x": {"ul.items li": ["list/listitem", 'landmark main "Shop"']}}
    new = {"version": 2, "pages": {"/x": {"regions": {"ul.items li": ["list/listitem"]}, **week}}}
    assert compare(old, new) == (0.0, [], 0, [])
    assert frames.mask("Offer ends 2026-11-22, 3 left") == "Offer ends #, # left"
    # one template's churn on a listing's two pages (an ad on each) is counted once, not once a page
    two = {"version": 2, "pages": {p: {"regions": {}, **week} for p in ("/x", "/x?page=*")}}
    ads = {"version": 2, "pages": {p: {"regions": {}, **ad} for p in ("/x", "/x?page=*")}}
    assert compare(two, ads) == (0.0, [], 1, ["/x, /x?page=*: frame: new landmarks complementary"])


QUIET_WEEKS = ("2026-10-26", "2026-11-02", "2026-11-09", "2026-11-16", "2026-11-23", "2026-11-30")


def test_no_false_alarm_over_six_weeks_of_every_demo_source(scrape_home, monkeypatch):
    """Six consecutive weeks of the six demo sources without a redesign (other prices, counts, dates; the catalog
    with its weekly banner, counts and ad): not one structure WARN, and every week after the first compared."""
    with DemoSites(latency_ms=0) as site:
        monkeypatch.setenv("FLEET_DEMO_URL", site.url)
        site.set_mode("catalog", "promoted")
        store = LocalArtifactStore(scrape_home / "artifacts")
        sources = {s.name: s for s in discover([ROOT / "scrapers"])}
        checks = {}
        for week in QUIET_WEEKS:
            for name in ("books", "catalog", "stocks", "jobs", "parts", "shops"):
                out = run_source(sources[name], week, store=store, run_id=f"q-{name}-{week}",
                                 settings=EngineSettings.from_env())
                assert out.status == "ok" and out.rows, (name, week, out)
                checks[name, week] = {o.name: o for o in run_source_checks(sources[name], week, store,
                                                                           out.attempt)}["structure"]
        framed = {(name, w): all(p.get("chains") for p in pages(store.read_json(w, keys.structure_key(name))).values())
                  for name, w in checks}
    assert all(framed.values()), framed  # every page of every week has its frame: the comparison is not empty
    warned = {k: c.message for k, c in checks.items() if not c.passed}
    compared = [k for k, c in checks.items() if c.message.startswith("structure as in week")]
    print(f"structure WARNs: {len(warned)} of {len(checks)} source-weeks ({len(compared)} compared)")
    assert not warned, warned
    assert len(compared) == 6 * (len(QUIET_WEEKS) - 1), {k: c.message for k, c in checks.items()}
