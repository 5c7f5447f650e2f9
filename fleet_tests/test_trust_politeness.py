"""Politeness per domain through real workers and Chromium: two sources that share a domain, running at once,
keep at most N navigations in flight and T seconds between their starts, as the demo server sees them; a
scraper's own declared limits bind the other sources of its domain; a bad setting is one line. Scaled out,
the bounds hold across hosts through the broker's Redis (Debian's redis-server), and a Redis that cannot be
reached bounds each host alone rather than failing its sources."""
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from fleet.demo.sites import DemoSites
from fleet.errors import FleetError
from fleet_tests.conftest import ROOT
from fleet_tests.services import Redis, free_port
from fleet_tests.test_runner import run, scraper

GOTOS = """
        for i in range(4):
            await ctx.goto(page, site_url(f"/books?week={ctx.week.isoformat()}&n={i}"))
            yield {"id": i}
"""
IMPORT = "from fleet.demo import site_url\n"


def _two_at_once(home, tmp_path, monkeypatch, names, latency_ms=0, lines=None):
    """Two sources of GOTOS scraping the demo sites at once; the server's (start, end) of each /books request.
    ``lines``: a list the attempts' log lines are added to."""
    log = SimpleNamespace(info=(lines if lines is not None else []).append)
    with DemoSites(latency_ms=latency_ms) as sites:
        monkeypatch.setenv("FLEET_DEMO_URL", sites.url)
        sources = [scraper(tmp_path, n, GOTOS, module=IMPORT) for n in names]  # before: discovery reads the folder
        outs = {}
        threads = [threading.Thread(target=lambda s=s: outs.__setitem__(s.name, run(home, s, log=log)[0]))
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
    assert len(starts) == 4 and min(b - a for a, b in zip(starts, starts[1:])) >= 0.45, starts


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
    spans = _two_at_once(scrape_home, tmp_path, monkeypatch, ("down_a", "down_b"), latency_ms=250, lines=lines)
    assert len(spans) == 8
    assert all(a_end <= b_start + 0.01 for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    said = [ln for ln in lines if "politeness: the shared bounds" in ln]
    assert len(said) == 2 and all("cannot be reached" in ln and "this host's requests alone" in ln for ln in said), said
