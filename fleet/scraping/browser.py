"""One Chromium per ``FLEET_HOME``, shared by the scrape workers; each source gets a browser context of its own.

Launching Chromium costs every source about a second of CPU. Source workers therefore connect to a shared
browser over the DevTools protocol (``connect_over_cdp``) and open a fresh context in it. A context has its
own cookies, storage and cache, like an incognito window. What stays isolated:

- each source's Python code still runs in its own worker process, killed as a whole at its hard timeout.
  Playwright creates each context with ``disposeOnDetach``, so Chromium closes the context and its pages as
  soon as that worker's connection drops;
- a renderer crash takes down only that source's tab (Chromium runs a renderer per site).

What is shared is the browser process. If it dies, every source using it at that moment fails with
category ``infra``, and the run-failure sensor re-executes them. The next source to start launches a new
browser. A scraper that must not share (extensions, a custom profile, flags) sets ``own_browser = True``,
and ``FLEET_BROWSER=own`` turns sharing off for everyone.

The browser runs under a small host process, ``python -m fleet.scraping.browser serve DIR``, which:

- writes ``DIR/endpoint.json`` once Chromium listens;
- stops Chromium after ``FLEET_BROWSER_IDLE_S`` (default 30) seconds with no live lease;
- exits when Chromium dies, so the next caller starts a new one.

A lease is a file named after the process that holds it, in ``DIR/leases``. A lease whose process is gone
does not count. Taking a lease and deciding to stop both happen under ``DIR/lock``, so a caller never gets
an endpoint that is about to close.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from fleet.errors import FleetError
from fleet.scraping.procs import descendants, kill_pids

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--mute-audio", "--remote-debugging-address=127.0.0.1",
                  "--remote-debugging-port=0"]
START_TIMEOUT_S = 60.0


def idle_seconds() -> float:
    raw = os.environ.get("FLEET_BROWSER_IDLE_S", "30")
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise FleetError(f"FLEET_BROWSER_IDLE_S must be a number of seconds, got {raw!r}") from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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


def _responds(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint + "/json/version", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


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
        info = _read_endpoint(directory)
        if info is None or not _responds(info["endpoint"]):
            if info is not None:  # alive but deaf: replace it
                _stop(info)
            info = _start(directory, chromium)
        leases = directory / "leases"
        leases.mkdir(exist_ok=True)
        (leases / str(holder)).touch()
        return info["endpoint"]


def release(directory: Path, holder: int | None = None) -> None:
    (directory / "leases" / str(holder or os.getpid())).unlink(missing_ok=True)


def _start(directory: Path, chromium: str) -> dict:
    (directory / "endpoint.json").unlink(missing_ok=True)
    log = open(directory / "host.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "fleet.scraping.browser", "serve", str(directory), chromium],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                            close_fds=True)
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        info = _read_endpoint(directory)
        if info is not None:
            return info
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
    tail = (directory / "host.log").read_text(errors="replace")[-2000:]
    raise FleetError(f"the shared browser ({chromium}) did not start within {START_TIMEOUT_S:g}s:\n{tail}")


def _stop(info: dict) -> None:
    kill_pids([info["host_pid"], info["chromium_pid"], *descendants(info["chromium_pid"])])


def stop(directory: Path) -> None:
    """Stop the shared browser in ``directory`` now, if one runs (tests and ``fleet`` commands call this)."""
    if not directory.exists():
        return
    with _locked(directory):
        info = _read_endpoint(directory)
        if info is not None:
            _stop(info)
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
        _stop(info)
        (directory / "endpoint.json").unlink(missing_ok=True)
        return True


# --- the host process -----------------------------------------------------------------------------------

def serve(directory: Path, chromium: str) -> int:
    profile = directory / f"profile-{os.getpid()}"
    shutil.rmtree(profile, ignore_errors=True)
    proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def shutdown(*_):
        kill_pids([proc.pid, *descendants(proc.pid)])  # Chromium's zygotes and renderers too
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, shutdown)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not port_file.exists() or not port_file.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            print(f"chromium exited ({proc.returncode}) or did not listen within {START_TIMEOUT_S:g}s", flush=True)
            shutdown()
        time.sleep(0.02)
    port = int(port_file.read_text().split()[0])
    info = {"endpoint": f"http://127.0.0.1:{port}", "host_pid": os.getpid(), "chromium_pid": proc.pid,
            "started": time.time()}
    tmp = directory / "endpoint.json.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, directory / "endpoint.json")
    print(f"chromium {proc.pid} listening on {info['endpoint']}", flush=True)
    idle_limit = idle_seconds()
    idle_since = time.monotonic()
    while proc.poll() is None:
        time.sleep(0.5)
        with _locked(directory):
            if _live_leases(directory):
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= idle_limit:
                (directory / "endpoint.json").unlink(missing_ok=True)
                print(f"idle for {idle_limit:g}s; stopping chromium", flush=True)
                shutdown()
    print(f"chromium exited with {proc.returncode}", flush=True)
    with _locked(directory):
        current = _read_endpoint(directory)
        if current is None or current.get("host_pid") == os.getpid():
            (directory / "endpoint.json").unlink(missing_ok=True)
    shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        sys.exit("usage: python -m fleet.scraping.browser serve DIR CHROMIUM")
    sys.exit(serve(Path(sys.argv[2]), sys.argv[3]))
