"""fleet's scrape slots (fleet/engine/slot.py): the cap on sources scraping at once, held around the scrape only, on
one host (lock files) and across hosts (the broker's Redis); a killed holder's slot comes free; a waiting step says
who it waits for, and `fleet status` lists who scrapes and who waits. The cap in a real `fleet run` is counted by
the demo sites in test_isolation.py; across hosts, here."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from fleet.engine import slot
from fleet_tests.conftest import ROOT, WEEK
from fleet_tests.services import Redis
from fleet_tests.test_isolation import PAGED  # a demo-books scraper of N pages

HOLD = '''
import sys, time
from fleet.engine import slot
slot.LEASE_S = 1.0  # a short lease, so the test need not wait out the real one
with slot.scrape_slot(1, sys.argv[1], sys.argv[2], "held_by_child", "run-child"):
    print("held", flush=True)
    time.sleep(600)
'''


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with Redis(tmp_path_factory.mktemp("redis")) as redis:
        yield redis.url


@pytest.mark.parametrize("where", ["files", "redis"])
def test_a_waiting_source_says_whom_it_waits_for_and_gets_the_slot_when_it_frees(tmp_path, redis_url, where):
    shared = redis_url if where == "redis" else ""
    if shared:
        import redis

        redis.Redis.from_url(shared).flushdb()
    root, said = tmp_path / "slots", []
    first_in, first_out, second = threading.Event(), threading.Event(), {}

    def hold():
        with slot.scrape_slot(1, root, shared, "first", "run-1"):
            first_in.set()
            first_out.wait(30)

    def wait():
        with slot.scrape_slot(1, root, shared, "second", "run-1", say=said.append) as waited:
            second["waited"] = waited

    a = threading.Thread(target=hold)
    a.start()
    assert first_in.wait(30)
    b = threading.Thread(target=wait)
    b.start()
    deadline = time.monotonic() + 30
    while not said or not slot.now(root, shared)[1]:
        assert time.monotonic() < deadline, said
        time.sleep(0.05)
    scraping, waiting = slot.now(root, shared)
    assert [r["source"] for r in scraping] == ["first"] and [r["source"] for r in waiting] == ["second"]
    assert said[0].startswith("waiting for a scrape slot: all 1 are scraping (first); 0 other source(s) waiting")
    assert "second" not in second
    time.sleep(0.3)
    first_out.set()
    a.join(30)
    b.join(30)
    assert second["waited"] >= 0.3
    assert slot.now(root, shared) == ([], [])


@pytest.mark.parametrize("where", ["files", "redis"])
def test_a_killed_holder_frees_its_slot(tmp_path, redis_url, where):
    """SIGKILL of the step holding a slot: the kernel drops its lock file's flock; in Redis its lease runs out
    (1 s here), as nothing renews it."""
    shared = redis_url if where == "redis" else ""
    if shared:
        import redis

        redis.Redis.from_url(shared).flushdb()
    root = tmp_path / "slots"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(root), shared], env=env, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        assert [r["source"] for r in slot.now(root, shared)[0]] == ["held_by_child"]
        time.sleep(2.5 if shared else 0)  # longer than its lease: the holder renews it while it lives
        assert [r["source"] for r in slot.now(root, shared)[0]] == ["held_by_child"]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    t = time.monotonic()
    with slot.scrape_slot(1, root, shared, "next", "run-2") as waited:
        assert waited < 3 and time.monotonic() - t < 3
        assert [r["source"] for r in slot.now(root, shared)[0]] == ["next"]


def test_fleet_status_lists_the_sources_scraping_and_waiting(tmp_path, monkeypatch):
    from fleet.defs.report import print_slots

    monkeypatch.setenv("FLEET_HOME", str(tmp_path))
    monkeypatch.setenv("FLEET_MAX_PARALLEL", "1")
    for k in ("FLEET_EXECUTOR", "FLEET_CELERY_BROKER"):
        monkeypatch.delenv(k, raising=False)
    lines, taken, leave = [], threading.Event(), threading.Event()

    def hold():
        with slot.scrape_slot(1, tmp_path / "slots", "", "books", "run-1"):
            taken.set()
            leave.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(30)
    def wait():
        with slot.scrape_slot(1, tmp_path / "slots", "", "jobs", "run-1"):
            pass

    waiter = threading.Thread(target=wait)
    try:
        waiter.start()
        deadline = time.monotonic() + 30
        while not slot.now(tmp_path / "slots", "")[1]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        print_slots(lines.append)
    finally:
        leave.set()
        holder.join(30)
        waiter.join(30)
    assert lines[0].startswith("scraping now: 1 of 1 (FLEET_MAX_PARALLEL): books (") and lines[1].startswith(
        "waiting for a scrape slot: 1: jobs ("), lines


HOST = '''
import json, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from fleet.config import chromium_path
from fleet.engine import pool
from fleet.engine.runner import run_source
from fleet.engine.settings import EngineSettings
from fleet.scraping.discovery import discover
from fleet.storage.store import LocalArtifactStore

home, scrapers, week, shared = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
ws = EngineSettings.under(home, chromium=chromium_path(), scrape_cap=2, slots_shared=shared)
store = LocalArtifactStore(home / "artifacts")
sources = discover([scrapers])
with ThreadPoolExecutor(len(sources)) as threads:
    outs = list(threads.map(lambda s: run_source(s, week, store=store, run_id="cross-host", settings=ws), sources))
pool.stop_idle(ws.hosts_dir)
print(json.dumps({o.source: o.status for o in outs}))
'''


def test_the_cap_holds_across_hosts_counted_by_the_demo_sites(tmp_path, redis_url):
    """Two hosts (their own FLEET_HOME, nothing local shared), two sources each, all four at once, a cap of two kept
    in one Redis: the demo sites never had more than two sources loading pages at once, and had two. Without the
    shared slots each host would have run both of its own."""
    import redis

    from fleet.demo.sites import DemoSites

    redis.Redis.from_url(redis_url).flushdb()
    with DemoSites(latency_ms=300) as sites:
        procs = []
        for host, names in (("a", ["paged_a0", "paged_a1"]), ("b", ["paged_b0", "paged_b1"])):
            home, scrapers = tmp_path / host, tmp_path / f"scrapers_{host}"
            home.mkdir()
            scrapers.mkdir()
            for n in names:
                (scrapers / f"{n}.py").write_text(PAGED.format(name=n, pages=6))
            env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "DAGSTER_HOME"}
            env.update(FLEET_HOME=str(home), FLEET_DEMO_URL=sites.url, PYTHONPATH=str(ROOT))
            procs.append(subprocess.Popen([sys.executable, "-c", HOST, str(home), str(scrapers), WEEK, redis_url],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        results = [p.communicate(timeout=300) for p in procs]
        for p, (out, err) in zip(procs, results):
            assert p.returncode == 0, err[-3000:]
            assert set(json.loads(out.strip().splitlines()[-1]).values()) == {"ok"}, out + err[-3000:]
        loads = [r for r in sites.requests if r[0] == "/books"]
        assert len(loads) == 4 * 6, loads
        assert sites.peak_concurrency("/books") == 2, sorted((s, e) for _, s, e in loads)


SLEEPY = '''import asyncio

import polars as pl

from fleet import Scraper


class Sleepy(Scraper):
    name = "{name}"
    schema = {{"id": pl.Int64}}
    key = ("id",)
    timeout_s = {timeout}

    async def scrape(self, page, ctx):
        await asyncio.sleep({sleep})
        yield {{"id": 1}}
'''


def test_a_sources_hard_limit_does_not_count_its_wait_for_a_slot(scrape_home, tmp_path):
    """A cap of one: a source with a 3 s limit waits ~5 s for the slot another source holds, then scrapes for 1 s,
    and is ok: its limit ran from its browser's start, after its slot."""
    from fleet.config import chromium_path
    from fleet.engine.runner import run_source
    from fleet.engine.settings import EngineSettings
    from fleet.scraping.discovery import discover
    from fleet.storage.store import LocalArtifactStore
    from fleet_tests.conftest import Lines

    d = tmp_path / "sleepy"
    d.mkdir()
    (d / "long_one.py").write_text(SLEEPY.format(name="long_one", timeout=60, sleep=5))
    (d / "short_one.py").write_text(SLEEPY.format(name="short_one", timeout=3, sleep=1))
    sources = {s.name: s for s in discover([d])}
    ws = EngineSettings.under(scrape_home, chromium=chromium_path(), scrape_cap=1)
    store, outs, log = LocalArtifactStore(scrape_home / "artifacts"), {}, Lines()

    def run(name, lines=None):
        outs[name] = run_source(sources[name], WEEK, store=store, run_id="t", settings=ws, log=lines)

    first = threading.Thread(target=run, args=("long_one",))
    first.start()
    deadline = time.monotonic() + 60
    while not slot.now(ws.slots_dir, "")[0]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run("short_one", log)
    first.join(120)
    assert outs["long_one"].status == "ok" and outs["short_one"].status == "ok", (outs, str(log))
    waited = [line for line in log.lines if "waited" in line and "for a scrape slot" in line]
    assert waited and float(waited[0].split("waited ")[1].split("s ")[0]) > 3, str(log)
    assert any("waiting for a scrape slot: all 1 are scraping (long_one)" in line for line in log.lines), str(log)


def test_status_never_takes_a_waiter_being_registered_for_a_dead_one(tmp_path):
    """A waiting step's file is written under a draft name and renamed into place once locked: `fleet status`
    reads only ``*.wait`` files, so it never finds one unlocked mid-registration and removes it as a dead
    waiter's (which made the waiter invisible for the rest of its wait)."""
    waiting = tmp_path / "waiting"
    waiting.mkdir()
    draft = waiting / ".123.abcd.draft"
    draft.write_text("")
    dead = waiting / "456.ef01.wait"
    dead.write_text('{"source": "gone"}')
    assert slot.now(tmp_path, "") == ([], [])
    assert draft.exists() and not dead.exists()  # the dead waiter's file is cleared, the draft left alone
    with slot._waiting(tmp_path, {"source": "jobs", "pid": 789}):
        assert [r["source"] for r in slot.now(tmp_path, "")[1]] == ["jobs"]
    assert slot.now(tmp_path, "")[1] == []


@pytest.mark.parametrize("where,refresh", [("files", False), ("redis", False), ("files", True)])
def test_two_executions_of_a_sources_week_at_once_scrape_it_once(scrape_home, tmp_path, redis_url, where, refresh):
    """The same source's week executed twice at once (a Celery message redelivered after a broker restart, a rerun
    of a step taken for gone that still scrapes): the second waits for the first, saying for whom, then reuses the
    rows it stored. The source is scraped once; both executions end ok with the same rows. A ``refresh`` request
    too: what the first stored while the second waited was scraped for it."""
    from fleet.config import chromium_path
    from fleet.engine.runner import run_source
    from fleet.engine.settings import EngineSettings
    from fleet.scraping.discovery import discover
    from fleet.storage.store import LocalArtifactStore
    from fleet_tests.conftest import Lines

    shared = redis_url if where == "redis" else ""
    if shared:
        import redis

        redis.Redis.from_url(shared).flushdb()
    d = tmp_path / "sleepy"
    d.mkdir()
    (d / "twice.py").write_text(SLEEPY.format(name="twice", timeout=60, sleep=3))
    source = discover([d])[0]
    ws = EngineSettings.under(scrape_home, chromium=chromium_path(), scrape_cap=2, slots_shared=shared)
    store, outs, logs = LocalArtifactStore(scrape_home / "artifacts"), {}, {"a": Lines(), "b": Lines()}

    def run(run_id):
        outs[run_id] = run_source(source, WEEK, store=store, run_id=run_id, settings=ws, log=logs[run_id],
                                  refresh=refresh)

    first = threading.Thread(target=run, args=("a",))
    first.start()
    deadline = time.monotonic() + 60
    while not any(" attempt in process " in ln for ln in logs["a"].lines):  # a is scraping
        assert time.monotonic() < deadline, str(logs["a"])
        time.sleep(0.05)
    run("b")
    first.join(120)
    assert outs["a"].status == outs["b"].status == "ok", outs
    assert not outs["a"].reused and outs["b"].reused, outs
    assert outs["a"].rows == outs["b"].rows == 1
    assert not any(" attempt in process " in ln for ln in logs["b"].lines), str(logs["b"])
    said = [ln for ln in logs["b"].lines if "another execution of twice for week" in ln]
    assert said and "run a" in said[0] and "waiting for it to end" in said[0], str(logs["b"])
    assert not list((ws.slots_dir / "sources").glob("*")), "a week's lease left its file behind"
    if refresh:  # a later refresh, with nobody to wait for, scrapes again
        assert not run_source(source, WEEK, store=store, run_id="c", settings=ws, refresh=True).reused


def test_an_unreachable_shared_redis_fails_the_source_as_infra_naming_it(scrape_home, tmp_path, monkeypatch):
    """The Redis that holds the leases and slots for every host does not answer: after DOWN_S the source fails as
    infra (re-executed within the crash budget), its error naming the Redis, never scraped without the bounds."""
    from fleet.config import chromium_path
    from fleet.engine.runner import run_source
    from fleet.engine.settings import EngineSettings
    from fleet.scraping.discovery import discover
    from fleet.storage.store import LocalArtifactStore
    from fleet_tests.services import free_port

    monkeypatch.setattr(slot, "DOWN_S", 0.5)
    d = tmp_path / "sleepy"
    d.mkdir()
    (d / "unbound.py").write_text(SLEEPY.format(name="unbound", timeout=60, sleep=0))
    shared = f"redis://127.0.0.1:{free_port()}/0"
    ws = EngineSettings.under(scrape_home, chromium=chromium_path(), scrape_cap=2, slots_shared=shared)
    out = run_source(discover([d])[0], WEEK, store=LocalArtifactStore(scrape_home / "artifacts"), run_id="t",
                     settings=ws)
    assert (out.status, out.category) == ("failed", "infra"), out
    assert f"127.0.0.1:{shared.split(':')[2]}" in out.error and "could not be reached" in out.error, out.error
