"""The shared browser: one Chromium per FLEET_HOME, a context per source, leases, idle stop, and what a crash of
that Chromium costs (the sources in flight are re-executed in the run; none is lost)."""
import json
import os
import re
import time
from pathlib import Path

import pytest

from fleet.config import chromium_path
from fleet.scraping import browser, wsclient
from fleet.scraping.procs import alive as _alive, descendants, kill_pids, tmp_base
from fleet_tests.conftest import ROOT, WEEK, committed_frame, run_fleet


def _messages(error):
    out = []
    while error is not None:
        out.append(error.message)
        error = error.cause
    return " / ".join(out)


def _wait_dead(pid, seconds=15):
    deadline = time.monotonic() + seconds
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still alive"
        time.sleep(0.1)


@pytest.fixture
def browser_dir(tmp_path):
    """Where a test's shared browser lives; whatever runs there is stopped afterwards, also after a failure (an
    idle browser would otherwise live out its idle limit)."""
    d = tmp_path / "browser"
    yield d
    browser.stop(d)


def test_one_browser_is_shared_leased_and_stopped(browser_dir, monkeypatch):
    d = browser_dir
    monkeypatch.setenv("FLEET_BROWSER_IDLE_S", "600")
    first = browser.acquire(d, chromium_path(), holder=os.getpid())
    info = json.loads((d / "endpoint.json").read_text())
    assert first == info["endpoint"] and _alive(info["chromium_pid"])
    # the browser itself, not Debian's shell script that runs it with the same switches
    assert "chromium" in os.path.basename(os.readlink(f"/proc/{info['chromium_pid']}/exe"))
    # Playwright's artifacts folder is in the host's own temporary folder (procs.private_tmp), not in /tmp
    [own] = tmp_base(d).iterdir()
    assert own.name.startswith(f"{info['host_pid']}-") and any(own.glob("playwright-artifacts-*"))
    # a second caller gets the same browser
    assert browser.acquire(d, chromium_path(), holder=os.getppid()) == first
    # while a live process holds a lease, stop_if_idle leaves it running
    assert browser.stop_if_idle(d) is False and _alive(info["chromium_pid"])
    browser.release(d, holder=os.getpid())
    browser.release(d, holder=os.getppid())
    assert browser.stop_if_idle(d) is True
    _wait_dead(info["chromium_pid"])
    _wait_dead(info["host_pid"])
    assert not (d / "endpoint.json").exists()
    assert not list(d.glob("profile-*"))  # the stopped browser's profile is removed with it
    assert not tmp_base(d).exists()  # and so is its temporary folder, though the host was killed


def test_the_browser_is_the_innermost_process_with_its_switches(tmp_path):
    """A wrapper script that runs the browser with the same switches (Debian's ``chromium-headless-shell``) is not
    taken for the browser: the process under it is."""
    import subprocess
    import sys

    script = tmp_path / "fake-chromium"
    # a command after it, so no shell runs the "browser" in place of the script (as a last command may be)
    script.write_text(f'#!/bin/sh\n"{sys.executable}" -c "import time; time.sleep(60)" "$@"\necho done\n')
    script.chmod(0o755)
    wrapper = subprocess.Popen([str(script), f"--user-data-dir={tmp_path / 'profile'}", "--headless"])
    try:
        deadline = time.monotonic() + 10
        while (pid := browser._chromium_pid(os.getpid())) in (None, wrapper.pid):
            assert time.monotonic() < deadline, "the wrapper's child never appeared"
            time.sleep(0.05)
        assert pid != wrapper.pid and _alive(pid)
        assert os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    finally:
        kill_pids([wrapper.pid, *descendants(wrapper.pid)])
        wrapper.wait()


def test_a_dead_browser_is_replaced_and_an_idle_one_stops_itself(browser_dir, monkeypatch):
    d = browser_dir
    monkeypatch.setenv("FLEET_BROWSER_IDLE_S", "1")
    browser.acquire(d, chromium_path())
    old = json.loads((d / "endpoint.json").read_text())
    os.kill(old["chromium_pid"], 9)
    _wait_dead(old["host_pid"])  # the host exits with its Chromium
    browser.acquire(d, chromium_path())  # the next caller starts a new one
    new = json.loads((d / "endpoint.json").read_text())
    assert new["chromium_pid"] != old["chromium_pid"] and _alive(new["chromium_pid"])
    browser.release(d)
    _wait_dead(new["chromium_pid"], seconds=20)  # no lease for 1 s: the host stops it
    assert not (d / "endpoint.json").exists()
    _wait_dead(new["host_pid"])
    assert not tmp_base(d).exists()  # the host that stopped cleared its own, and its dead predecessor's


def _renderers(chromium_pid: int) -> set[int]:
    out = set()
    for pid in descendants(chromium_pid):
        try:
            if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.add(pid)
        except OSError:
            pass
    return out


def _node_processes() -> list[int]:
    """Node.js processes under this one (a Playwright driver is one)."""
    out = []
    for pid in descendants(os.getpid()):
        try:
            if b"node" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]:
                out.append(pid)
        except OSError:
            pass
    return out


def _wait_for(predicate, seconds=20):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_each_worker_sees_only_its_own_contexts_and_a_killed_ones_close(tmp_path, monkeypatch):
    """Two processes connected to the shared browser, through real Chromium, one through Playwright's driver and one
    on fleet's WebSocket client: neither sees the other's context, and
    when one is SIGKILLed (a worker killed at its limit) the server closes its context and that context's renderer
    goes, while the other's page lives on and still answers."""
    import asyncio
    import signal
    import subprocess
    import sys

    d = tmp_path / "browser"
    monkeypatch.setenv("FLEET_BROWSER_IDLE_S", "600")
    endpoint = browser.acquire(d, chromium_path())
    chromium_pid = json.loads((d / "endpoint.json").read_text())["chromium_pid"]
    assert oct((d / "endpoint.json").stat().st_mode & 0o777) == "0o600"
    code = ("import asyncio, sys\nfrom playwright.async_api import async_playwright\nasync def main():\n"
            "    async with async_playwright() as pw:\n        b = await pw.chromium.connect(sys.argv[1])\n"
            "        page = await (await b.new_context()).new_page()\n"
            "        await page.set_content('<h1>other worker</h1>')\n        print(len(b.contexts), flush=True)\n"
            "        await asyncio.sleep(600)\nasyncio.run(main())")
    before = _renderers(chromium_pid)
    other = subprocess.Popen([sys.executable, "-c", code, endpoint], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "1"  # its own context, and nothing else
        _wait_for(lambda: len(_renderers(chromium_pid) - before) == 1)
        others = _renderers(chromium_pid) - before

        async def mine():
            # this side as fleet's workers connect: on a WebSocket of its own, with no Node.js driver
            b = await wsclient.connect(endpoint)
            assert b.contexts == []  # the other worker's context is not visible here
            page = await (await b.new_context()).new_page()
            await page.set_content("<h1>this worker</h1>")
            theirs = {other.pid, *descendants(other.pid)}  # the other's driver is a node process
            assert not [pid for pid in _node_processes() if pid not in theirs]
            other.send_signal(signal.SIGKILL)
            other.wait()
            await asyncio.get_running_loop().run_in_executor(
                None, _wait_for, lambda: not (_renderers(chromium_pid) & others))
            assert await page.inner_text("h1") == "this worker"  # untouched by the other's end
            assert len(b.contexts) == 1
            await b.close()  # disconnects only: the shared browser stays up for others
            assert not b.is_connected() and page.is_closed()
        asyncio.run(mine())
        assert _alive(chromium_pid)
    finally:
        other.kill()
        other.wait()
        browser.release(d)
        browser.stop(d)


def test_a_bad_chromium_is_a_clear_error(tmp_path):
    with pytest.raises(Exception, match=r"shared browser \(/bin/false\) is not available: its host exited"):
        browser.acquire(tmp_path / "browser", "/bin/false")


def test_a_browser_killer_costs_each_other_source_one_attempt_at_most(fleet_env):
    """kills_browser crashes the browser it runs in on every attempt. Its first attempt SIGKILLs the shared
    Chromium while slow_1 and slow_2 are mid-scrape there: all three fail as infra, and each gets a browser of its
    own for the rest of the week. slow_1 and slow_2 are re-executed inside the run and complete; kills_browser
    kills only its own browsers from then on, until its crash budget is spent. `own` (own_browser) is untouched."""
    counters = fleet_env.tmp / "counters"
    counters.mkdir()
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(ROOT / "fleet_tests" / "scrapers_browser"),
           "FLEET_TEST_COUNTER_DIR": str(counters), "FLEET_MAX_PARALLEL": "4", "FLEET_CRASH_RERUNS": "2"}
    env.pop("FLEET_BROWSER", None)  # shared is the default
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-5000:]  # kills_browser failed; the week's other rows are committed
    warm = r"\((a new warm worker|warm, its source no\. \d+)"
    for name in ("slow_1", "slow_2", "kills_browser"):  # first attempt shared, the re-executions not
        started = re.findall(r"\[" + name + r"\] worker \d+ started " + warm + r", ([a-z ]+);", out)
        assert [how for _, how in started] == ["context in the shared browser"] + ["browser of its own"] * (
            2 if name == "kills_browser" else 1), (name, started, out[-3000:])
    assert re.search(r"\[own\] worker \d+ started " + warm + ", browser of its own", out), out[-3000:]
    killed = [line.split() for line in (counters / "killed_chromium").read_text().splitlines()]
    assert [which for which, _ in killed] == ["shared", "own", "own"], killed
    assert len({pid for _, pid in killed}) == 3 and not any(_alive(int(pid)) for _, pid in killed)
    frame = committed_frame(fleet_env.remote, f"data/{WEEK}/raw.parquet")
    counts = frame.group_by("source").len().sort("source").rows()
    assert counts == [("own", 8), ("slow_1", 8), ("slow_2", 8)]

    os.environ["DAGSTER_HOME"] = str(fleet_env.home / "dagster")
    from dagster import DagsterEventType, DagsterInstance, RunsFilter
    with DagsterInstance.get() as instance:
        runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
        scrape = next(r for r in runs if r.tags.get("fleet/kind") == "scrape")
        retried = [(e.dagster_event.step_key, _messages(e.dagster_event.event_specific_data.error)) for e in
                   instance.all_logs(scrape.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)]
        failed = {e.dagster_event.step_key: _messages(e.dagster_event.event_specific_data.error) for e in
                  instance.all_logs(scrape.run_id, of_type=DagsterEventType.STEP_FAILURE)}
    assert sorted(k for k, _ in retried) == ["raw__kills_browser", "raw__kills_browser", "raw__slow_1", "raw__slow_2"]
    assert all("[infra]" in why and "the browser crashed" in why
               for k, why in retried if k != "raw__kills_browser"), retried
    assert list(failed) == ["raw__kills_browser"] and "[infra]" in failed["raw__kills_browser"], failed
    # fleet run stops the shared browser when the week is done
    assert not (fleet_env.home / "browser" / "endpoint.json").exists()


def test_this_playwright_has_what_the_websocket_client_uses():
    """Without it, every worker on the shared browser would run a Node.js driver again (worker.open_browser falls
    back to one) and quietly cost ~0.2 CPU-s more per source: a Playwright upgrade that loses these parts fails
    here first."""
    assert wsclient.available()


def test_without_the_websocket_client_a_worker_reaches_the_shared_browser_through_a_driver(tmp_path, monkeypatch):
    """The fallback of worker.open_browser, through real Chromium: a context in the shared browser, and a node
    process (the driver) under this process while it is open."""
    import asyncio

    from fleet.scraping import worker

    d = tmp_path / "browser"
    monkeypatch.setenv("FLEET_BROWSER_IDLE_S", "600")
    monkeypatch.setattr(wsclient, "available", lambda: False)
    endpoint = browser.acquire(d, chromium_path())

    async def main():
        async with worker.open_browser({"shared_endpoint": endpoint, "chromium": chromium_path()}) as b:
            page = await (await b.new_context()).new_page()
            await page.set_content("<h1>through a driver</h1>")
            assert await page.inner_text("h1") == "through a driver"
            assert _node_processes()
        assert not b.is_connected()
    try:
        asyncio.run(main())
        _wait_for(lambda: not _node_processes())
        assert _alive(json.loads((d / "endpoint.json").read_text())["chromium_pid"])  # only disconnected
    finally:
        browser.release(d)
        browser.stop(d)


def test_the_websocket_client_ignores_proxy_settings_and_a_bad_number_fails_only_its_call(tmp_path, monkeypatch):
    """HTTP(S)_PROXY / ALL_PROXY in the environment must not route the connection to 127.0.0.1 through a proxy
    (websockets follows them by default; Playwright's driver does not). A value JSON cannot carry (an infinite
    timeout) fails that one call with Playwright's Error; the connection and its page stay usable."""
    import asyncio
    import math

    from playwright.async_api import Error as PlaywrightError

    d = tmp_path / "browser"
    monkeypatch.setenv("FLEET_BROWSER_IDLE_S", "600")
    endpoint = browser.acquire(d, chromium_path())
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def main():
        b = await wsclient.connect(endpoint, timeout_s=20)
        page = await (await b.new_context()).new_page()
        await page.set_content("<p>ok</p>")
        with pytest.raises(PlaywrightError, match="Out of range float"):
            await page.wait_for_selector("p", timeout=math.inf)
        assert b.is_connected() and await page.inner_text("p") == "ok"
        await b.close()
    try:
        asyncio.run(main())
    finally:
        browser.release(d)
        browser.stop(d)
