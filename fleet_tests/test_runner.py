"""One source attempt through the runner and a real attempt process (fleet/engine/runner.py, attempt.py), in real Chromium:
what an attempt's outcome says when the scraper times out on its own, closes its own page, hangs at import or
blocks its event loop, how attempts of one week merge, and what a failed re-scrape leaves for consolidation."""
import os
import textwrap
import time

import polars as pl
import pytest

from fleet.scraping.discovery import discover
from fleet.engine.runner import EngineSettings, run_source
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet.transform import layout
from fleet_tests.conftest import WEEK, Lines, writable_dir

HEADER = "import asyncio, os, time\nimport polars as pl\nfrom fleet import Scraper\n"


@pytest.fixture
def home(scrape_home):
    return scrape_home


def scraper(tmp_path, name: str, scrape: str, *, timeout_s: float = 30, schema: str = '{"id": pl.Int64}',
            module: str = ""):
    """A one-source scraper module ``name`` whose ``scrape`` body is ``scrape``; its discovered Source."""
    d = tmp_path / "scrapers"
    d.mkdir(exist_ok=True)
    cls = "".join(p.title() for p in name.split("_"))
    (d / f"{name}.py").write_text(HEADER + textwrap.dedent(module) + textwrap.dedent(f"""
        class {cls}(Scraper):
            name = "{name}"
            schema = {schema}
            key = ("id",)
            timeout_s = {timeout_s}

            async def scrape(self, page, ctx):
        """) + textwrap.indent(textwrap.dedent(scrape), " " * 8))
    return {s.name: s for s in discover([d])}[name]


def run(home, source, *, refresh=False, log=None, settings=None):
    store = LocalArtifactStore(home / "artifacts")
    return run_source(source, WEEK, store=store, run_id="test", settings=settings or EngineSettings.from_env(),
                      refresh=refresh, log=log), store


def test_a_scrapers_own_timeout_is_its_error_not_fleets_deadline(home, tmp_path):
    """asyncio.TimeoutError is the builtin TimeoutError: the scraper's own expired wait_for is a scraper error
    (failed, source, its traceback), not fleet's soft deadline (timeout/partial, "its worker was killed")."""
    src = scraper(tmp_path, "own_timeout", """
        for i in range(3):
            yield {"id": i}
        await asyncio.wait_for(asyncio.sleep(10), 0.2)
        yield {"id": 99}
    """, timeout_s=60)
    out, store = run(home, src)
    assert (out.status, out.category) == ("failed", "source"), out
    assert "TimeoutError" in out.error and "killed" not in out.error and "timed out after" not in out.error, out.error
    trace = (store.path(WEEK, keys.evidence_key("own_timeout")) / "error.txt").read_text()
    assert "wait_for" in trace and "own_timeout.py" in trace, trace


def test_fleets_soft_deadline_stops_an_async_hang_and_keeps_its_rows(home, tmp_path):
    src = scraper(tmp_path, "async_hang", """
        yield {"id": 1}
        await asyncio.sleep(600)
    """, timeout_s=4)
    out, store = run(home, src)
    assert (out.status, out.category, out.rows) == ("partial", "source", 1), out
    assert "soft deadline" in out.error and "killed" not in out.error, out.error  # it stopped itself in time
    assert out.seconds < 4 + 1, out


def test_a_scraper_that_closes_its_own_page_is_a_source_error_not_a_browser_crash(home, tmp_path):
    """It gets Playwright's "Target page, context or browser has been closed", as a crash would; its browser is
    still connected, so it is the scraper's bug: failed, source, and never re-executed as infra."""
    src = scraper(tmp_path, "closes_page", """
        await page.set_content("<p>x</p>")
        await page.close()
        await page.set_content("<p>y</p>")
        yield {"id": 1}
    """)
    out, _ = run(home, src)
    assert (out.status, out.category) == ("failed", "source"), out
    assert "TargetClosedError" in out.error and "the browser crashed" not in out.error, out.error


def test_a_browser_that_dies_mid_scrape_is_infra(home, tmp_path):
    """The scraper SIGKILLs its own worker's Chromium and then uses its page: the same error text as above, but the
    browser disconnected, so it is infra (re-executed). (Other sources in flight meanwhile: test_browser.)"""
    src = scraper(tmp_path, "kills_chromium", """
        from fleet.engine.procs import descendants
        await page.set_content("<p>x</p>")
        for pid in descendants(os.getpid()):
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
            if b"chrom" in cmd and b"--type=" not in cmd:
                os.kill(pid, 9)
        await page.set_content("<p>y</p>")
        yield {"id": 1}
    """)
    out, _ = run(home, src)
    assert (out.status, out.category) == ("failed", "infra"), out
    assert "the browser crashed" in out.error, out.error


def test_a_browser_dead_before_the_context_opens_is_infra(tmp_path, monkeypatch, request):
    """A warm worker's browser dies between two sources: the next source cannot get a context. No scraper code
    ran; that is infra, whatever the error's text (it was classified source)."""
    import asyncio
    import shutil
    import tempfile

    from fleet.config import chromium_path
    from fleet.engine import attempt
    from fleet.engine.procs import descendants

    src = scraper(tmp_path, "never_runs", 'yield {"id": 1}')
    work = tmp_path / "work"
    work.mkdir()
    spec = {"source": src.name, "module_path": str(src.module_path), "class_name": src.class_name, "week": WEEK,
            "run_id": "test", "deep": False, "timeout_s": 10, "work_dir": str(work),
            "evidence_dir": str(tmp_path / "evidence"), "spool_path": str(work / "rows.jsonl"),
            "ready_path": str(work / "ready"), "result_path": str(work / "result.json")}

    # The browser killed here leaves its profile in the driver's TMPDIR (fleet's own workers use procs.private_tmp)
    short = tempfile.mkdtemp(prefix="fleet-test-")
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    monkeypatch.setenv("TMPDIR", short)

    async def go():
        async with attempt.open_browser(chromium_path()) as b:
            for pid in descendants(os.getpid()):
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read()
                if b"chrom" in cmd and b"--type=" not in cmd:
                    os.kill(pid, 9)
            for _ in range(100):
                if not b.is_connected():
                    break
                await asyncio.sleep(0.05)
            try:
                return await attempt.scrape(b, spec)
            except Exception as exc:  # what server._serve_one does with an exception out of scrape
                return attempt.failure_result(spec, exc)

    result = asyncio.run(go())
    assert (result["status"], result["category"]) == ("failed", "infra"), result
    assert not (work / "ready").exists()  # the scraper's clock never started


HANGS_IN_WORKER = """
import sys
# not in discovery (its own process as root, fleet/scraping/sandboxed.py; else this test's process): in the worker
if not sys.argv[0].endswith("discovery.py") and os.getpid() != int(os.environ["FLEET_TEST_PID"]):
    {what}
"""


@pytest.mark.parametrize("what, status", [("time.sleep(3600)", "timeout"), ("raise RuntimeError('no config')", "failed")])
def test_a_module_that_hangs_or_raises_at_import_fails_as_its_source_within_its_limit(home, tmp_path, monkeypatch,
                                                                                      what, status):
    """The warm worker imports the module afresh for the source. That import is the source's code: it counts
    against timeout_s (not the browser's start-up limit), and fails as source, naming the module."""
    monkeypatch.setenv("FLEET_TEST_PID", str(os.getpid()))
    monkeypatch.setenv("FLEET_BROWSER_STARTUP_S", "20")  # the browser's limit, so the old behaviour shows in 20 s
    src = scraper(tmp_path, "bad_import", 'yield {"id": 1}', timeout_s=3, module=HANGS_IN_WORKER.format(what=what))
    out, store = run(home, src)
    assert (out.status, out.category) == (status, "source"), out
    assert str(src.module_path) in out.error and "did not" in out.error and "import" in out.error, out.error
    assert out.seconds < 3 + 2, out
    if status == "failed":
        assert "RuntimeError: no config" in out.error
        assert "no config" in (store.path(WEEK, keys.evidence_key("bad_import")) / "error.txt").read_text()


def test_a_scraper_killed_at_its_limit_leaves_its_url_and_stack_and_no_stale_evidence(home, tmp_path, monkeypatch):
    """Attempt 1 fails with a screenshot and the page HTML. Attempt 2 loads a demo page and blocks its event loop
    (time.sleep), so it is killed at its hard limit and cannot capture anything: the evidence directory then holds
    only attempt 2's error.txt (its URL, the worker's Python stack at the kill), not attempt 1's screenshot."""
    from fleet.demo import DemoSites

    src = scraper(tmp_path, "blocks", """
        if not ctx.checkpoint.get("failed"):
            ctx.checkpoint["failed"] = True
            ctx.save_checkpoint()
            await page.set_content("<h1>first attempt</h1>")
            raise ValueError("first attempt's bug")
        await ctx.goto(page, os.environ["FLEET_DEMO_URL"] + "/books")
        time.sleep(3600)  # blocks the event loop: only the hard limit stops it
        yield {"id": 1}
    """, timeout_s=3)
    evidence = home / "artifacts" / WEEK / "evidence" / "blocks"
    with DemoSites(port=0, latency_ms=0, state_dir=tmp_path / "demo") as sites:
        url = sites.url
        monkeypatch.setenv("FLEET_DEMO_URL", url)
        first, _ = run(home, src)
        assert (first.status, first.category) == ("failed", "source"), first
        assert (evidence / "screenshot.png").exists() and "first attempt" in (evidence / "page.html").read_text()
        second, _ = run(home, src)
    assert (second.status, second.category) == ("timeout", "source"), second
    assert "its attempt process and browser were killed" in second.error
    assert sorted(p.name for p in evidence.iterdir()) == ["error.txt", "stack.txt"]
    error = (evidence / "error.txt").read_text()
    assert f"last URL: {url}/books" in error, error
    assert "time.sleep(3600)" in error or ("blocks.py" in error and "in scrape" in error), error
    assert second.evidence["stack"] == str(evidence / "stack.txt")


def test_the_status_of_an_attempt_is_that_of_the_weeks_merged_rows(home, tmp_path):
    """Attempt 1 yields 2 rows and hangs (partial); attempt 2 finds the list empty. The stored artifact has the 2
    merged rows, so the week's status is ok with 2 rows, not empty (non_empty would fail on a stored 2 rows)."""
    src = scraper(tmp_path, "then_empty", """
        if not ctx.checkpoint.get("first"):
            ctx.checkpoint["first"] = True
            ctx.save_checkpoint()
            yield {"id": 1}
            yield {"id": 2}
            await asyncio.sleep(600)
        return
        yield
    """, timeout_s=3)
    first, store = run(home, src)
    assert (first.status, first.rows) == ("partial", 2), first
    second, _ = run(home, src)
    assert (second.status, second.rows) == ("ok", 2), second
    assert keys.read_outcome(store, WEEK, "then_empty")["status"] == "ok"
    assert store.read_parquet(WEEK, keys.raw_key("then_empty", second.attempt))["id"].to_list() == [1, 2]


def test_a_failed_refresh_keeps_the_weeks_good_rows_in_consolidation(home, tmp_path, monkeypatch):
    """The week was scraped (2 rows); `--refresh` scrapes it again and the source fails now. Its outcome is the
    failure, but its stored rows stay in the consolidated week (listed as kept), so the next raw commit keeps them."""
    from fleet.transform.consolidate import consolidate

    src = scraper(tmp_path, "flips", """
        if os.environ.get("FLIPS_FAIL"):
            raise RuntimeError("the site changed")
        yield {"id": 1}
        yield {"id": 2}
    """)
    good, store = run(home, src)
    assert (good.status, good.rows) == ("ok", 2), good
    monkeypatch.setenv("FLIPS_FAIL", "1")
    failed, _ = run(home, src, refresh=True)
    assert (failed.status, failed.category) == ("failed", "source"), failed
    assert keys.read_outcome(store, WEEK, "flips")["status"] == "failed"  # what fleet status reports

    summary = consolidate(store, WEEK, ["flips"])
    assert summary["included"] == {"flips": 2} and summary["missing"] == {}, summary
    assert summary["kept"]["flips"]["status"] == "failed" and "the site changed" in summary["kept"]["flips"]["error"]
    assert summary["kept"]["flips"]["rows_from_attempt"] == good.attempt
    rows = pl.read_parquet(store.path(WEEK, layout.store_key("raw", "flips")))
    assert rows["_fleet_source"].to_list() == ["flips", "flips"] and rows["id"].to_list() == [1, 2]
    # the week's checks count them as the consolidation does: the source is not missing from the week's data
    from fleet.quality.checks import week_checks
    missing = next(c for c in week_checks(store, WEEK, ["flips"]) if c["check"] == "missing")
    assert missing["passed"] and missing["message"] == "present: 2 rows", missing


def test_consolidation_fsyncs_its_file_before_renaming_it_into_place(tmp_path, monkeypatch):
    from fleet.transform import consolidate as cons

    store = LocalArtifactStore(tmp_path / "artifacts")
    store.write_parquet(WEEK, keys.raw_key("a", "1"), pl.DataFrame({"id": [1, 2]}))
    keys.write_outcome(store, WEEK, {"source": "a", "attempt": "1", "status": "ok", "rows": 2})
    calls = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append(("replace", str(a))) or replace(a, b))
    cons.consolidate(store, WEEK, ["a"])
    renamed = [c[1] for c in calls if c[0] == "replace" and "/consolidated/.a.parquet." in c[1]]
    assert len(renamed) == 1, calls
    assert calls.index(("fsync", renamed[0])) < calls.index(("replace", renamed[0])), calls


@pytest.mark.parametrize("config, says", [
    ({"timeout_s": 0}, "timeout_s (run config) must be a positive, finite number of seconds, got 0"),
    ({"timeout_s": -5}, "got -5"),
    ({"timeout_s": float("nan")}, "got nan"),
    ({"retry": {"attempts": 0}}, "attempts (retry_attempts) must be a whole number >= 1, got 0"),
])
def test_a_bad_run_config_fails_its_source_before_a_worker_is_taken(home, tmp_path, config, says):
    """The run's own settings (RawConfig, typed in the UI's launchpad): 0 used to mean "the scraper's own limit",
    -5 killed at once, NaN never; attempts=0 failed inside the attempt process. Each is the source's error now, and no
    worker starts."""
    src = scraper(tmp_path, "configured", "yield {'id': 1}\n")
    store = LocalArtifactStore(home / "artifacts")
    out = run_source(src, WEEK, store=store, run_id="test", settings=EngineSettings.from_env(), **config)
    assert (out.status, out.category) == ("failed", "source"), out
    assert says in out.error and "configured" in out.error
    assert keys.read_outcome(store, WEEK, "configured")["status"] == "failed"
    assert not (home / "browser-hosts").exists() or not list((home / "browser-hosts").rglob("*.pid"))


@pytest.mark.parametrize("workers", ["warm", "fresh"])
@pytest.mark.parametrize("how, says", [("import sys; sys.exit(0)", "SystemExit"),
                                       ("raise SystemExit('done')", "SystemExit(done)"),
                                       ("raise KeyboardInterrupt", "KeyboardInterrupt")])
def test_a_scraper_that_exits_fails_as_its_source_with_evidence(home, tmp_path, monkeypatch, workers, how, says):
    """sys.exit, SystemExit or KeyboardInterrupt inside scrape() used to escape asyncio and end the worker: the
    source failed as infra ("died without reporting"), was re-executed, and had no evidence."""
    monkeypatch.setenv("FLEET_BROWSER_HOSTS", workers)
    src = scraper(tmp_path, "exits", f"""
        await page.set_content("<h1>before the exit</h1>")
        yield {{"id": 1}}
        {how}
    """)
    out, store = run(home, src)
    assert out.category == "source" and out.status in ("failed", "partial"), out
    assert says in out.error and "must not exit its attempt process" in out.error, out.error
    evidence = store.path(WEEK, keys.evidence_key("exits"))
    assert (evidence / "error.txt").exists() and out.evidence.get("screenshot"), out.evidence
    assert "before the exit" in (evidence / "page.html").read_text()


def test_a_scraper_that_floods_its_output_keeps_its_time_and_the_rest_of_its_output_goes_to_a_file(home, tmp_path):
    """Every output line used to become an event in the run's log, one after another while the worker waited on
    its pipe: 40,000 lines took a source with a 20 s limit past it (killed at 33 s), and a 3 MB line was stored
    whole."""
    from fleet.engine.supervise import MAX_LINE_CHARS, MAX_LOG_LINES

    src = scraper(tmp_path, "floods", """
        import sys
        print("x" * 3_000_000)
        for i in range(40_000):
            print(f"debug {i}", file=sys.stderr)
        await page.set_content("<p>done</p>")
        yield {"id": 1}
    """, timeout_s=20)
    log = Lines()
    out, store = run(home, src, log=log)
    assert (out.status, out.rows) == ("ok", 1), out
    mine = [line for line in log.lines if "[floods]" in line]
    assert len(mine) <= MAX_LOG_LINES + 5, len(mine)
    assert all(len(line) < MAX_LINE_CHARS + 300 for line in mine)
    assert any("lines of output logged; the rest of this attempt's output goes to" in line for line in mine)
    output = next(store.workdir(WEEK, keys.spool_key("floods")).glob("output-*.log")).read_text()
    assert "x" * 3_000_000 in output and output.rstrip().endswith("debug 39999")


@pytest.mark.parametrize("workers", ["warm", "fresh"])
def test_a_process_a_scraper_leaves_running_is_killed_with_the_source_not_left_for_good(home, tmp_path, monkeypatch,
                                                                                        workers):
    """A scraper's child process used to outlive its worker and `fleet run`: a warm worker that finished cleanly was
    reused with it, and nothing killed it when the worker left."""
    from fleet.engine.procs import alive

    monkeypatch.setenv("FLEET_BROWSER_HOSTS", workers)
    plain = scraper(tmp_path, "plain", 'await page.set_content("<p>x</p>")\nyield {"id": 1}')
    log = Lines()
    out, _ = run(home, plain, log=log)
    assert out.status == "ok" and "left" not in str(log), str(log)  # nothing to report for a tidy source
    pid_file = writable_dir(home) / "child.pid"  # where the sandboxed scraper may write
    src = scraper(tmp_path, "spawner", f"""
        import subprocess
        child = subprocess.Popen(["sleep", "600"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        await page.set_content("<p>x</p>")
        yield {{"id": 1}}
    """)
    out, _ = run(home, src, log=log)
    assert out.status == "ok", out  # its rows are fine; only the process goes
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while alive(child):
        assert time.monotonic() < deadline, f"the scraper's child {child} is still running"
        time.sleep(0.1)
    said = [line for line in log.lines if str(child) in line]
    assert said and ("now killed" in said[0] or "killed" in said[0]), str(log)
    if workers == "warm":
        assert "will not be reused" in said[0]


def test_a_scraper_that_closes_the_browser_itself_fails_as_its_source_not_as_a_crash(home, tmp_path):
    """Closing the browser (page.context.browser.close()) is the scraper's bug: it used to be taken for a browser
    crash, infra, and re-executed up to the crash budget."""
    src = scraper(tmp_path, "closes_browser", """
        await page.set_content("<p>x</p>")
        yield {"id": 1}
        await page.context.browser.close()
        await page.title()
    """)
    out, _ = run(home, src)
    assert (out.status in ("failed", "partial"), out.category) == (True, "source"), out
    assert "the scraper closed the browser itself" in out.error, out.error
    # the worker it ran in is not reused (its browser is gone); the next source gets a working one
    again, _ = run(home, scraper(tmp_path, "after", 'await page.set_content("<p>y</p>")\nyield {"id": 2}'))
    assert again.status == "ok", again
