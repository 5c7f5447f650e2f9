"""One Chromium per ``FLEET_HOME``, shared by the scrape workers; each source gets a browser context of its own.

With ``FLEET_BROWSER=shared`` (the default; ``own`` gives each warm worker a Chromium of its own, see
fleet/scraping/pool.py), source workers connect to one browser served by Playwright's browser server (``python
-m playwright launch-server``: what Node's ``browserType.launchServer`` starts), each on a WebSocket of its own
with no Node.js driver in the worker (fleet/scraping/wsclient.py), and open a fresh context in it.
A context has its own cookies, storage and cache, like an incognito window. What stays isolated:

- each source's Python code still runs in its own worker process, killed as a whole at its hard timeout.
  The server gives each connection only the contexts it created, and closes them when that connection drops
  (its "isolated contexts"; a worker's ``browser.close()`` only disconnects it);
- a renderer crash takes down only that source's tab (Chromium runs a renderer per site).

What is shared is the browser process. If it dies, every source using it at that moment fails at once with
category ``infra``, and the run re-executes those steps (the raw assets' retry policy). Each of those sources
gets a browser of its own for the rest of the week (fleet/scraping/runner.py, ``SHARED_BROWSER_DIED``): a
source that crashes Chromium itself, on every attempt, takes the others down once, and after that only browsers
of its own. The next source to start on the shared browser launches a new one. A scraper that must not share
(extensions, a custom profile, flags) sets ``own_browser = True``.

What it saves, on the 2-core machine of BENCHMARKS.md: full-size weeks (40 sources, cap 10), 3 alternating pairs,
used 41 CPU-s against 50 with a Chromium and a driver per worker, and took 49 s against 52.5. Until
2026-12-05 each worker still ran its own driver to reach the server, and sharing saved nothing; until 2026-12-04
the workers connected over the DevTools protocol (``connect_over_cdp``), where each worker's driver handles the
events of every page in the browser.

The browser runs under a small host process, ``python -m fleet.scraping.browser serve DIR``, which:

- starts the browser server (Chromium with the switches Playwright gives a browser it launches, plus fleet's,
  and a WebSocket endpoint on 127.0.0.1 whose path is random), and writes it to ``DIR/endpoint.json``
  (readable by this user only);
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
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleet.config import CHROMIUM_ARGS, browser_idle_s
from fleet.errors import FleetError
from fleet.scraping.procs import (alive as _alive, descendants, kill_pids, kill_tree, private_tmp, stat_fields,
                                  sweep_tmp, tmp_base)

START_TIMEOUT_S = 60.0


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


def chromium_pid(directory: Path) -> int | None:
    """The pid of the shared Chromium in ``directory``, if one runs now."""
    info = _read_endpoint(directory)
    return info["chromium_pid"] if info else None


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
    """Return the endpoint (``ws://127.0.0.1:PORT/PATH``) of the shared browser in ``directory``, starting
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
    _clear_host_files(directory, info["host_pid"])  # the killed host cannot


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

def _chromium_pid(parent: int) -> int | None:
    """The browser process (not a zygote, renderer or other helper) among ``parent``'s descendants.

    Debian's ``chromium-headless-shell`` is a shell script that runs the real binary with the same arguments, so
    two processes carry the browser's switches: the script, and Chromium under it. The browser is the innermost
    one, the match that is no other match's parent: the host watches it, and killing it kills the browser
    (killing the script would leave Chromium running)."""
    matches: dict[int, int] = {}  # pid -> parent pid
    for pid in descendants(parent):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.startswith(b"--user-data-dir=") for a in args) and not any(a.startswith(b"--type=") for a in args):
            fields = stat_fields(pid)  # only a match's parent is needed: not every renderer's
            if fields is not None:
                matches[pid] = int(fields[1])
    parents = set(matches.values())
    return next((pid for pid in matches if pid not in parents), None)


def _server_config(directory: Path, host_pid: int) -> Path:
    return directory / f"server-{host_pid}.json"


def _clear_host_files(directory: Path, host_pid: int) -> None:
    """What the host ``host_pid`` leaves once it and its server are killed: its server's config, and its
    temporary folder with the killed Chromium's profile."""
    _server_config(directory, host_pid).unlink(missing_ok=True)
    sweep_tmp(tmp_base(directory), killed=(host_pid,))


def _launch_server(directory: Path, chromium: str) -> subprocess.Popen:
    """Playwright's browser server (``python -m playwright launch-server``, which runs its driver): it launches
    Chromium with the switches Playwright gives a browser it launches (plus fleet's), and prints a WebSocket
    endpoint on 127.0.0.1 with a random, unguessable path. Each worker that connects (``browser_type.connect``)
    sees and drives only the contexts it created, which the server closes when that worker's connection drops."""
    config = _server_config(directory, os.getpid())
    config.write_text(json.dumps({"executablePath": chromium, "headless": True, "args": list(CHROMIUM_ARGS),
                                  "host": "127.0.0.1", "port": 0, "handleSIGINT": False, "handleSIGTERM": False,
                                  "handleSIGHUP": False}))
    return subprocess.Popen([sys.executable, "-m", "playwright", "launch-server", "--browser", "chromium",
                             "--config", str(config)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=sys.stdout, text=True)


async def _serve(directory: Path, chromium: str) -> int:
    private_tmp(tmp_base(directory))  # before the server starts: the browser's profile and artifacts go there
    server = _launch_server(directory, chromium)
    loop = asyncio.get_running_loop()
    try:
        endpoint = (await asyncio.wait_for(loop.run_in_executor(None, server.stdout.readline), START_TIMEOUT_S)).strip()
    except asyncio.TimeoutError:
        endpoint = ""
    pid = _chromium_pid(server.pid) if endpoint.startswith("ws://") else None
    if pid is None:
        code = server.poll()
        print(f"the browser server exited with code {code}" if code is not None else
              f"the browser server gave no endpoint within {START_TIMEOUT_S:g}s (it said {endpoint!r})", flush=True)
        return 1
    info = {"endpoint": endpoint, "host_pid": os.getpid(), "chromium_pid": pid, "started": time.time()}
    tmp = directory / "endpoint.json.tmp"
    tmp.write_text(json.dumps(info))
    os.chmod(tmp, 0o600)  # the endpoint's path is what lets a process drive this browser
    os.replace(tmp, directory / "endpoint.json")
    print(f"chromium {pid} listening on {endpoint.split('/')[2]}", flush=True)
    idle_limit = browser_idle_s()
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
    return 0


def serve(directory: Path, chromium: str) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return asyncio.run(_serve(directory, chromium))
    finally:
        kill_pids(descendants(os.getpid()))  # the browser server and its Chromium
        _clear_host_files(directory, os.getpid())


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        sys.exit("usage: python -m fleet.scraping.browser serve DIR CHROMIUM")
    sys.exit(serve(Path(sys.argv[2]), sys.argv[3]))
