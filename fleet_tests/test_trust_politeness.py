"""Politeness per domain through real workers and Chromium: two sources that share a domain, running at once,
keep at most N navigations in flight and T seconds between their starts, as the demo server sees them; a
scraper's own declared limits bind the other sources of its domain; a bad setting is one line."""
import threading

import pytest

from fleet.demo.sites import DemoSites
from fleet.errors import FleetError
from fleet_tests.test_runner import run, scraper

GOTOS = """
        for i in range(4):
            await ctx.goto(page, site_url(f"/books?week={ctx.week.isoformat()}&n={i}"))
            yield {"id": i}
"""
IMPORT = "from fleet.demo import site_url\n"


def _two_at_once(home, tmp_path, monkeypatch, names, latency_ms=0):
    """Two sources of GOTOS scraping the demo sites at once; the server's (start, end) of each /books request."""
    with DemoSites(latency_ms=latency_ms) as sites:
        monkeypatch.setenv("FLEET_DEMO_URL", sites.url)
        sources = [scraper(tmp_path, n, GOTOS, module=IMPORT) for n in names]  # before: discovery reads the folder
        outs = {}
        threads = [threading.Thread(target=lambda s=s: outs.__setitem__(s.name, run(home, s)[0])) for s in sources]
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
