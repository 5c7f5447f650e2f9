"""Politeness on every request (issue 53, part 3), through real attempt processes, Chromium and the demo sites:
robots.txt, Crawl-delay and the domain's bounds hold for a click, a form, a script's fetch and Playwright's own
page.goto, not only for ctx.goto; a disallowed one is never sent and the source is blocked, naming the rule, even
when the scraper swallows its error; the demo scrapers' clicks are counted and spaced."""
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleet.demo.sites import DemoSites
from fleet.scraping.discovery import discover
from fleet_tests.conftest import ROOT
from fleet_tests.test_runner import run, scraper
from fleet_tests.test_trust_robots import _paths, sites  # noqa: F401  (the demo sites with a robots.txt of the test's)

IMPORT = "from fleet.demo import site_url\n"



def _starts(sites, *paths):
    return sorted(s for p, s, _ in sites.requests if p in paths)


def _demo(name):
    return {s.name: s for s in discover([ROOT / "scrapers"])}[name]


def test_a_form_submit_to_a_disallowed_path_is_never_sent_and_blocks_the_source(scrape_home, sites):
    sites.robots_file.write_text("User-agent: *\nDisallow: /parts/results\n")
    out, _ = run(scrape_home, _demo("parts"))
    assert (out.status, out.category) == ("failed", "blocked"), out
    assert "blocked: Disallow: /parts/results (User-agent: *) in http://127.0.0.1:" in out.error, out.error
    assert _paths(sites, "/parts") == ["/parts"] and _paths(sites, "/parts/results") == []


@pytest.mark.parametrize("how", ["page.goto", "a click", "a script's fetch"])
def test_a_disallowed_request_blocks_the_source_even_when_the_scraper_swallows_its_error(scrape_home, tmp_path,
                                                                                       sites, how):
    sites.robots_file.write_text("User-agent: *\nDisallow: /books\nDisallow: /api/\n")
    act = {"page.goto": 'await page.goto(site_url("/books?week=x"))',
           "a click": """await page.set_content(f'<a id="go" href="{site_url("/books?week=x")}">go</a>')
            await page.click("#go")
            await page.wait_for_timeout(500)""",
           "a script's fetch": """await page.evaluate("u => fetch(u)", site_url("/api/stocks?week=x"))"""}[how]
    src = scraper(tmp_path, "swallows", f"""
        await ctx.goto(page, site_url("/catalog?page=1"))  # allowed: its site is one the source scrapes
        try:
            {act}
        except Exception:
            pass
        yield {{"id": 1}}
    """, module=IMPORT)
    out, _ = run(scrape_home, src)
    assert (out.status, out.category) == ("failed", "blocked"), out
    rule = "/api/" if how == "a script's fetch" else "/books"
    assert f"blocked: Disallow: {rule} (User-agent: *)" in out.error, out.error
    assert _paths(sites, "/books") == [] and _paths(sites, "/api/stocks") == [] and _paths(sites, "/catalog")


def test_the_demo_scrapers_clicks_are_counted_and_spaced(scrape_home, sites):
    """jobs' "Load more" fetches and parts' form submits hold the site's Crawl-delay and are counted, as ctx.goto's
    navigations are. Unspaced, each follows the last within milliseconds (the demo site answers at once)."""
    sites.robots_file.write_text("User-agent: *\nCrawl-delay: 0.5\nAllow: /\n")
    jobs, _ = run(scrape_home, _demo("jobs"))
    assert jobs.status == "ok", jobs
    fetches = _paths(sites, "/api/jobs")
    assert len(fetches) >= 2, sites.requests
    starts = _starts(sites, "/jobs", "/api/jobs")
    assert min(b - a for a, b in zip(starts, starts[1:])) >= 0.35, starts
    assert jobs.domains["127.0.0.1"]["requests"] == 1 + len(fetches), jobs.domains

    first = len(sites.requests)
    parts, _ = run(scrape_home, _demo("parts"))
    assert parts.status == "ok", parts
    starts = sorted(s for p, s, _ in sites.requests[first:] if p in ("/parts", "/parts/results"))
    assert len(starts) == 4 and min(b - a for a, b in zip(starts, starts[1:])) >= 0.35, starts
    assert parts.domains["127.0.0.1"]["requests"] == 4, parts.domains


def test_at_most_n_requests_in_flight_counts_a_pages_own_fetches(scrape_home, sites, monkeypatch):
    """With one slot per domain, stocks' page and the fetch its script makes never overlap at the server (each
    answered after 300 ms); the page's fetch waits for the slot the document holds."""
    monkeypatch.setenv("FLEET_DOMAIN_CONCURRENCY", "1")
    sites.latency_s = 0.3
    out, _ = run(scrape_home, _demo("stocks"))
    assert out.status == "ok", out
    spans = sorted((s, e) for p, s, e in sites.requests if p in ("/stocks", "/api/stocks"))
    assert len(spans) == 2 and spans[0][1] <= spans[1][0] + 0.01, spans
    assert out.domains["127.0.0.1"]["requests"] == 2 and out.domains["127.0.0.1"]["concurrency"] == 1


class _Redirects(BaseHTTPRequestHandler):
    """/r redirects to /secret; robots.txt disallows /secret."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.seen.append(self.path)
        if self.path == "/robots.txt":
            body, status, extra = b"User-agent: *\nDisallow: /secret\n", 200, {}
        elif self.path == "/r":
            body, status, extra = b"", 302, {"Location": "/secret"}
        else:
            body, status, extra = b"<title>secret</title>", 200, {}
        self.send_response(status)
        for k, v in {"Content-Type": "text/html", "Content-Length": str(len(body)), **extra}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


def test_a_redirect_to_a_disallowed_path_blocks_the_source_and_says_it_was_sent(scrape_home, tmp_path, monkeypatch):
    """Playwright routes no redirect hop: the hop is checked as the browser sends it, and the source fails as
    blocked, naming the rule and saying so (polite_route.py)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Redirects)
    srv.seen = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("FLEET_DEMO_URL", f"http://127.0.0.1:{srv.server_address[1]}")
        out, _ = run(scrape_home, scraper(tmp_path, "redirected", """
            await ctx.goto(page, site_url("/r"))
            yield {"id": 1}
        """, module=IMPORT))
    finally:
        srv.shutdown()
    assert (out.status, out.category) == ("failed", "blocked"), out
    assert "blocked: Disallow: /secret (User-agent: *)" in out.error and "it was sent" in out.error, out.error
    assert srv.seen.count("/robots.txt") == 1 and srv.seen.count("/r") == 1


def test_ctx_goto_refuses_a_page_of_a_context_fleet_did_not_open(scrape_home, tmp_path, sites):
    out, _ = run(scrape_home, scraper(tmp_path, "own_context", """
        other = await page.context.browser.new_context()
        await ctx.goto(await other.new_page(), site_url("/books?week=x"))
        yield {"id": 1}
    """, module=IMPORT))
    assert (out.status, out.category) == ("failed", "source"), out
    assert "this page is not of the browser context fleet opened for the source" in out.error, out.error
    assert _paths(sites, "/books") == []


def test_a_third_partys_requests_pass_untouched(scrape_home, tmp_path, sites):
    """A fetch to a site the source's pages never navigated to is neither checked against its robots.txt (which
    here disallows everything) nor counted."""
    other_state = tmp_path / "other-state"
    other_state.mkdir()
    (other_state / "robots.txt").write_text("User-agent: *\nDisallow: /\n")
    with DemoSites(latency_ms=0, state_dir=other_state) as other:
        out, _ = run(scrape_home, scraper(tmp_path, "third_party", f"""
            await ctx.goto(page, site_url("/catalog?page=1"))
            await page.evaluate("u => fetch(u, {{mode: 'no-cors'}})", "{other.url}/api/stocks?week=x")
            yield {{"id": 1}}
        """, module=IMPORT))
        assert out.status == "ok", out
        assert _paths(other, "/api/stocks") == ["/api/stocks"] and _paths(other, "/robots.txt") == []
    assert out.domains["127.0.0.1"]["requests"] == 1, out.domains
