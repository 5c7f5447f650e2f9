"""Every fault source together with the healthy ones in one real multiprocess run: each fails alone."""
import os
import re

from dagster import AssetCheckKey, AssetKey, DagsterInstance

from fleet_tests.conftest import SOURCE, WEEK, committed_rows, run_fleet, writable_dir

HEALTHY = ["books", "catalog", "jobs", "parts", "shops", "stocks"]


def _status_lines(text: str) -> dict[str, list[str]]:
    return {m.group(1): m.group(0).split() for m in re.finditer(r"^([a-z_0-9]+) +(ok|failed|timeout|empty|partial) .*$", text, re.M)}


def test_faulty_sources_cost_only_themselves(fleet_env):
    env = {**fleet_env.env, "FLEET_DEMO_FAULTS": "1"}
    res = run_fleet(env, "demo", "--week", "2026-W47", "--force")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-4000:]

    frame = committed_rows(fleet_env.remote, WEEK)
    committed = set(frame[SOURCE])
    assert committed == set(HEALTHY) | {"flaky_503"}  # empty_feed has no rows; failures are not committed

    status = run_fleet(env, "status", "--week", WEEK)
    lines = _status_lines(status.stdout)
    expect = {"broken_selector": ("failed", "source"), "wrong_type": ("failed", "source"),
              "syntax_error": ("failed", "source"), "hang_async": ("timeout", "source"),
              "hang_blocking": ("timeout", "source"), "empty_feed": ("empty", "-"), "flaky_503": ("ok", "-")}
    for name in HEALTHY:
        expect[name] = ("ok", "-")
    for name, (st, cat) in expect.items():
        assert name in lines, f"{name} missing from fleet status:\n{status.stdout}"
        assert lines[name][1:3] == [st, cat], lines[name]
    assert "Timeout 2000ms exceeded" in status.stdout  # the broken selector's own error
    assert "column 'price' expects Float64, got 'n/a'" in status.stdout
    assert "SyntaxError" in status.stdout or "invalid syntax" in status.stdout or "was never closed" in status.stdout

    # the hanging ones were stopped by their 5 s limit, not later. An async hang is stopped by the worker itself at
    # its soft deadline (the limit minus a 2 s grace to save evidence), so it ends between 3 s and the limit; a
    # blocking one cannot be interrupted and is killed by its step at the limit.
    assert 5 - 2 <= float(lines["hang_async"][4]) <= 5 + 5, lines["hang_async"]
    assert 5 <= float(lines["hang_blocking"][4]) <= 5 + 5, lines["hang_blocking"]
    # the step kills the worker with its browser
    blocked = (fleet_env.home / "artifacts" / WEEK / "evidence" / "hang_blocking" / "error.txt").read_text()
    assert "its attempt process and browser were killed" in blocked, blocked

    # browser failures keep a screenshot and the page HTML with the week's artifacts
    evidence = fleet_env.home / "artifacts" / WEEK / "evidence"
    for name in ("broken_selector", "wrong_type"):
        assert (evidence / name / "screenshot.png").stat().st_size > 1000
        assert "<html" in (evidence / name / "page.html").read_text().lower()
    # so does the async hang, whose page still waits on a navigation that never answers (stopped first, as the
    # browser's stop button would: waiting, it answers neither page.content() nor page.screenshot())
    assert (evidence / "hang_async" / "screenshot.png").read_bytes().startswith(b"\x89PNG")
    assert "<html" in (evidence / "hang_async" / "page.html").read_text().lower()

    # the empty feed's quality check failed on non_empty, with ERROR severity, and did not block anything
    os.environ["DAGSTER_HOME"] = str(fleet_env.home / "dagster")
    with DagsterInstance.get() as instance:
        key = AssetCheckKey(AssetKey(["raw", "empty_feed"]), "quality")
        rec = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
        evaluation = rec.event.dagster_event.event_specific_data
        assert evaluation.passed is False and evaluation.severity.value == "ERROR"
        assert evaluation.description.startswith("non_empty: empty feed: source empty_feed returned no rows")
        assert evaluation.metadata["non_empty"].value.startswith("failed ERROR: empty feed")
        assert evaluation.metadata["schema"].value.startswith("passed: ")
        ok_key = AssetCheckKey(AssetKey(["raw", "books"]), "quality")
        ok = instance.event_log_storage.get_latest_asset_check_execution_by_key([ok_key])[ok_key]
        assert ok.event.dagster_event.event_specific_data.passed is True
        # a check evaluates the week it ran for: its result completes the execution the run planned for that
        # partition, and no planned execution is left behind
        for check_key in (key, ok_key):
            history = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=10)
            assert [(r.partition, r.status.value) for r in history] == [
                (WEEK, "FAILED" if check_key == key else "SUCCEEDED")], history


SLOW = '''
import asyncio, os, time
import polars as pl
from fleet import Scraper


class Slow(Scraper):
    name = "{name}"
    schema = {{"id": pl.Int64}}
    key = ("id",)

    async def scrape(self, page, ctx):
        t0 = time.time()
        await asyncio.sleep(2)
        with open(os.environ["SPANS"], "a") as fh:
            fh.write(f"{{t0}} {{time.time()}}\\n")
        yield {{"id": 1}}
'''


def test_scraper_cap_holds_across_concurrent_runs(fleet_env):
    import subprocess
    import sys

    d = fleet_env.tmp / "slow"
    d.mkdir()
    for n in ("slow_a", "slow_b"):
        (d / f"{n}.py").write_text(SLOW.format(name=n))
    spans = writable_dir(fleet_env.home) / "spans"
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d), "FLEET_MAX_PARALLEL": "1", "SPANS": str(spans)}
    procs = [subprocess.Popen([sys.executable, "-m", "fleet.cli", "run", "--week", w, "--force"], env=env,
                              cwd=fleet_env.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for w in ("2026-11-09", "2026-11-16")]
    assert [p.wait(timeout=400) for p in procs] == [0, 0]
    intervals = sorted(tuple(map(float, line.split())) for line in spans.read_text().splitlines())
    assert len(intervals) == 4
    for (s1, e1), (s2, e2) in zip(intervals, intervals[1:]):
        assert s2 >= e1, f"two scrapes overlapped although the cap is one: {intervals}"


def test_the_cap_is_held_around_the_scrape_and_the_pool_above_it(fleet_env):
    """With FLEET_MAX_PARALLEL=1 the instance's scrapers pool admits two source steps at once (2 x the cap) and
    fleet's own slot one scrape: the two scrapes never overlap, the second step started while the first scraped
    (its start-up overlapped the scrape), and it logged its wait for the slot, naming who was scraping."""
    d = fleet_env.tmp / "slow"
    d.mkdir()
    for n in ("slow_a", "slow_b"):
        (d / f"{n}.py").write_text(SLOW.format(name=n))
    spans = writable_dir(fleet_env.home) / "spans"
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d), "FLEET_MAX_PARALLEL": "1", "SPANS": str(spans)}
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    (s1, e1), (s2, e2) = sorted(tuple(map(float, line.split())) for line in spans.read_text().splitlines())
    assert s2 >= e1, "two scrapes overlapped although the cap is one"

    os.environ["DAGSTER_HOME"] = str(fleet_env.home / "dagster")
    with DagsterInstance.get() as instance:
        assert instance.event_log_storage.get_concurrency_info("scrapers").slot_count == 2
        run = next(r for r in instance.get_runs() if r.job_name == "scrape_week")
        steps, waits = {}, []
        for e in instance.all_logs(run.run_id):
            if e.dagster_event is not None and e.step_key:
                steps.setdefault(e.step_key, {}).setdefault(e.dagster_event.event_type_value, e.timestamp)
            if "waiting for a scrape slot" in (e.user_message or ""):
                waits.append(e.user_message)
    first, second = sorted(steps.values(), key=lambda ev: ev["STEP_SUCCESS"])
    assert second["STEP_START"] < first["STEP_SUCCESS"], "the second step did not start while the first scraped"
    assert len(waits) == 1 and "all 1 are scraping (slow_" in waits[0], waits


PAGED = '''import polars as pl

from fleet import Scraper
from fleet.demo import site_url


class Paged(Scraper):
    """Loads {pages} pages of the demo books site, one after another."""

    name = "{name}"
    schema = {{"page": pl.Int64, "title": pl.String}}
    key = ("page",)

    async def scrape(self, page, ctx):
        for p in range({pages}):
            await ctx.goto(page, site_url(f"/books?week={{ctx.week.isoformat()}}&src={name}&p={{p}}"))
            yield {{"page": p, "title": await page.title()}}
'''


def test_the_cap_holds_counted_by_the_demo_sites(fleet_env):
    """Six sources at a cap of two on one host: the demo sites, by their own log of the page loads they served,
    never had more than two sources loading pages at once, and had two (the cap is what limits them, and the
    count can see it). The per-domain bound (4) is above the cap, so the cap alone is measured."""
    from fleet.demo.sites import DemoSites

    d = fleet_env.tmp / "paged"
    d.mkdir()
    names = [f"paged_{i}" for i in range(6)]
    for n in names:
        (d / f"{n}.py").write_text(PAGED.format(name=n, pages=8))  # 3.2 s of loads each
    with DemoSites(latency_ms=400) as sites:
        env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d), "FLEET_MAX_PARALLEL": "2", "FLEET_DEMO_URL": sites.url}
        res = run_fleet(env, "run", "--week", WEEK, "--force")
        assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
        loads = [r for r in sites.requests if r[0] == "/books"]
        assert len(loads) == 6 * 8, loads
        assert sites.peak_concurrency("/books") == 2, sorted((s, e) for _, s, e in loads)


def test_the_demo_sites_count_requests_served_at_once():
    from fleet.demo.sites import DemoSites

    sites = DemoSites(latency_ms=0)  # its log alone; not started
    sites.requests += [("/books", 0.0, 2.0), ("/books", 1.0, 3.0), ("/books", 2.0, 4.0), ("/favicon.ico", 1.5, 1.6)]
    assert sites.peak_concurrency("/books") == 2  # one ending as another starts does not overlap it
    assert sites.peak_concurrency() == 3
    assert sites.peak_concurrency("/books", since=2) == 1
    assert sites.peak_concurrency("/jobs") == 0
