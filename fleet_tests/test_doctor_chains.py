"""`fleet doctor` on scrapers written with Playwright locator chains, the style most real scrapers use: the README's
(`page.locator("tr.book").all()`, `row.locator("td.isbn").inner_text()`), a bound locator walked with `nth(i)`
(positions, XPath, `first`, `text_content`), test ids, roles and labels, and rows kept in a list. Through real
parts: a bookshop page on 127.0.0.1 (fleet_tests/shelf_site.py) whose markup changes as a redesign changes it, read
by Chromium; the CLI's tests go through the engine, the fixture and the store."""
import asyncio
import dataclasses
import re

import pytest

from fleet import config
from fleet.lifecycle import relocate
from fleet.scraping import chains, locators
from fleet_tests.conftest import run_fleet
from fleet_tests.shelf_site import IDIOMS, ShelfSite, scraper

CHANGES = ("renamed_classes", "moved_table", "changed_attribute", "testids")


async def _read_all(page, used) -> list[dict]:
    return await relocate.values(page, used.chains[0])


async def _repair_each_change(tmp_path, idiom: str) -> dict:
    """For each change of the page: last week's values read through the scraper's locators, the proposal on this
    week's page, and the values the patched module's own locators read there."""
    from playwright.async_api import async_playwright

    module = tmp_path / "shelf.py"
    module.write_text(scraper(idiom))
    used = locators.parse(module)
    assert used.unread == [] and len(used.chains) == 1, used
    row = used.chains[0]
    site, out = ShelfSite(), {}
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=config.chromium_path())
            page = await browser.new_page()
            await page.goto(site.url + "/shelf")
            old = await relocate.values(page, row)
            for mode in (*CHANGES, "data_gone"):
                site.mode = mode
                await page.goto(site.url + "/shelf")
                counted = await relocate.counts(page, row)
                proposal = await relocate.propose(page, old, row, 0.5)
                got = None
                if "error" not in proposal:
                    edits = [(row.spans, proposal["row"])] + [(f.spans, proposal["fields"][f.name]) for f in row.fields]
                    patched = tmp_path / f"shelf_{mode}.py"
                    patched.write_text(chains.patch(module.read_text(), edits))
                    await page.reload()  # the proposal's marks gone: the patched locators read the page as it is
                    got = await _read_all(page, locators.parse(patched))
                out[mode] = (counted, proposal, got)
            await browser.close()
    finally:
        site.stop()
    return {"old": old, "row": row, **out}


@pytest.mark.parametrize("idiom", sorted(IDIOMS))
def test_each_idiom_repaired_on_each_change_and_never_where_the_data_is_gone(tmp_path, idiom):
    res = asyncio.run(_repair_each_change(tmp_path, idiom))
    old, row = res["old"], res["row"]
    assert len(old) == 12 and old[0]["isbn"] == "978-0-1000" and old[0]["link"] == "/book/1000", old
    broke = 0
    for mode in CHANGES:
        counted, proposal, got = res[mode]
        assert "error" not in proposal, (mode, proposal)
        assert got == old, (mode, proposal)  # the patched scraper's locators read last week's values back
        changed = proposal["row"] != row.chain or any(proposal["fields"][f.name] != f.chain for f in row.fields)
        still = counted[relocate.label(row.root, row.chain)] == 12 and all(
            v == 12 for k, v in counted.items() if k.startswith("row."))
        assert changed != still, (mode, counted, proposal)  # a proposal exactly where something broke
        broke += changed
    assert broke >= 2, res  # each idiom is broken by at least two of the changes
    # test ids where this week's page has them: preferred over a class or a position; a locator that still finds
    # the same element is kept as it is
    isbn = next(f.chain for f in row.fields if f.name == "isbn")
    assert res["testids"][1]["row"] == 'get_by_test_id("shelf-book")', res["testids"][1]
    assert res["testids"][1]["fields"]["isbn"] in ('get_by_test_id("shelf-isbn")', isbn), res["testids"][1]
    assert idiom == "nth" or res["testids"][1]["fields"]["isbn"] != isbn  # only nth's td.first still finds it
    counted, proposal, got = res["data_gone"]
    assert proposal == {"error": "0 of 12 of last week's rows found on today's page (6 needed)", "found": 0}


def test_what_it_cannot_read_is_said_by_line_and_why(tmp_path):
    module = tmp_path / "odd.py"
    module.write_text(scraper("readme").replace('page.locator("table#books tr.book")', "page.locator(ROWS)")
                      + '''        sel = "td.x"
        for item in await page.locator("li.item").all():
            yield {"x": await item.locator(sel).inner_text(), "y": await item.inner_text(),
                   "z": await item.locator("b").filter(has=page.locator("i")).inner_text()}
''')
    used = locators.parse(module)
    line = {what: n + 1 for n, text in enumerate(module.read_text().splitlines())
            for what in ("page.locator(ROWS)", "item.locator(sel)", "filter(has=") if what in text}
    literal = "is not a literal (a string, a number or a module constant); fleet doctor reads locators written as literals"
    assert used.unread == [
        f"line {line['page.locator(ROWS)']}: ROWS {literal}",
        f"line {line['item.locator(sel)']}: sel {literal}",
        f"line {line['item.locator(sel)']}: item.inner_text(): the row element's own value; fleet doctor repairs "
        "locators of a row's parts",
        f"line {line['filter(has=']}: item.locator('b').filter(has=page.locator('i')): a filter by another locator "
        "is not followed; filter(has_text=...) is"], used.unread
    assert [r.chain for r in used.chains] == []  # nothing guessed: li.item's only readable field is not enough


def test_rows_of_a_comprehension_filtered_by_text(tmp_path):
    module = tmp_path / "compact.py"
    module.write_text('''async def scrape(self, page, ctx):
    return [{"isbn": await r.locator("td.isbn").inner_text(), "t": await r.get_by_text("x", exact=True).text_content()}
            for r in await page.get_by_role("row").filter(has_text="978").all()]
''')
    used = locators.parse(module)
    assert used.unread == [] and [(r.chain, [(f.name, f.chain, f.read) for f in r.fields]) for r in used.chains] == [
        ('get_by_role("row").filter(has_text="978")', [("isbn", 'locator("td.isbn")', "inner_text"),
                                                       ("t", 'get_by_text("x", exact=True)', "text_content")])]


def test_a_chains_selector_named_elsewhere_too_is_counted_on_its_own(tmp_path):
    """``page.wait_for_selector("table#books tr.book")`` next to the row chain: a repaired chain would leave it
    waiting for the old rows, so it stays in the doctor's table (a stray broken locator), not hidden in the chain."""
    from fleet.lifecycle.examine import in_chains

    plain, waits = tmp_path / "plain.py", tmp_path / "waits.py"
    plain.write_text(scraper("readme"))
    waits.write_text(scraper("readme").replace(
        "        for row in", '        await page.wait_for_selector("table#books tr.book")\n        for row in'))
    assert locators.parse(plain).outside == set()
    assert in_chains(locators.parse(plain)) == {"table#books tr.book", "td.price", "td.isbn", "td.title",
                                                 "td.more a", "href"}
    assert locators.parse(waits).outside == {"table#books tr.book"}
    assert "table#books tr.book" not in in_chains(locators.parse(waits))


def test_cli_names_the_line_or_says_there_is_nothing_to_repair(fleet_env):
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    (scrapers / "shelf.py").write_text(scraper("readme").replace('page.locator("table#books tr.book")',
                                                                 "page.locator(ROWS)"))
    from fleet.lifecycle.scaffold import TEMPLATE

    (scrapers / "fresh.py").write_text(TEMPLATE.format(cls="Fresh", name="fresh", url="http://127.0.0.1:9/"))
    fleet_env.env.update(FLEET_SCRAPERS_DIR=str(scrapers))
    res = run_fleet(fleet_env.env, "doctor", "shelf")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "has no row locator fleet doctor can read: line 16: ROWS is not a literal" in res.stdout + res.stderr
    res = run_fleet(fleet_env.env, "doctor", "fresh")  # `fleet new`'s scraper reads the page's title, no element
    assert res.returncode == 2, res.stdout + res.stderr
    assert "reads no row of the page through a locator" in res.stdout + res.stderr


@pytest.fixture
def shelf(fleet_env):
    """The README-style shelf scraper, its fixture recorded from last week's page."""
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    site = ShelfSite()
    try:
        fleet_env.env.update(FLEET_SCRAPERS_DIR=str(scrapers), FLEET_DEMO_URL=site.url)
        fleet_env.site, fleet_env.scrapers = site, scrapers
        yield fleet_env
    finally:
        site.stop()


def _record(env, scrapers, idiom: str):
    (scrapers / "shelf.py").write_text(scraper(idiom))
    rec = run_fleet(env.env, "record", "shelf")
    assert rec.returncode == 0 and "12 rows" in rec.stdout, rec.stdout + rec.stderr
    return scrapers / "shelf.py"


def test_readme_style_renamed_classes_proposed_checked_and_applied_only_with_apply(shelf):
    module = _record(shelf, shelf.scrapers, "readme")
    before = module.read_text()
    shelf.site.mode = "renamed_classes"
    res = run_fleet(shelf.env, "doctor", "shelf")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert re.search(r'page\.locator\("table#books tr\.book"\) +12 +0  broken', out), out
    assert re.search(r'row\.locator\("td\.isbn"\) +12 +\?  not known now', out), out
    assert "td.isbn " not in out  # a chain's literal is counted as part of its chain, not on the whole page
    assert "12 of last week's rows found on today's page" in out
    assert '-        for row in await page.locator("table#books tr.book").all():' in out
    assert '+        for row in await page.get_by_test_id("book").all():' in out  # the page's test id, not a class
    assert '+            price = await row.locator(".item-cost").inner_text()' in out
    assert "the scraper with the proposal, against today's page: 12 rows (last week 12)" in out
    assert "(missing)" not in out and "the proposal passes" in out
    assert module.read_text() == before

    applied = run_fleet(shelf.env, "doctor", "shelf", "--apply")
    assert applied.returncode == 0 and "applied to" in applied.stdout, applied.stdout + applied.stderr
    assert 'page.get_by_test_id("book")' in module.read_text()
    again = run_fleet(shelf.env, "record", "shelf")  # the repaired scraper reads today's live page in full
    assert again.returncode == 0 and "no change (12 rows)" in again.stdout, again.stdout + again.stderr


def test_data_gone_gets_no_replacement_and_nothing_is_written(shelf):
    module = _record(shelf, shelf.scrapers, "nth")
    before = module.read_text()
    shelf.site.mode = "data_gone"
    res = run_fleet(shelf.env, "doctor", "shelf", "--apply")
    assert res.returncode == 1, res.stdout + res.stderr
    assert ('no replacement found for page.locator("#books").locator("tr.book"): 0 of 12 of last week\'s rows '
            "found on today's page") in res.stdout, res.stdout
    assert "+++" not in res.stdout and module.read_text() == before


def test_site_down_uses_the_failed_attempts_kept_page(shelf, monkeypatch):
    """The week's run failed on the redesigned page (its evidence keeps the page); then the site went down:
    `fleet doctor` proposes from the kept page and checks the proposal by replaying it."""
    from fleet.engine.runner import EngineSettings, run_source
    from fleet.scraping.discovery import discover
    from fleet.storage.store import LocalArtifactStore

    _record(shelf, shelf.scrapers, "guarded")
    shelf.site.mode = "renamed_classes"
    for k, v in shelf.env.items():
        if k.startswith("FLEET_"):
            monkeypatch.setenv(k, v)
    source = {s.name: s for s in discover([shelf.scrapers])}["shelf"]
    settings = dataclasses.replace(EngineSettings.from_env(), browser_hosts="fresh")
    out = run_source(source, "2026-11-23", store=LocalArtifactStore(shelf.home / "artifacts"), run_id="t",
                     settings=settings)
    assert out.status == "failed" and "no books on the shelf" in out.error and out.evidence.get("html"), out
    shelf.site.stop()
    res = run_fleet(shelf.env, "doctor", "shelf")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "today's page is the one its failed attempt of week 2026-11-23 kept" in out
    assert '+        books = await page.get_by_test_id("book").all()' in out
    assert "the scraper with the proposal, against today's page (kept): 12 rows (last week 12)" in out
    assert "the proposal passes" in out


def test_without_a_fixture_the_stored_rows_parsed_values_are_looked_for(shelf, monkeypatch):
    """No fixture: last week is the newest week whose rows the store holds; its parsed values (a price as a number,
    a link as its href) are found on today's page and the nth(i) scraper's chains repaired from them."""
    from fleet.engine.runner import EngineSettings, run_source
    from fleet.scraping.discovery import discover
    from fleet.storage.store import LocalArtifactStore

    (shelf.scrapers / "shelf.py").write_text(scraper("nth"))
    for k, v in shelf.env.items():
        if k.startswith("FLEET_"):
            monkeypatch.setenv(k, v)
    source = {s.name: s for s in discover([shelf.scrapers])}["shelf"]
    settings = dataclasses.replace(EngineSettings.from_env(), browser_hosts="fresh")
    out = run_source(source, "2026-11-16", store=LocalArtifactStore(shelf.home / "artifacts"), run_id="t",
                     settings=settings)
    assert (out.status, out.rows) == ("ok", 12), out
    shelf.site.mode = "changed_attribute"
    res = run_fleet(shelf.env, "doctor", "shelf")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "last good week 2026-11-16 (its stored rows; no fixture): 12 rows" in out
    assert '+        rows = page.get_by_test_id("item-book")' in out, out
    assert "12 rows (last week 12)" in out and "the proposal passes" in out
