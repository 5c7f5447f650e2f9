"""The demo sites and the demo scrapers, run in real Chromium against a local DemoSites server."""
from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
import inspect
import socket
import threading
import time
from pathlib import Path

import polars as pl
import pytest

import fleet.config
from fleet import ScrapeContext, Scraper
from fleet.demo import DemoSites, set_mode, site_url
from fleet.demo import sites as demo
from fleet.scraping.retry import RetryPolicy

ROOT = Path(__file__).resolve().parent.parent
WEEK = dt.date(2026, 11, 16)
HEALTHY = ("books", "catalog", "stocks", "jobs", "parts", "shops")


def load_scrapers(folder: Path) -> dict[str, type[Scraper]]:
    found = {}
    for path in sorted(folder.glob("*.py")):
        if path.name == "syntax_error.py":
            continue
        spec = importlib.util.spec_from_file_location(f"_demo_scrapers_{folder.name}_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for obj in vars(mod).values():
            if inspect.isclass(obj) and issubclass(obj, Scraper) and obj is not Scraper and obj.__module__ == mod.__name__:
                found[obj.name] = obj
    return found


SCRAPERS = load_scrapers(ROOT / "scrapers")
FAULTS = load_scrapers(ROOT / "scrapers" / "faults")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    state = tmp_path_factory.mktemp("demo-state")
    with DemoSites(port=0, latency_ms=10, state_dir=state) as sites:
        yield sites


@pytest.fixture(autouse=True)
def demo_env(server, monkeypatch):
    monkeypatch.setenv("FLEET_DEMO_URL", server.url)
    yield
    demo.clear_modes(server.state_dir)


@pytest.fixture(scope="module")
def browser():
    from playwright.async_api import async_playwright

    runner = asyncio.Runner()
    pw = runner.run(async_playwright().start())
    b = runner.run(pw.chromium.launch(executable_path=fleet.config.chromium_path(), headless=True))

    class Browser:
        def scrape(self, name: str, *, deep: bool = False, state_dir: Path | None = None, scrapers=None):
            cls = (scrapers or SCRAPERS)[name]
            ctx = ScrapeContext(source=name, week=WEEK, run_id="test", deep=deep, state_dir=state_dir,
                                retry=RetryPolicy(attempts=3, base_wait_s=0.05, jitter=0.0))

            async def go():
                context = await b.new_context()
                try:
                    page = await context.new_page()
                    return [row async for row in cls().scrape(page, ctx)]
                finally:
                    await context.close()

            rows = runner.run(asyncio.wait_for(go(), timeout=60))
            return rows, ctx

    yield Browser()
    runner.run(b.close())
    runner.run(pw.stop())
    runner.close()


def frame(name: str, rows: list[dict], scrapers=None) -> pl.DataFrame:
    cls = (scrapers or SCRAPERS)[name]
    return pl.DataFrame(rows, schema=dict(cls.schema), orient="row")


# --------------------------------------------------------------------------- the browser
def test_the_default_browser_is_debians_headless_shell_with_no_window_ui(monkeypatch):
    """Playwright's own headless mode runs the headless shell; the full browser's headless mode would build a
    browser window per context, with WebUI renderers for its omnibox (BENCHMARKS.md: ~5x the CPU)."""
    import shutil

    from playwright.async_api import async_playwright

    monkeypatch.delenv("FLEET_CHROMIUM", raising=False)
    shell = shutil.which("chromium-headless-shell")
    assert shell, ".ci/setup installs Debian's chromium-headless-shell"
    assert Path(fleet.config.chromium_path()).resolve() == Path(shell).resolve()

    async def targets():
        async with async_playwright() as pw:
            b = await pw.chromium.launch(executable_path=fleet.config.chromium_path(), headless=True,
                                         args=list(fleet.config.CHROMIUM_ARGS))
            context = await b.new_context()
            await (await context.new_page()).goto("data:text/html,<title>t</title>")
            infos = (await (await b.new_browser_cdp_session()).send("Target.getTargets"))["targetInfos"]
            await b.close()
            return infos

    infos = asyncio.run(asyncio.wait_for(targets(), 60))
    assert [t["type"] for t in infos if t["type"] == "page"] == ["page"]
    assert not [t for t in infos if t["type"] == "browser_ui" or t["url"].startswith("chrome://")], infos


def test_a_bad_fleet_chromium_is_refused_by_name(monkeypatch, tmp_path):
    monkeypatch.setenv("FLEET_CHROMIUM", str(tmp_path / "no-such-chromium"))
    with pytest.raises(fleet.config.FleetError, match="FLEET_CHROMIUM=.*no-such-chromium.* is not an executable"):
        fleet.config.chromium_path()


# --------------------------------------------------------------------------- definitions
def test_demo_scrapers_are_valid_and_faults_are_separate():
    assert set(SCRAPERS) == set(HEALTHY)
    assert set(FAULTS) == {"broken_selector", "hang_async", "hang_blocking", "empty_feed", "flaky_503", "wrong_type"}
    for cls in [*SCRAPERS.values(), *FAULTS.values()]:
        cls.validate_class()
        assert cls.description() and cls.timeout_s > 0
    assert FAULTS["hang_async"].timeout_s == 5 and FAULTS["hang_blocking"].timeout_s == 5
    src = (ROOT / "scrapers" / "faults" / "syntax_error.py").read_text()
    with pytest.raises(SyntaxError):
        compile(src, "syntax_error.py", "exec")


def test_site_url_needs_the_demo(monkeypatch):
    monkeypatch.delenv("FLEET_DEMO_URL")
    with pytest.raises(RuntimeError, match="demo sites are not running"):
        site_url("/books")
    monkeypatch.setenv("FLEET_DEMO_URL", "http://127.0.0.1:9/")
    assert site_url("books?week=x") == "http://127.0.0.1:9/books?week=x"


def test_generator_is_deterministic_and_week_dependent():
    other = WEEK + dt.timedelta(days=7)
    assert demo.books_rows(WEEK) == demo.books_rows(WEEK)
    assert [r["isbn"] for r in demo.books_rows(WEEK)] == [r["isbn"] for r in demo.books_rows(other)]
    assert [r["price"] for r in demo.books_rows(WEEK)] != [r["price"] for r in demo.books_rows(other)]
    for rows, key in [(demo.books_rows(WEEK), "isbn"), (demo.stocks_rows(WEEK), "symbol"), (demo.catalog_rows(WEEK), "sku")]:
        assert len({r[key] for r in rows}) == len(rows)


# --------------------------------------------------------------------------- healthy scrapers
def test_books(browser):
    rows, ctx = browser.scrape("books")
    expected = demo.books_rows(WEEK)
    assert len(rows) == 24 and ctx.pages_visited == 1
    assert rows == expected  # isbn, title, price exactly
    assert rows[0]["title"] == "The Silent River"
    frame("books", rows)


def test_catalog_follows_pagination(browser):
    rows, ctx = browser.scrape("catalog")
    expected = demo.catalog_rows(WEEK)
    assert len(rows) == 40 and ctx.pages_visited == 5
    assert [r["sku"] for r in rows] == [f"SKU-{1000 + i}" for i in range(40)]
    assert [r["price"] for r in rows] == [r["price"] for r in expected]
    assert [r["page"] for r in rows] == [i // 8 + 1 for i in range(40)]
    assert rows[9] == {**expected[9], "page": 2}
    frame("catalog", rows)


def test_stocks_needs_javascript(browser, server):
    import urllib.request

    raw = urllib.request.urlopen(server.url + "/stocks?week=" + WEEK.isoformat()).read().decode()
    assert "class='quote'" not in raw and "<tbody></tbody>" in raw  # no rows without a browser
    rows, _ = browser.scrape("stocks")
    assert rows == demo.stocks_rows(WEEK)
    assert len(rows) == 20
    frame("stocks", rows)


def test_jobs_clicks_load_more(browser):
    rows, ctx = browser.scrape("jobs")
    assert len(rows) == 35 and ctx.pages_visited == 1
    assert rows == demo.jobs_rows(WEEK)
    assert rows[34]["job_id"] == 5034 and isinstance(rows[34]["salary"], int)
    frame("jobs", rows)


def test_parts_uses_the_search_form(browser):
    rows, _ = browser.scrape("parts")
    expected = [{**r, "query": q} for q in ("bolt", "nut", "washer") for r in demo.parts_search(WEEK, q)]
    assert len(rows) == 18
    assert rows == expected
    assert rows[0]["name"] == "M3 bolt (zinc)" and rows[0]["part_no"] == "P-0000"
    frame("parts", rows)


def test_shops_visits_detail_pages_only_when_deep(browser, tmp_path):
    expected = demo.shops_rows(WEEK)
    shallow, ctx = browser.scrape("shops", deep=False)
    assert ctx.pages_visited == 1
    assert shallow == [{**r, "rating": None} for r in expected]
    deep, ctx = browser.scrape("shops", deep=True, state_dir=tmp_path)
    assert ctx.pages_visited == 1 + 15
    assert deep == expected and all(r["rating"] is not None for r in deep)
    assert frame("shops", deep)["rating"].null_count() == 0
    # A re-execution of the same week reuses the checkpointed ratings instead of revisiting details.
    again, ctx = browser.scrape("shops", deep=True, state_dir=tmp_path)
    assert again == expected and ctx.pages_visited == 1


def test_same_week_same_data_other_week_other_prices(browser, monkeypatch):
    first, _ = browser.scrape("books")
    second, _ = browser.scrape("books")
    assert first == second
    other = demo.books_rows(WEEK + dt.timedelta(days=7))
    assert [r["price"] for r in first] != [r["price"] for r in other]


# --------------------------------------------------------------------------- site modes
def test_modes_change_a_site_between_runs(browser, server):
    set_mode(server.state_dir, "books", "selector_rot")
    rows, _ = browser.scrape("books")
    assert len(rows) == 24
    assert sum(r["price"] is None for r in rows) == 21  # 9 rows in 10 lose their price cell
    assert all(r["title"] for r in rows)

    set_mode(server.state_dir, "books", "volume_collapse")
    rows, _ = browser.scrape("books")
    assert rows == demo.books_rows(WEEK)[:1]

    set_mode(server.state_dir, "jobs", "volume_collapse")
    rows, _ = browser.scrape("jobs")
    assert rows == demo.jobs_rows(WEEK)[:2]

    set_mode(server.state_dir, "books", "empty")
    set_mode(server.state_dir, "stocks", "empty")
    assert browser.scrape("books")[0] == []
    assert browser.scrape("stocks")[0] == []

    set_mode(server.state_dir, "books", "normal")
    assert browser.scrape("books")[0] == demo.books_rows(WEEK)


def test_control_endpoint(server):
    import json
    import urllib.request

    memory = DemoSites(latency_ms=0).start()
    try:
        got = json.loads(urllib.request.urlopen(memory.url + "/_control?site=catalog&mode=volume_collapse").read())
        assert got["modes"] == {"catalog": "volume_collapse"}
        html = urllib.request.urlopen(memory.url + f"/catalog?week={WEEK}").read().decode()
        assert html.count("class='product'") == 2 and "rel='next'" not in html
        urllib.request.urlopen(memory.url + "/_control?site=catalog&mode=normal")
        assert memory.modes() == {}
    finally:
        memory.stop()
    with pytest.raises(ValueError):
        set_mode(server.state_dir, "nope", "empty")


# --------------------------------------------------------------------------- faults
def test_flaky_503_succeeds_after_retries(browser, server):
    key = f"flaky-{WEEK.isoformat()}"
    server.reset_flaky(key)
    rows, _ = browser.scrape("flaky_503", scrapers=FAULTS)
    assert rows == [{"code": r["code"], "value": r["value"]} for r in demo.flaky_rows(WEEK)]
    assert server.flaky_hits[key] == 3


def test_broken_selector_raises(browser):
    from playwright.async_api import TimeoutError as PlaywrightTimeoutError

    t0 = time.monotonic()
    with pytest.raises(PlaywrightTimeoutError):
        browser.scrape("broken_selector", scrapers=FAULTS)
    assert time.monotonic() - t0 < 15


def test_empty_feed_and_wrong_type(browser):
    assert browser.scrape("empty_feed", scrapers=FAULTS)[0] == []
    rows, _ = browser.scrape("wrong_type", scrapers=FAULTS)
    assert len(rows) == 4 and rows[-1]["price"] == "n/a"
    with pytest.raises(Exception):
        frame("wrong_type", rows, scrapers=FAULTS)


def test_404_path(server):
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(server.url + "/missing")
    assert info.value.code == 404


def test_hang_endpoint_does_not_block_stop():
    sites = DemoSites(latency_ms=0).start()
    host, port = "127.0.0.1", sites.port
    received: list[bytes] = []

    def client():
        with socket.create_connection((host, port), timeout=30) as s:
            s.sendall(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
            received.append(s.recv(1024))

    t = threading.Thread(target=client, daemon=True)
    t.start()
    assert sites._hang_started.wait(5)
    time.sleep(0.3)
    assert not received  # still hanging
    t0 = time.monotonic()
    sites.stop()
    assert time.monotonic() - t0 < 3
    t.join(5)
    assert received == [b""]  # connection closed with no answer
