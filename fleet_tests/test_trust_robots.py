"""Polite by the book (issue 45, item 3), through real attempt processes, Chromium and the demo sites: robots.txt
fetched once per site per week and obeyed (a disallowed URL is not requested; the source fails as blocked, naming
the rule), its Crawl-delay the domain's least interval, a scraper that does not obey it only with a reason; a domain
that answers 429 gets half its concurrency for the rest of the week and the next; the per-domain summary in the
source's outcome and `fleet status`."""
import asyncio
import json
import textwrap

import pytest

from fleet.demo.sites import DemoSites
from fleet.scraping import backoff
from fleet.scraping.discovery import discover
from fleet_tests.conftest import WEEK, run_fleet
from fleet_tests.test_runner import run

BODY = """
import polars as pl
from fleet import Scraper
from fleet.demo import site_url


class {cls}(Scraper):
    name = "{name}"
    schema = {{"id": pl.Int64}}
    key = ("id",)
    timeout_s = 60
    {extra}

    async def scrape(self, page, ctx):
        for i in range({pages}):
            await ctx.goto(page, site_url(f"/books?week={{ctx.week.isoformat()}}&n={{i}}"))
            yield {{"id": i}}
"""


def _source(tmp_path, name, pages=2, extra=""):
    d = tmp_path / "scrapers"
    d.mkdir(exist_ok=True)
    cls = "".join(p.title() for p in name.split("_"))
    (d / f"{name}.py").write_text(BODY.format(cls=cls, name=name, pages=pages, extra=extra))
    return {s.name: s for s in discover([d])}[name]


@pytest.fixture
def sites(tmp_path, monkeypatch):
    state = tmp_path / "demo-state"
    state.mkdir()
    with DemoSites(latency_ms=0, state_dir=state) as s:
        monkeypatch.setenv("FLEET_DEMO_URL", s.url)
        s.robots_file = state / "robots.txt"
        yield s


def _paths(sites, path):
    return [p for p, _, _ in sites.requests if p == path]


def test_a_disallowed_url_is_not_requested_and_the_source_fails_as_blocked_naming_the_rule(scrape_home, tmp_path,
                                                                                           sites):
    sites.robots_file.write_text("User-agent: *\nDisallow: /books\n\nUser-agent: otherbot\nDisallow: /\n")
    out, _ = run(scrape_home, _source(tmp_path, "robots_no"))
    assert (out.status, out.category) == ("failed", "blocked"), out
    assert "blocked: Disallow: /books (User-agent: *) in http://127.0.0.1:" in out.error, out.error
    assert "/robots.txt forbids http://127.0.0.1:" in out.error, out.error
    assert _paths(sites, "/books") == [] and len(_paths(sites, "/robots.txt")) == 1
    # fetched once per site per week: a second source of the week asks no more
    out2, _ = run(scrape_home, _source(tmp_path, "robots_no_again"))
    assert out2.category == "blocked" and len(_paths(sites, "/robots.txt")) == 1
    kept = list((scrape_home / "politeness" / "robots" / WEEK).glob("*.json"))
    assert len(kept) == 1 and "Disallow: /books" in json.loads(kept[0].read_text())["text"]

    # a scraper may not obey it, with a reason, which its outcome and metadata carry; without one it is broken
    ok, _ = run(scrape_home, _source(tmp_path, "robots_waived", extra='obey_robots = False\n    '
                                     'obey_robots_reason = "the site owner allows us (ticket 12)"'))
    assert ok.status == "ok" and len(_paths(sites, "/books")) == 2, ok
    assert ok.domains["127.0.0.1"]["robots"] == "not obeyed: the site owner allows us (ticket 12)"
    broken = _source(tmp_path, "robots_bare", extra="obey_robots = False")
    assert broken.broken and "obey_robots must be True, or False with a reason" in broken.error


def test_crawl_delay_is_the_domains_least_interval(scrape_home, tmp_path, sites):
    sites.robots_file.write_text("User-agent: *\nCrawl-delay: 0.6\nAllow: /\n")
    out, _ = run(scrape_home, _source(tmp_path, "robots_slow", pages=4))
    assert out.status == "ok" and out.rows == 4, out
    starts = sorted(s for p, s, _ in sites.requests if p == "/books")
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert len(starts) == 4 and min(gaps) >= 0.45, gaps  # unspaced they come within ms of each other
    d = out.domains["127.0.0.1"]
    assert d["crawl_delay_s"] == 0.6 and d["interval_s"] == 0.6 and d["requests"] == 4 and d["robots"] == "obeyed"


def test_429s_halve_the_domains_concurrency_this_week_and_next_then_clean_weeks_restore_it(scrape_home, tmp_path,
                                                                                          sites):
    sites.set_mode("books", "rate_limited")  # every other request is a 429 with Retry-After: 1
    out, _ = run(scrape_home, _source(tmp_path, "robots_429", pages=2))
    assert out.status == "ok", out
    d = out.domains["127.0.0.1"]
    assert d["http_429"] >= 1 and d["retry_after_waits"] >= 1 and d["retry_after_s"] >= 1, d
    assert d["concurrency"] == 2 and d["backoff_level"] == 1, d  # FLEET_DOMAIN_CONCURRENCY 4, halved after the 429
    weeks = asyncio.run(backoff.Backoff(scrape_home / "politeness" / "backoff", WEEK).weeks("127.0.0.1"))
    assert weeks == {WEEK: {"429": True}}
    # the levels that history gives the following weeks: halved next week, whole after a clean one
    assert backoff.start_level(weeks, "2026-11-23") == 1
    weeks["2026-11-23"] = {"429": False}
    assert backoff.start_level(weeks, "2026-11-30") == 0
    twice = {"2026-11-16": {"429": True}, "2026-11-23": {"429": True}, "2026-11-30": {"429": False}}
    assert [backoff.start_level(twice, w) for w in ("2026-11-23", "2026-11-30", "2026-12-07")] == [1, 2, 1]
    assert [backoff.concurrency(4, n) for n in (0, 1, 2, 3)] == [4, 2, 1, 1]


def test_a_demo_week_obeys_robots_and_fleet_status_shows_each_domain(fleet_env):
    """`fleet demo` with the demo sites' default robots.txt (which allows what the demo scrapers visit), then the
    per-domain summary in `fleet status`."""
    env = {**fleet_env.env, "FLEET_DEMO_STATE_DIR": str(fleet_env.tmp / "state")}
    (fleet_env.tmp / "state").mkdir()
    (fleet_env.tmp / "state" / "robots.txt").write_text("User-agent: *\nCrawl-delay: 0.2\nDisallow: /_control\n")
    res = run_fleet(env, "demo", "--week", WEEK, "--force", "--source", "books", "--source", "catalog")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    status = run_fleet(env, "status", "--week", WEEK)
    assert status.returncode == 0, status.stderr
    line = [ln for ln in status.stdout.splitlines() if ln.strip().startswith("127.0.0.1")]
    assert line and "requests 6," in line[0] and "429s 0" in line[0] and "interval 0.2s" in line[0] \
        and "robots.txt obeyed" in line[0], status.stdout
    assert len(list((fleet_env.home / "politeness" / "robots" / WEEK).glob("*.json"))) == 1


def test_how_robots_txt_is_read():
    """fleet's group before *'s, first matching rule (Allow before Disallow), fractional Crawl-delay, 401/403 disallow
    everything, other 4xx allow everything."""
    from fleet.scraping.robots import SiteRules

    text = "User-agent: fleet\nDisallow: /a\nCrawl-delay: 2\n\nUser-agent: *\nDisallow: /\nCrawl-delay: 0.5\n"
    r = SiteRules("http://x", {"status": 200, "text": text})
    assert (r.rule_for("http://x/a/b"), r.rule_for("http://x/b"), r.min_interval_s()) == \
        ("Disallow: /a (User-agent: fleet)", None, 2.0)
    r = SiteRules("http://x", {"status": 200, "text": "User-agent: *\nAllow: /books/ok\nDisallow: /books\n"
                                                      "Crawl-delay: 0.5\n"})
    assert r.rule_for("http://x/books/ok?x=1") is None and r.min_interval_s() == 0.5
    assert r.rule_for("http://x/books?week=1") == "Disallow: /books (User-agent: *)"
    assert "HTTP 403: everything is disallowed" in SiteRules("http://x", {"status": 403}).rule_for("http://x/")
    assert SiteRules("http://x", {"status": 404}).rule_for("http://x/anything") is None
