"""A Playwright trace per failed attempt (fleet/engine/evidence.py, attempt.py), through real parts: the newsroom demo
site, real Chromium in the engine's attempt process, the artifact store, `fleet debug` and Playwright's own trace
viewer serving the trace offline."""
import os
import re
import shlex
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

from fleet.demo.newsroom import SCRAPER, Newsroom
from fleet.engine import outcome
from fleet.engine.runner import EngineSettings, run_source
from fleet.scraping.discovery import discover
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import WEEK


def _news(tmp_path):
    folder = tmp_path / "scrapers"
    folder.mkdir(exist_ok=True)
    (folder / "news.py").write_text(SCRAPER)
    return {s.name: s for s in discover([folder])}["news"]


def _run(home, source, **kw):
    store = LocalArtifactStore(home / "artifacts")
    return run_source(source, WEEK, store=store, run_id="trace", settings=EngineSettings.from_env(), refresh=True,
                      **kw), store


def _viewer_serves(command: str, env: dict, shots: str | None = None) -> str:
    """Run the printed show-trace command as a server (no display here), fetch the viewer and the trace from it, and
    open the viewer in Chromium: it lists the scraper's failed call (kept as trace-viewer.png under ``shots``)."""
    proc = subprocess.Popen(shlex.split(command) + ["--host", "127.0.0.1", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        seen = ""
        while not (url := re.search(r"http://127\.0\.0\.1:\d+", seen)):
            line = proc.stdout.readline()
            assert line, f"show-trace ended without serving: {seen}"
            seen += line
        with urllib.request.urlopen(url.group(0) + "/", timeout=30) as page:  # redirected to the viewer's page
            html = page.read().decode()
            trace_query = page.url.split("trace=", 1)[1]
        with urllib.request.urlopen(page.url.split("/trace/index.html")[0] + "/trace/"
                                    + urllib.request.unquote(trace_query), timeout=30) as served:
            zip_bytes = served.read()
        _viewer_shows_the_failed_call(page.url, shots)
        return html, zip_bytes
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(10)


def _viewer_shows_the_failed_call(url: str, shots: str | None) -> None:
    from playwright.sync_api import sync_playwright

    from fleet.config import chromium_path

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path())
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url)
            # the actions list names the scraper's call that failed, with its locator
            failed = page.get_by_text(re.compile(r'locator\("li\.story \.headline"\)')).first
            failed.wait_for(timeout=30_000)
            failed.click()  # its call log, its error and the page's snapshot at that moment
            # the Call tab now shows that call: its locator and its 3 s timeout
            page.get_by_text('Wait for selector locator("li.story .headline")', exact=True).first.wait_for(timeout=30_000)
            if shots:
                Path(shots, "test_traces").mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(shots, "test_traces", "trace-viewer.png")))
        finally:
            browser.close()


def test_a_failed_attempt_keeps_a_trace_that_fleet_debug_opens_offline(scrape_home, tmp_path, monkeypatch, request):
    source = _news(tmp_path)
    with Newsroom(change_week=WEEK) as site:  # the headline moved to .title: the scraper's locator times out
        monkeypatch.setenv("FLEET_DEMO_URL", site.url)
        out, store = _run(scrape_home, source)
        assert (out.status, out.category) == ("failed", "source"), out
        trace = out.evidence.get("trace")
        assert trace and trace.endswith("/evidence/news/trace.zip"), out.evidence
        with zipfile.ZipFile(trace) as z:
            names = z.namelist()
            assert "trace.trace" in names and "trace.network" in names, names
            network = z.read("trace.network").decode()
            actions = z.read("trace.trace").decode()
        assert f"{site.url}/news?week={WEEK}" in network  # the page's request, with its response
        assert "waitForSelector" in actions and "li.story .headline" in actions  # the call that failed, its locator
        assert keys.read_outcome(store, WEEK, "news")["evidence"]["trace"] == trace  # beside the other evidence
        assert {"error.txt", "page.html", "screenshot.png", "trace.zip"} <= {
            p.name for p in store.local_dir(WEEK, keys.evidence_key("news")).iterdir()}

        env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}  # print, not open
        env["FLEET_START_WEEK"] = "2026-01-05"
        debug = subprocess.run([sys.executable, "-m", "fleet.cli", "debug", "news", "--week", WEEK], env=env,
                               capture_output=True, text=True, timeout=120)
        assert debug.returncode == 0, debug.stdout + debug.stderr
        (command,) = [line.strip() for line in debug.stdout.splitlines() if "show-trace" in line]
        assert command.endswith(shlex.quote(trace)), debug.stdout
        html, served = _viewer_serves(command, env, request.config.getoption("--ui-screenshots"))
        assert "Playwright Trace Viewer" in html
        assert served == open(trace, "rb").read()

        # healthy: no trace is kept; one waits for the quality gate (judge_trace) and is kept only if it holds out
        site.change_week = None
        out, store = _run(scrape_home, source, judge_trace=True)
        assert out.status == "ok" and "trace" not in out.evidence, out
        assert not (store.local_dir(WEEK, keys.evidence_key("news")) / "trace.zip").exists()
        pending = store.local_dir(WEEK, keys.spool_key("news")) / f"trace-{out.attempt}.zip"
        assert zipfile.is_zipfile(pending)
        outcome.settle_trace(store, WEEK, out, held=True)
        kept = keys.read_outcome(store, WEEK, "news")["evidence"]["trace"]
        assert zipfile.is_zipfile(kept) and not pending.exists()

        out, store = _run(scrape_home, source, judge_trace=True)
        pending = store.local_dir(WEEK, keys.spool_key("news")) / f"trace-{out.attempt}.zip"
        outcome.settle_trace(store, WEEK, out, held=False)
        assert out.status == "ok" and not pending.exists() and "trace" not in out.evidence
        nothing = subprocess.run([sys.executable, "-m", "fleet.cli", "debug", "news", "--week", WEEK], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert nothing.returncode == 1 and "no evidence and no trace kept" in nothing.stdout, \
            nothing.stdout + nothing.stderr

        # a trace that cannot be written (a folder in its place) never fails the attempt
        monkeypatch.setenv("FLEET_TRACE", "always")
        (store.local_dir(WEEK, keys.evidence_key("news")) / "trace.zip").mkdir(parents=True)
        (store.local_dir(WEEK, keys.evidence_key("news")) / "trace.zip" / "x").write_text("in the way")
        out, store = _run(scrape_home, source)
        assert out.status == "ok" and out.rows > 0 and "trace" not in out.evidence, out


def test_rows_the_quality_gate_holds_out_keep_their_trace(fleet_env):
    """A real `fleet run`: the source yields 1 row against a usual 100 (two stored weeks of history), so the gate
    holds its rows out of the commit; its attempt's trace, written for the gate, is kept as its evidence."""
    import polars as pl

    from fleet.quality import checks as qc
    from fleet_tests.conftest import run_fleet

    folder = fleet_env.tmp / "scrapers"
    folder.mkdir()
    (folder / "few.py").write_text(
        "import polars as pl\nfrom fleet import Scraper\n\n\nclass Few(Scraper):\n    name = 'few'\n"
        "    schema = {'id': pl.Int64}\n    key = ('id',)\n    timeout_s = 30\n\n"
        "    async def scrape(self, page, ctx):\n        await page.set_content('<p>one row left</p>')\n"
        "        yield {'id': 1}\n")
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    for week in ("2026-11-02", "2026-11-09"):
        frame = pl.DataFrame({"id": list(range(100))})
        keys.write_outcome(store, week, {"source": "few", "week": week, "status": "ok", "category": None,
                                         "rows": 100, "attempt": "20261101T000000000000-aaaaaa"})
        store.write_parquet(week, keys.raw_key("few", "20261101T000000000000-aaaaaa"), frame)
        qc.save_profile(store, week, "few", qc.profile(frame))
    env = {k: v for k, v in fleet_env.env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}  # print, not open
    env["FLEET_SCRAPERS_DIR"] = str(folder)
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 2 and "held" in res.stdout + res.stderr, res.stdout[-3000:] + res.stderr[-3000:]
    out = keys.read_outcome(store, WEEK, "few")
    assert out["status"] == "ok" and zipfile.is_zipfile(out["evidence"]["trace"]), out
    assert not list(store.local_dir(WEEK, keys.spool_key("few")).glob("trace-*.zip"))  # moved, not copied
    debug = run_fleet(env, "debug", "few", "--week", WEEK)
    assert debug.returncode == 0 and f"show-trace {out['evidence']['trace']}" in debug.stdout, debug.stdout
