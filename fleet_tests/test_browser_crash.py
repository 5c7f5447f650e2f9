"""A Chromium process killed under a scrape, through real Chromium and the warm browser hosts: the browser itself,
the page's renderer, the zygote that starts renderers, or the network service, SIGKILLed while the source waits on
a slow page, makes the attempt ``infra`` (re-executed, and the re-execution completes), and its browser host is not
reused; a site that aborts its own navigation (the same ``net::ERR_ABORTED``) stays ``source``."""
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleet.engine.procs import alive, descendants, kill_pids, stat_fields
from fleet.engine.runner import EngineSettings, run_source
from fleet.scraping.discovery import discover
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import ROOT, WEEK, Lines

SCRAPERS = ROOT / "fleet_tests" / "scrapers_browser"


class SlowSite:
    """The test's site on 127.0.0.1 (reached as localhost too): ``/slow?i=1`` answers only once the test lets it,
    the other pages at once; ``/nocontent`` answers 204."""

    def __init__(self):
        self.waiting, self.release = threading.Event(), threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.startswith("/slow?i=1"):
                    site.waiting.set()
                    site.release.wait(120)
                body = b"" if self.path.startswith("/nocontent") else f"<p>{self.path}</p>".encode()
                self.send_response(204 if not body else 200 if self.path.startswith("/slow") else 404)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _chromium_of(host: int) -> dict[int, bytes]:
    """The Chromium processes under the browser host ``host``: pid -> command line (Chromium writes its
    switches into its title)."""
    found = {}
    for pid in descendants(host):
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"chrom" in line.split(b" ")[0]:
            found[pid] = line
    return found


def _parent(pid: int) -> int:
    return int((stat_fields(pid) or ["", "0"])[1])


def _victims(kind: str, chromium: dict[int, bytes]) -> list[int]:
    renderers = [p for p, line in chromium.items() if b"--type=renderer" in line]
    if kind == "renderer":  # the page's, and the one its navigation to the other site was to move into
        return renderers
    if kind == "zygote":  # the one renderers are started from
        return sorted({_parent(p) for p in renderers} & {p for p, line in chromium.items() if b"--type=zygote" in line})
    if kind == "unused zygote":  # the one no renderer comes from (it starts the GPU process, already up)
        return [p for p, line in chromium.items() if b"--type=zygote" in line and b"--no-zygote-sandbox" in line]
    if kind == "network service":
        return [p for p, line in chromium.items() if b"--utility-sub-type=network.mojom.NetworkService" in line]
    # the browser: the one without --type= whose parent is not a Chromium (a helper just forked has its argv)
    return [p for p, line in chromium.items() if b"--type=" not in line and _parent(p) not in chromium]


@pytest.fixture
def slow_site(monkeypatch):
    site = SlowSite()
    monkeypatch.setenv("FLEET_TEST_SLOW_SITE", site.url)
    yield site
    site.close()


def _run(name: str, scrape_home: Path, log: Lines, **kwargs):
    settings = EngineSettings.from_env(scrape_home)
    store = LocalArtifactStore(scrape_home / "artifacts")
    source = {s.name: s for s in discover([SCRAPERS])}[name]
    return run_source(source, WEEK, store=store, run_id="test", settings=settings, log=log, **kwargs)


def _host_of(log: Lines, name: str) -> int:
    return int(re.findall(rf"\[{name}\] attempt in process (\d+) \(", str(log))[-1])


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


@pytest.mark.parametrize("kind,says", [
    ("browser", "the browser crashed"),
    ("renderer", "the browser crashed"),
    ("zygote", "the browser lost its zygote (pid "),
    ("network service", "the browser lost its network service (pid "),
])
def test_a_chromium_process_killed_mid_scrape_is_infra_and_the_reexecution_completes(scrape_home, slow_site, kind,
                                                                                     says):
    log, got = Lines(), {}
    scrape = threading.Thread(target=lambda: got.setdefault("out", _run("slow_page", scrape_home, log)))
    scrape.start()
    assert slow_site.waiting.wait(120), str(log)[-3000:]
    host = _host_of(log, "slow_page")
    victims = _victims(kind, _chromium_of(host))
    assert victims, (kind, _chromium_of(host))
    kill_pids(victims)
    if kind == "renderer":
        # the renderer the waiting navigation commits into may be started only now (site isolation), later still
        # on a loaded machine: every renderer the browser starts within two seconds goes the same way
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            kill_pids(_victims(kind, _chromium_of(host)))
            time.sleep(0.1)
    slow_site.release.set()
    scrape.join(timeout=240)
    out = got["out"]
    assert (out.status, out.category) == ("failed", "infra"), out
    assert says in out.error, out.error
    assert _gone(host), f"browser host {host} whose browser lost {kind} is still up"

    again = _run("slow_page", scrape_home, log, reexecution=True)  # what the crash budget pays for
    assert (again.status, again.category, again.rows) == ("ok", None, 3), again
    assert _host_of(log, "slow_page") != host


def test_a_host_whose_browser_lost_a_process_is_not_reused_even_when_its_source_completed(scrape_home, slow_site):
    """The zygote no renderer comes from, killed mid-scrape, costs the source nothing: its rows are all kept. The
    browser is short of a process all the same, so its host is not reused for the next source."""
    log, got = Lines(), {}
    scrape = threading.Thread(target=lambda: got.setdefault("out", _run("slow_page", scrape_home, log)))
    scrape.start()
    assert slow_site.waiting.wait(120), str(log)[-3000:]
    host = _host_of(log, "slow_page")
    victims = _victims("unused zygote", _chromium_of(host))
    assert len(victims) == 1, _chromium_of(host)
    kill_pids(victims)
    slow_site.release.set()
    scrape.join(timeout=240)
    assert (got["out"].status, got["out"].rows) == ("ok", 3), got["out"]
    assert _gone(host), f"browser host {host} whose browser lost a zygote is still up"


def test_a_site_that_aborts_its_own_navigation_stays_source(scrape_home, slow_site):
    """204 No Content: Chromium's net::ERR_ABORTED, with no process of the browser gone and no crash."""
    log = Lines()
    out = _run("aborts_itself", scrape_home, log)
    assert (out.status, out.category) == ("failed", "source"), out
    assert "net::ERR_ABORTED" in out.error and "crashed" not in out.error and "lost" not in out.error, out.error
