"""Each worker's own Chromium, through real Chromium: launched with fleet's switches under its exit recorder, told
apart when closed on request or killed, and a browser that crashes under one source costs the others nothing."""
import asyncio
import os
import re
import threading
import time
from pathlib import Path

import polars as pl

from fleet.config import CHROMIUM_ARGS, chromium_path
from fleet.engine import attempt, pool
from fleet.scraping.discovery import discover
from fleet.engine.procs import alive, descendants, stat_fields
from fleet.engine.runner import EngineSettings, run_source
from fleet.storage.store import LocalArtifactStore, rows_key
from fleet_tests.conftest import ROOT, WEEK, Lines, writable_dir

SCRAPERS = ROOT / "fleet_tests" / "scrapers_browser"


def _browsers_under(pid: int) -> list[tuple[int, list[bytes]]]:
    """The browser processes (not renderers, nor the shells that run them) under ``pid``, with their argv."""
    chromium = {}
    for p in descendants(pid):
        try:
            argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"chrom" in argv[0]:  # Chromium may rewrite its title into argv[0]
            chromium[p] = argv
    # A helper (zygote, renderer, utility) says --type=. One the browser has just forked and not yet exec'd still
    # has the browser's own argv (CI saw one): its parent is a Chromium, a browser's is its exit recorder.
    return [(p, argv) for p, argv in chromium.items()
            if b"--type=" not in b" ".join(argv) and int((stat_fields(p) or ["", "0"])[1]) not in chromium]


def test_a_worker_launches_its_own_chromium_with_fleets_switches_and_knows_how_it_ended(tmp_path, monkeypatch):
    """open_browser: the configured Chromium, launched by Playwright's public API with fleet's switches; a browser
    closed on request (``browser.close()``) exited cleanly, one that was killed did not."""
    import tempfile
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)

    def this_browser(others):
        found = [(p, a) for p, a in _browsers_under(os.getpid()) if p not in others]
        assert len(found) == 1, [(p, a[:2]) for p, a in found]
        [(pid, argv)] = found
        return pid, argv

    def now():  # browsers already here: other tests' workers, or a closed one still exiting
        return {pid for pid, _ in _browsers_under(os.getpid())}

    async def closed_by_close():
        others = now()
        async with attempt.open_browser(chromium_path()) as own:
            pid, argv = this_browser(others)
            real = os.path.realpath(f"/proc/{pid}/exe")
            assert "chromium" in os.path.basename(real), real
            assert all(arg.encode() in argv for arg in CHROMIUM_ARGS), argv
            page = await (await own.browser.new_context()).new_page()
            await page.set_content("<p>x</p>")
            await own.browser.close()
            assert not own.is_connected()
            return await own.closed_on_request()

    async def closed_by_kill():
        others = now()
        async with attempt.open_browser(chromium_path()) as own:
            pid, _ = this_browser(others)
            os.kill(pid, 9)
            for _ in range(100):
                if not own.is_connected():
                    break
                await asyncio.sleep(0.05)
            assert not own.is_connected()
            return await own.closed_on_request()

    assert asyncio.run(closed_by_close()) is True
    assert asyncio.run(closed_by_kill()) is False
    assert not list(tmp_path.glob("fleet-browser-*"))  # the recorder's folder goes with its browser


def test_a_browser_killer_costs_the_other_sources_in_flight_nothing(scrape_home, tmp_path, monkeypatch):
    """kills_browser SIGKILLs its worker's Chromium while slow_1 and slow_2 are mid-scrape in warm workers of their
    own and `own` (own_browser) runs in a worker of its own: only kills_browser fails (infra, the browser crashed);
    the others complete with all their rows, and its worker is not reused."""
    counters = writable_dir(scrape_home)
    monkeypatch.setenv("FLEET_TEST_COUNTER_DIR", str(counters))
    settings = EngineSettings.from_env(scrape_home)
    store = LocalArtifactStore(scrape_home / "artifacts")
    sources = {s.name: s for s in discover([SCRAPERS])}
    log, outcomes = Lines(), {}

    def one(name):
        outcomes[name] = run_source(sources[name], WEEK, store=store, run_id="test", settings=settings, log=log)

    threads = [threading.Thread(target=one, args=(name,)) for name in ("kills_browser", "slow_1", "slow_2", "own")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert set(outcomes) == {"kills_browser", "slow_1", "slow_2", "own"}, str(log)[-3000:]
    killer = outcomes["kills_browser"]
    assert (killer.status, killer.category) == ("failed", "infra"), killer
    assert "the browser crashed" in killer.error, killer.error
    for name in ("slow_1", "slow_2", "own"):
        assert (outcomes[name].status, outcomes[name].rows) == ("ok", 8), outcomes[name]
        assert store.read_parquet(WEEK, rows_key(outcomes[name].to_json())).height == 8
    started = dict(re.findall(r"\[(\w+)\] attempt in process (\d+) \(", str(log)))
    assert len(set(started.values())) == 4, started  # a process each
    assert "(an attempt process of its own;" in next(line for line in log.lines if "[own] attempt in process" in line)
    [(worker_pid, chromium_pid)] = [tuple(map(int, line.split()))
                                    for line in (counters / "killed_chromium").read_text().splitlines()]
    assert worker_pid == int(started["kills_browser"])
    deadline = time.monotonic() + 15
    while alive(worker_pid) or alive(chromium_pid):  # its worker is not reused: it is gone, with its browser
        assert time.monotonic() < deadline, "the killer's worker is still alive"
        time.sleep(0.1)
    assert pool.stop(settings.hosts_dir) == 2  # the slow sources' warm workers, idle
