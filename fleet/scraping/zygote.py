"""The warm-worker zygote: one process per ``FLEET_HOME`` that has imported what a warm worker runs (Playwright,
polars, fleet's worker), and forks new warm workers from that state on request.

A warm worker started as a new interpreter spends ~0.45 CPU-s importing before it starts Playwright's driver
and its browser (measured on the 2-core machine of BENCHMARKS.md). A week's first wave starts a worker per
concurrent source at once, while the steps start up too, so those imports delay every source of the wave.
Forked from the zygote, a worker starts with them done.

What a forked worker gets, and what it does not:

- the zygote's imports, and nothing else of it: its listening socket, its lock and every other file
  descriptor are closed, it gets a session of its own, stdin on /dev/null, stdout and stderr on the worker's
  log, and the environment and working directory of the step that asked for it;
- no scraper module: the zygote never imports one;
- the zygote writes its exit status to ``ID.exit`` in the pool's directory when it reaps it, so the step that
  started it (and any later one) can say how a worker ended (``ZygoteChild``).

The zygote listens on ``zygote.sock`` in ``FLEET_HOME/workers``, holds ``zygote.lock`` while it lives, and
leaves after ``IDLE_S`` seconds with no request and no live worker; ``fleet run`` starts it early and stops it
when its week is done (``pool.stop_idle``). Any failure to reach it makes the pool start a new interpreter, as
before, so it can only make a start cheaper, never fail one.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from fleet.scraping.procs import PolledProcess, alive, unix_address

SOCK, LOCK, PID = "zygote.sock", "zygote.lock", "zygote.pid"
IDLE_S = 60.0
READY_WAIT_S = 5.0  # how long a step waits for a zygote that is still importing


class ZygoteChild(PolledProcess):
    """A worker forked by the zygote, with the subset of ``subprocess.Popen`` the pool uses."""

    def __init__(self, pid: int, exit_path: Path):
        self.pid, self.exit_path = pid, exit_path
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not alive(self.pid):
            # The zygote writes the status when it reaps the worker (within a tick), and only while the worker's
            # lock exists: once its files are cleared away, nobody asks how it ended.
            lock = self.exit_path.with_suffix(".lock")
            deadline = time.monotonic() + 1.0
            while not self.exit_path.exists() and lock.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            try:
                self.returncode = int(self.exit_path.read_text())
                self.exit_path.unlink(missing_ok=True)
            except (OSError, ValueError):
                self.returncode = -1
        return self.returncode


def start(root: Path) -> None:
    """Start the zygote of ``root`` unless one is running (``fleet run`` calls this early); never waits."""
    root.mkdir(parents=True, exist_ok=True)
    if _holder_alive(root):  # running, or still importing
        return
    with open(root / "zygote.log", "ab") as log:
        subprocess.Popen([sys.executable, "-m", "fleet.scraping.zygote", str(root)], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)


def _holder_alive(root: Path) -> bool:
    try:
        fd = os.open(root / LOCK, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def spawn(root: Path, serve_args: list[str], log_path: Path, exit_path: Path, env: dict, cwd: str) -> ZygoteChild | None:
    """A new warm worker forked by the zygote (started now if none runs), or None if none answers in time."""
    deadline = time.monotonic() + READY_WAIT_S
    started = False
    while True:
        try:
            return _ask(root, serve_args, log_path, exit_path, env, cwd)
        except (OSError, ValueError):
            pass
        if not started and not _holder_alive(root):
            start(root)
            started = True
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _ask(root: Path, serve_args, log_path, exit_path, env, cwd) -> ZygoteChild:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        with unix_address(root / SOCK) as address:
            conn.connect(address)
        conn.sendall((json.dumps({"args": serve_args, "log": str(log_path), "exit": str(exit_path), "env": env,
                                  "cwd": cwd}) + "\n").encode())
        with conn.makefile("r") as reader:
            pid = int(reader.readline())
    return ZygoteChild(pid, exit_path)


def stop(root: Path) -> None:
    """Stop the zygote of ``root``, if one runs; its workers live on until they leave."""
    try:
        pid = int((root / PID).read_text())
    except (OSError, ValueError):
        return
    if _holder_alive(root) and alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)


# --- the zygote -------------------------------------------------------------------------------------------

def _child(request: dict) -> None:
    """In the forked worker: shed everything of the zygote, then serve as ``python -m fleet.scraping.pool`` would."""
    code = 70
    try:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, min(os.sysconf("SC_OPEN_MAX"), 65536))
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(request["env"])
        with contextlib.suppress(OSError):
            os.chdir(request["cwd"])
        from fleet.scraping import pool
        directory, wid, chromium, browser_dir, node_cache = request["args"]
        code = pool.serve(Path(directory), wid, chromium, browser_dir, node_cache)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _write_exit(path: str, code: int) -> None:
    tmp = f"{path}.tmp"
    with contextlib.suppress(OSError):
        Path(tmp).write_text(str(code))
        os.replace(tmp, path)


def main(root: Path) -> int:
    root.mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(root / LOCK, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another zygote serves this FLEET_HOME
    (root / PID).write_text(str(os.getpid()))
    # what a warm worker imports before it starts its driver (fleet/scraping/pool.py, worker.py)
    import gc

    import playwright.async_api  # noqa: F401
    import polars  # noqa: F401

    import fleet.scraping.browser  # noqa: F401
    import fleet.scraping.pool  # noqa: F401
    import fleet.scraping.worker  # noqa: F401
    gc.collect()
    gc.freeze()  # forked workers neither scan nor dirty what they inherit

    stopping = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stopping.update(flag=True))
    tmp = root / f".{SOCK}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with unix_address(tmp) as address:
        listener.bind(address)
    os.chmod(tmp, 0o600)  # only this user's steps may ask for workers
    listener.listen(16)
    os.replace(tmp, root / SOCK)
    children: dict[int, str] = {}
    last_request = time.monotonic()
    try:
        while not stopping["flag"]:
            while children:  # reap, and tell how each ended
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if not pid:
                    break
                exit_path = children.pop(pid, None)
                if exit_path and Path(exit_path).with_suffix(".lock").exists():  # a step may still ask
                    _write_exit(exit_path, os.waitstatus_to_exitcode(status))
            if not children and time.monotonic() - last_request > IDLE_S:
                break
            try:
                ready, _, _ = select.select([listener], [], [], 0.1)
            except InterruptedError:
                continue
            if not ready:
                continue
            conn, _ = listener.accept()
            last_request = time.monotonic()
            with conn:
                try:
                    conn.settimeout(10)
                    with conn.makefile("r") as reader:
                        request = json.loads(reader.readline())
                except (OSError, ValueError):
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(request)
                children[pid] = request["exit"]
                with contextlib.suppress(OSError):
                    conn.sendall(f"{pid}\n".encode())
    finally:
        (root / SOCK).unlink(missing_ok=True)  # ours: no other zygote binds it before our lock is gone
        listener.close()
        (root / PID).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m fleet.scraping.zygote FLEET_HOME/workers")
    sys.exit(main(Path(sys.argv[1])))
