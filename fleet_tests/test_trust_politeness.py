"""Politeness per domain through real workers and Chromium: two sources that share a domain, running at once,
keep at most N navigations in flight and T seconds between their starts, as the demo server sees them; a
scraper's own declared limits bind the other sources of its domain; a bad setting is one line. Scaled out,
the bounds hold across hosts through the broker's Redis (Debian's redis-server), and a Redis that cannot be
reached bounds each host alone rather than failing its sources."""
import asyncio
import dataclasses
import datetime as dt
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from fleet.demo.sites import DemoSites
from fleet.errors import FleetError
from fleet.policy.status import domain_summary
from fleet.scraping.backoff import Backoff
from fleet.scraping.politeness import Politeness
from fleet.storage.store import LocalArtifactStore, write_outcome
from fleet_tests.conftest import ROOT, WEEK
from fleet_tests.services import Redis, free_port
from fleet_tests.test_runner import run, scraper

GOTOS = """
        for i in range(4):
            await ctx.goto(page, site_url(f"/books?week={ctx.week.isoformat()}&n={i}"))
            yield {"id": i}
"""
IMPORT = "from fleet.demo import site_url\n"


def _two_at_once(home, tmp_path, monkeypatch, names, latency_ms=0, lines=None, settings=None):
    """Two sources of GOTOS scraping the demo sites at once; the server's (start, end) of each /books request.
    ``lines``: a list the attempts' log lines are added to."""
    log = SimpleNamespace(info=(lines if lines is not None else []).append)
    with DemoSites(latency_ms=latency_ms) as sites:
        monkeypatch.setenv("FLEET_DEMO_URL", sites.url)
        sources = [scraper(tmp_path, n, GOTOS, module=IMPORT) for n in names]  # before: discovery reads the folder
        outs = {}
        threads = [threading.Thread(target=lambda s=s: outs.__setitem__(s.name, run(home, s, log=log,
                                                                                  settings=settings)[0]))
                   for s in sources]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(o.status == "ok" and o.rows == 4 for o in outs.values()) and len(outs) == 2, outs
        return sorted((start, end) for path, start, end in sites.requests if path == "/books")


def test_requests_to_one_domain_are_spaced_and_bounded_across_sources(scrape_home, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_DOMAIN_INTERVAL_S", "0.4")
    starts = [s for s, _ in _two_at_once(scrape_home, tmp_path, monkeypatch, ("polite_a", "polite_b"))]
    assert len(starts) == 8
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    # The client spaces the starts of its navigations by 0.4 s; the server sees them after the browser's own
    # delay, which varies under load by some tens of ms. Unspaced, the 8 would arrive within a few ms of each other.
    assert min(gaps) >= 0.2 and starts[-1] - starts[0] >= 7 * 0.4 - 0.1, gaps


def test_at_most_n_pages_in_flight_per_domain(scrape_home, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_DOMAIN_CONCURRENCY", "1")
    spans = _two_at_once(scrape_home, tmp_path, monkeypatch, ("single_a", "single_b"), latency_ms=250)
    assert len(spans) == 8
    assert all(a_end <= b_start + 0.01 for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans  # never overlapping


def test_a_scrapers_declared_limits_bind_the_others_on_its_domain(scrape_home, tmp_path, monkeypatch):
    with DemoSites(latency_ms=0) as sites:
        monkeypatch.setenv("FLEET_DEMO_URL", sites.url)
        strict = scraper(tmp_path, "strict", GOTOS, module=IMPORT)
        strict.module_path.write_text(strict.module_path.read_text().replace(
            '    key = ("id",)\n', '    key = ("id",)\n    polite_interval_s = 0.5\n'))
        loose = scraper(tmp_path, "loose", GOTOS, module=IMPORT)
        assert run(scrape_home, strict)[0].status == "ok"
        first = len(sites.requests)
        assert run(scrape_home, loose)[0].status == "ok"
        starts = sorted(s for p, s, _ in sites.requests[first:] if p == "/books")
    # the sites see each request a little after the scraper's page sent it (more so on a loaded machine): the
    # spacing is judged over the three gaps, each one allowed that lag. Unbound, the four come within ~0.1 s.
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert len(starts) == 4 and starts[-1] - starts[0] >= 1.25 and min(gaps) >= 0.25, gaps


def test_bad_politeness_settings_are_one_line(monkeypatch, scrape_home):
    from fleet import config

    monkeypatch.setenv("FLEET_DOMAIN_CONCURRENCY", "-1")
    with pytest.raises(FleetError, match=r"^FLEET_DOMAIN_CONCURRENCY must be at least 1, got -1$"):
        config.settings()
    monkeypatch.setenv("FLEET_DOMAIN_CONCURRENCY", "2")
    monkeypatch.setenv("FLEET_DOMAIN_INTERVAL_S", "soon")
    with pytest.raises(FleetError, match=r"^FLEET_DOMAIN_INTERVAL_S must be a number, got 'soon'$"):
        config.settings()


# One host's `fleet worker` scraping one source: its own FLEET_HOME, nothing local shared with the other host.
ONE_HOST = """
import sys
from pathlib import Path
from fleet.engine import pool
from fleet_tests.test_runner import run, scraper
from fleet_tests.test_trust_politeness import GOTOS, IMPORT
home = Path(sys.argv[1])
try:
    out, _ = run(home, scraper(home, sys.argv[2], GOTOS, module=IMPORT))
    print(out.status, out.rows, out.error)
finally:
    pool.stop(home / "browser-hosts")
"""


def test_the_bounds_hold_across_hosts_through_the_brokers_redis(tmp_path):
    with Redis(tmp_path / "redis") as redis, DemoSites(latency_ms=300) as sites:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "DAGSTER_HOME"}
        env.update(PYTHONPATH=str(ROOT), FLEET_DEMO_URL=sites.url, FLEET_EXECUTOR="celery",
                   FLEET_CELERY_BROKER=redis.url, FLEET_DOMAIN_CONCURRENCY="1", FLEET_DOMAIN_INTERVAL_S="0.1")
        procs = []
        for name in ("host_a", "host_b"):
            home = tmp_path / name
            home.mkdir()
            procs.append(subprocess.Popen([sys.executable, "-c", ONE_HOST, str(home), f"polite_{name}"],
                                          env={**env, "FLEET_HOME": str(home)}, cwd=home, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        outs = [p.communicate(timeout=300) for p in procs]
        assert all(p.returncode == 0 and o.startswith("ok 4") for p, (o, _) in zip(procs, outs)), outs
        spans = sorted((start, end) for path, start, end in sites.requests if path == "/books")
        # no local file is shared between the two homes: only Redis keeps them to one page at a time
        assert not (tmp_path / "host_a" / "politeness").exists() or not any(
            (tmp_path / "host_a" / "politeness").glob("*.slot*"))
    assert len(spans) == 8
    assert all(a_end <= b_start + 0.01 for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans


def test_an_unreachable_redis_bounds_each_host_alone_and_says_so_once(scrape_home, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_EXECUTOR", "celery")
    monkeypatch.setenv("FLEET_CELERY_BROKER", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setenv("FLEET_DOMAIN_CONCURRENCY", "1")
    lines = []
    # politeness's own fallback alone: the cap's slots refuse to fall back to one host (test_slot.py tries that)
    from fleet.engine.runner import EngineSettings
    local_cap = dataclasses.replace(EngineSettings.from_env(), slots_shared="")
    spans = _two_at_once(scrape_home, tmp_path, monkeypatch, ("down_a", "down_b"), latency_ms=250, lines=lines,
                         settings=local_cap)
    assert len(spans) == 8
    assert all(a_end <= b_start + 0.01 for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    said = [ln for ln in lines if "politeness: the shared bounds" in ln]
    assert len(said) == 2 and all("cannot be reached" in ln and "this host's requests alone" in ln for ln in said), said


async def _most_at_once(polite, url: str, tries: int = 4, hold_s: float = 0.3) -> int:
    """How many of ``tries`` requests to ``url``'s domain ``polite`` lets in at once (each held ``hold_s``)."""
    inside = peak = 0

    async def one():
        nonlocal inside, peak
        async with polite.request(url):
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(hold_s)
            inside -= 1
    await asyncio.gather(*(one() for _ in range(tries)))
    return peak


def _week(n: int) -> str:
    return (dt.date.fromisoformat(WEEK) + dt.timedelta(days=7 * n)).isoformat()


def test_a_429_one_host_saw_halves_every_hosts_concurrency_through_the_brokers_redis(tmp_path):
    """Two FLEET_HOMEs (two hosts) sharing one broker: a 429 host A's attempt was answered halves the concurrency
    host B applies to the domain, this week and the next; a clean week gives the step back. `fleet status`'s
    summary reads the same history. Neither home keeps a backoff file."""
    url = "http://books.example/list"
    homes = {name: tmp_path / name / "politeness" for name in ("host_a", "host_b")}

    async def scenario(shared: str) -> list:
        def polite(home, week):
            return Politeness(homes[home], 4, 0.0, source=home, shared=shared, week=week)
        seen = []
        a = polite("host_a", WEEK)
        await a.note(url, 200, None)
        await a.note(url, 429, 1.0)
        await a.note(url, 200, None)
        for week in (WEEK, _week(1)):
            b = polite("host_b", week)
            seen.append((await _most_at_once(b, url), b.summary()["books.example"].get("backoff_level", 0)))
            await b.note(url, 200, None)  # requests and no 429 on host B: week 0 keeps A's 429, week 1 is clean
            await b.close()
        b = polite("host_b", _week(2))
        seen.append((await _most_at_once(b, url), b.summary()["books.example"].get("backoff_level", 0)))
        await a.close()
        await b.close()
        return seen

    with Redis(tmp_path / "redis") as redis:
        seen = asyncio.run(scenario(redis.url))
        # host A's 429 in week 0: host B's concurrency 4 -> 2 for the rest of that week and the next; week 1 clean
        assert seen == [(2, 1), (2, 1), (4, 0)], seen

        def cli(*args):
            return subprocess.run(["redis-cli", "-p", str(redis.port), *args, "fleet:politeness:books.example:backoff"],
                                  capture_output=True, text=True, check=True).stdout.split()
        history = cli("HGETALL")
        assert dict(zip(history[::2], history[1::2])) == {WEEK: "1", _week(1): "0"}, history
        assert int(cli("TTL")[0]) > 20 * 7 * 24 * 3600  # kept many weeks, renewed by each week that reaches it
        store = LocalArtifactStore(tmp_path / "artifacts")
        write_outcome(store, WEEK, {"source": "books", "attempt": "1", "domains": {"books.example": {"requests": 3}}})
        # either host's `fleet status` for week 0 says next week is halved, from the shared history
        for home in homes.values():
            found = domain_summary(store, WEEK, ["books"], home, redis.url)
            assert found["books.example"]["next_week_halvings"] == 1, found
    assert not any((home / "backoff").exists() for home in homes.values())


def test_an_unreachable_redis_keeps_a_hosts_429s_in_its_own_files(tmp_path, caplog):
    """While the shared Redis cannot be reached, a host's 429s are kept and obeyed in its own files, as its bounds
    are, and the attempt says so once."""
    url = "http://books.example/list"

    async def scenario():
        p = Politeness(tmp_path / "politeness", 4, 0.0, source="down", shared=f"redis://127.0.0.1:{free_port()}/0",
                       week=WEEK)
        await p.note(url, 429, None)
        level = await p.backoff_level(url.split("/")[2])
        return level, await _most_at_once(p, url)

    assert asyncio.run(scenario()) == (1, 2)
    assert asyncio.run(Backoff(tmp_path / "politeness" / "backoff", WEEK).weeks("books.example")) == {
        WEEK: {"429": True}}
    said = [r.getMessage() for r in caplog.records if "politeness: the shared bounds" in r.getMessage()]
    assert len(said) == 1 and "cannot be reached" in said[0], said
