"""One Chromium per ``FLEET_HOME``, shared by the scrape workers; each source gets a browser context of its own.

Launching Chromium costs about a second of CPU. With ``FLEET_BROWSER=shared`` (opt-in; the default is a
Chromium per warm worker, see fleet/scraping/pool.py), source workers connect to a shared browser over the DevTools protocol
(``connect_over_cdp``) and open a fresh context in it. A context has its
own cookies, storage and cache, like an incognito window. What stays isolated:

- each source's Python code still runs in its own worker process, killed as a whole at its hard timeout.
  Chromium closes a context and its pages as soon as the connection of the worker that created it drops
  (Playwright creates contexts to be disposed on detach; checked by killing a worker with a page open);
- a renderer crash takes down only that source's tab (Chromium runs a renderer per site).

What is shared is the browser process. If it dies, every source using it at that moment fails at once with
category ``infra``, and the run re-executes those steps (the raw assets' retry policy). The next source to
start launches a new browser. A scraper that must not share (extensions, a custom profile, flags) sets ``own_browser = True``.
Sharing is not the default because, on a loaded machine, the fault demo's broken_selector sometimes got no
screenshot at all from the shared browser, even from a viewport-only capture. A failure should carry its
screenshot (see BENCHMARKS.md).

The browser runs under a small host process, ``python -m fleet.scraping.browser serve DIR``, which:

- launches Chromium through Playwright (so it has the same switches as a browser a worker launches itself)
  with a DevTools port, and writes ``DIR/endpoint.json`` once it listens;
- stops Chromium after ``FLEET_BROWSER_IDLE_S`` (default 30) seconds with no live lease;
- exits when Chromium dies, so the next caller starts a new one.

A lease is a file named after the process that holds it, in ``DIR/leases``. A lease whose process is gone
does not count. Taking a lease and deciding to stop both happen under ``DIR/lock``, so a caller never gets
an endpoint that is about to close.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleet.config import CHROMIUM_ARGS
from fleet.errors import FleetError
from fleet.scraping.procs import alive as _alive, descendants, kill_pids, kill_tree, private_tmp, sweep_tmp

# the same extras as a worker's own browser, and the DevTools port
CHROMIUM_FLAGS = [*CHROMIUM_ARGS, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0"]
START_TIMEOUT_S = 60.0


def idle_seconds() -> float:
    raw = os.environ.get("FLEET_BROWSER_IDLE_S", "30")
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise FleetError(f"FLEET_BROWSER_IDLE_S must be a number of seconds, got {raw!r}") from None


@contextlib.contextmanager
def _locked(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_endpoint(directory: Path) -> dict | None:
    try:
        info = json.loads((directory / "endpoint.json").read_text())
    except (OSError, ValueError):
        return None
    if not (_alive(info.get("host_pid", -1)) and _alive(info.get("chromium_pid", -1))):
        return None
    return info


def _live_leases(directory: Path) -> list[int]:
    live = []
    for lease in (directory / "leases").glob("*"):
        try:
            pid = int(lease.name)
        except ValueError:
            continue
        if _alive(pid):
            live.append(pid)
        else:
            lease.unlink(missing_ok=True)
    return live


def acquire(directory: Path, chromium: str, holder: int | None = None) -> str:
    """Return the DevTools endpoint (``http://127.0.0.1:PORT``) of the shared browser in ``directory``, starting
    one if none is running, and hold a lease on it for process ``holder`` (default: this one) until
    :func:`release`. Raises ``FleetError`` if no browser could be started."""
    holder = holder or os.getpid()
    with _locked(directory):
        # A live browser is never replaced here, even if slow to answer: other sources are using it. If it is
        # broken, their workers fail as infra and are re-executed, and the next acquire after it dies starts anew.
        info = _read_endpoint(directory)
        if info is None:
            info = _start(directory, chromium)
        leases = directory / "leases"
        leases.mkdir(exist_ok=True)
        (leases / str(holder)).touch()
        return info["endpoint"]


def release(directory: Path, holder: int | None = None) -> None:
    (directory / "leases" / str(holder or os.getpid())).unlink(missing_ok=True)


# Starts the host in a session of its own and exits at once, printing the host's pid. The host is then no
# process's descendant: a worker that started it can be killed with all its descendants (at its timeout, or
# when idle) without taking the browser that other sources use.
_LAUNCHER = ("import subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=sys.stderr, "
             "stderr=sys.stderr, start_new_session=True, close_fds=True); print(p.pid)")


def _start(directory: Path, chromium: str) -> dict:
    (directory / "endpoint.json").unlink(missing_ok=True)
    with open(directory / "host.log", "ab") as log:
        launched = subprocess.run([sys.executable, "-c", _LAUNCHER, sys.executable, "-m", "fleet.scraping.browser",
                                   "serve", str(directory), chromium],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, close_fds=True,
                                  check=True, text=True)
    host = int(launched.stdout.strip())
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        info = _read_endpoint(directory)
        if info is not None:
            return info
        if not _alive(host):
            break
        time.sleep(0.02)
    exited = not _alive(host)
    if not exited:
        kill_tree(host)
    why = "its host exited" if exited else f"it did not start within {START_TIMEOUT_S:g}s"
    tail = (directory / "host.log").read_text(errors="replace")[-2000:]
    raise FleetError(f"the shared browser ({chromium}) is not available: {why}:\n{tail}")


def _stop(directory: Path, info: dict) -> None:
    kill_pids([info["host_pid"], *descendants(info["host_pid"]), info["chromium_pid"], *descendants(info["chromium_pid"])])
    shutil.rmtree(directory / f"profile-{info['host_pid']}", ignore_errors=True)  # the killed host cannot
    sweep_tmp(directory / "tmp", killed=(info["host_pid"],))  # nor its Playwright's artifacts folder


def stop(directory: Path) -> None:
    """Stop the shared browser in ``directory`` now, leases or not, if one runs (the tests clean up with this)."""
    if not directory.exists():
        return
    with _locked(directory):
        info = _read_endpoint(directory)
        if info is not None:
            _stop(directory, info)
        (directory / "endpoint.json").unlink(missing_ok=True)


def stop_if_idle(directory: Path) -> bool:
    """Stop the shared browser now if no live process holds a lease on it (``fleet run`` calls this when its
    week is done, rather than leave Chromium up for the idle timeout). True if none is left running."""
    if not directory.exists():
        return True
    with _locked(directory):
        info = _read_endpoint(directory)
        if info is None:
            return True
        if _live_leases(directory):
            return False
        _stop(directory, info)
        (directory / "endpoint.json").unlink(missing_ok=True)
        return True


# --- the host process -----------------------------------------------------------------------------------

def _chromium_pid(profile: Path) -> int | None:
    """The browser process (not a zygote or renderer) that uses ``profile`` among this host's descendants."""
    for pid in descendants(os.getpid()):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--user-data-dir={profile}".encode() in args and not any(a.startswith(b"--type=") for a in args):
            return pid
    return None


async def _serve(directory: Path, chromium: str) -> int:
    from playwright.async_api import async_playwright

    profile = directory / f"profile-{os.getpid()}"
    shutil.rmtree(profile, ignore_errors=True)
    private_tmp(directory / "tmp")  # before the driver starts: its artifacts folder goes there
    async with async_playwright() as pw:
        # Launched by Playwright, so the shared browser has exactly the switches of a browser a worker launches
        # for itself (no background throttling of the many pages in it, and so on); the DevTools port is added.
        context = await pw.chromium.launch_persistent_context(
            str(profile), executable_path=chromium, headless=True, args=CHROMIUM_FLAGS)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline:
                print(f"chromium did not open its DevTools port within {START_TIMEOUT_S:g}s", flush=True)
                return 1
            await asyncio.sleep(0.02)
        pid = _chromium_pid(profile)
        if pid is None:
            print("could not find the chromium process", flush=True)
            return 1
        info = {"endpoint": f"http://127.0.0.1:{int(port_file.read_text().split()[0])}", "host_pid": os.getpid(),
                "chromium_pid": pid, "started": time.time()}
        tmp = directory / "endpoint.json.tmp"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, directory / "endpoint.json")
        print(f"chromium {pid} listening on {info['endpoint']}", flush=True)
        idle_limit = idle_seconds()
        idle_since = time.monotonic()
        while _alive(pid):
            await asyncio.sleep(0.5)
            with _locked(directory):
                if _live_leases(directory):
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= idle_limit:
                    (directory / "endpoint.json").unlink(missing_ok=True)
                    print(f"idle for {idle_limit:g}s; stopping chromium", flush=True)
                    break
        else:
            print("chromium died", flush=True)
        with _locked(directory):
            current = _read_endpoint(directory)
            if current is None or current.get("host_pid") == os.getpid():
                (directory / "endpoint.json").unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(context.close(), 10)
    return 0


def serve(directory: Path, chromium: str) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return asyncio.run(_serve(directory, chromium))
    finally:
        kill_pids(descendants(os.getpid()))  # whatever is left of Chromium and Playwright's driver
        for stale in directory.glob(f"profile-{os.getpid()}"):
            shutil.rmtree(stale, ignore_errors=True)
        sweep_tmp(directory / "tmp", killed=(os.getpid(),))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        sys.exit("usage: python -m fleet.scraping.browser serve DIR CHROMIUM")
    sys.exit(serve(Path(sys.argv[2]), sys.argv[3]))
