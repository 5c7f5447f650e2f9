"""Warm scrape workers: a source attempt runs in a worker that keeps Playwright and its browser between sources.

A new worker per attempt costs, on the 2-core machine of BENCHMARKS.md, about 2 CPU-s for Playwright's Node.js
driver, 1 CPU-s to launch Chromium and 0.3 CPU-s for the process, before it scrapes anything. A warm worker
pays that once. What each source still gets for itself:

- a new browser context (its own cookies, storage and cache) in the worker's browser;
- a fresh import of its scraper module, and the environment and working directory of the step that runs it;
- the same hard limit: at its timeout the step kills the worker with its driver and browser, and the next
  source gets another worker;
- the same crash handling: if the worker dies, the source fails as infra and its step is re-executed.

A worker is reused only after a clean finish: the source returned ok or empty, the browser is still
connected, and the scraper left no task or thread running. After anything else the worker exits. It also
exits after ``FLEET_WORKER_MAX_SOURCES`` sources (default 50) and after ``FLEET_WORKER_IDLE_S`` seconds
(default 30) with nothing to do; ``fleet run`` stops the idle ones when its week is done. A scraper that must
not share a process with sources before it sets ``own_process = True``; ``FLEET_WORKERS=fresh`` turns warm
workers off altogether.

A new worker forks from the zygote (fleet/scraping/zygote.py), which has already imported what a worker
runs; if the zygote does not answer, it is a new interpreter (``python -m fleet.scraping.pool serve``).
``fleet run`` also starts workers before any step asks, one at a time, while it imports Dagster and creates
the week's run (:func:`prestart`): the first wave's steps then find them idle, instead of all starting a
worker at once while they start up themselves.

Files in a pool's directory (``FLEET_HOME/workers/own`` or ``.../shared``), per worker ``ID``:

- ``ID.lock``: held (flock) by the step using the worker. A step takes a worker by locking it without
  waiting, so one worker serves one source at a time, and the pool never holds more workers than sources
  ran at once, or than ``fleet run`` started ahead of its week's first wave (:func:`prestart`);
- ``ID.pid``: written by the step that started the worker;
- ``ID.sock``: the worker's socket, created once its browser is up;
- ``ID.log``: what the worker writes between sources;
- ``ID.exit``: its exit status, written by the zygote that reaped it while a step may still ask.

A worker's temporary files, its browser's profile among them, are in a folder of its own,
``/tmp/fleet-UID-HASH/PID-START`` (``procs.private_tmp``; HASH names the pool root), removed by whoever kills it, by
the worker as it leaves, and by :func:`stop_idle`.

Protocol, one connection per source: the worker greets with ``fleet-worker PID SERVED``, the step sends one
JSON line: the path of the attempt's spec (see fleet/scraping/runner.py), its environment and its working
directory. The worker streams the attempt's log lines
back, then a done line that says whether it stays. The connection is also the lifeline: if the step dies
mid-source, the worker sees the connection close, kills its browser and exits, so no source outlives its step.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from fleet.config import browser_startup_s, worker_idle_s, worker_max_sources
from fleet.errors import FleetError
from fleet.scraping import zygote
from fleet.scraping.procs import (alive, descendants, group_and_descendants, kill_pids, kill_tree, private_tmp,
                                  sweep_tmp, tmp_base, unix_address)

GREETING = "fleet-worker"
DONE = "\x1efleet-worker-done"
CONNECT_TIMEOUT_S = 10.0


class WorkerStartError(FleetError):
    """A new worker exited or did not get its browser up in time (an infra failure)."""


def tmp_root(root: Path) -> Path:
    """Where the workers of a ``FLEET_HOME/workers`` root keep their temporary files (procs.private_tmp)."""
    return tmp_base(root)


def _paths(directory: Path, wid: str) -> dict[str, Path]:
    return {k: directory / f"{wid}.{k}" for k in ("lock", "pid", "sock", "log", "exit")}


def _remove(directory: Path, wid: str) -> None:
    for path in _paths(directory, wid).values():
        path.unlink(missing_ok=True)


def _read_pid(directory: Path, wid: str) -> int | None:
    try:
        return int((directory / f"{wid}.pid").read_text())
    except (OSError, ValueError):
        return None


def _wait_gone(pids: list[int], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


class Lease:
    """A warm worker held by one step for one source, with the subset of ``subprocess.Popen`` the runner uses
    (``pid``, ``stderr``, ``poll``, ``wait``, ``returncode``). :meth:`release` gives it back."""

    def __init__(self, directory: Path, wid: str, pid: int, served: int, conn: socket.socket, reader, lock_fd: int,
                 popen: subprocess.Popen | None):
        self.directory, self.wid, self.pid, self.served = directory, wid, pid, served
        self.popen = popen  # set when this step started the worker
        self.returncode: int | None = None
        self.finished: str | None = None  # "reuse" or "retire", once the worker said it is done
        self._conn, self._reader, self._lock_fd = conn, reader, lock_fd
        self._ended = threading.Event()

    @property
    def new(self) -> bool:
        return self.popen is not None

    def start(self, spec_path: Path, env: dict[str, str], cwd: str) -> None:
        """Run the attempt of ``spec_path`` with the step's environment and working directory. They go over the
        socket, never to disk: the environment may hold secrets (FLEET_GIT_TOKEN, a site's password)."""
        self._conn.sendall((json.dumps({"spec": str(spec_path), "env": env, "cwd": cwd}) + "\n").encode())

    @property
    def stderr(self):
        """The attempt's log lines, up to the worker's done line or its end."""
        try:
            for line in self._reader:
                if line.startswith(DONE):
                    self.finished = line[len(DONE):].strip() or "retire"
                    break
                yield line
        except (OSError, ValueError):
            pass
        finally:
            self._ended.set()

    def poll(self) -> int | None:
        if self.returncode is None and self._ended.is_set():
            if self.finished:
                self.returncode = 0
            elif self.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(2)
                self.returncode = self.popen.returncode if self.popen.returncode is not None else -1
            else:  # started by an earlier step: the zygote that forked it reports how it ended, if it did
                child = zygote.ZygoteChild(self.pid, self.directory / f"{self.wid}.exit")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(2)
                self.returncode = child.returncode if child.returncode is not None else -1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
        return self.poll()

    def exit_reason(self) -> str:
        code = self.poll()
        if code is None or (code == -1 and self.popen is None):
            return "it was started by an earlier step and not by the zygote, so its exit status is unknown here"
        return f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"

    def release(self) -> None:
        """Give the worker back if it said it stays; otherwise make sure it is gone and clear its files."""
        for closeable in (self._reader, self._conn):
            with contextlib.suppress(OSError):
                closeable.close()
        if self.finished != "reuse":
            if self.finished is None:  # killed at its limit, or died: nothing of it may live on
                kill_tree(self.pid)
                sweep_tmp(tmp_root(self.directory.parent), killed=(self.pid,))  # its browser's profile
            _remove(self.directory, self.wid)
            if self.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(5)
        os.close(self._lock_fd)  # unlocks


def _connect(directory: Path, wid: str, pid: int, lock_fd: int, popen) -> Lease:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        with unix_address(directory / f"{wid}.sock") as address:
            conn.connect(address)
        reader = conn.makefile("r", encoding="utf-8", errors="replace")
        word, said_pid, served = reader.readline().split()
        if word != GREETING or int(said_pid) != pid:
            raise ValueError(f"unexpected greeting from worker {wid}")
        conn.settimeout(None)
    except BaseException:
        conn.close()
        raise
    return Lease(directory, wid, pid, int(served), conn, reader, lock_fd, popen)


def _try_take(directory: Path, wid: str) -> Lease | None:
    lock = directory / f"{wid}.lock"
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(lock).st_ino:  # cleared away while we opened it
            raise FileNotFoundError(lock)
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    pid = _read_pid(directory, wid)
    if pid is not None and alive(pid) and not (directory / f"{wid}.sock").exists():
        os.close(fd)  # still starting up for a step that gave up on it; it will idle out
        return None
    if pid is not None and alive(pid):
        try:
            return _connect(directory, wid, pid, fd, None)
        except (OSError, ValueError):
            kill_tree(pid)  # alive but not answering: it is ours to clear, we hold its lock
    _remove(directory, wid)
    os.close(fd)
    return None


def _worker_ids(directory: Path) -> list[str]:
    """The workers of ``directory``, by their ``ID.lock`` files, in name order.

    A worker being started has only ``.ID.lock`` until :func:`_start` renames it into place, and its starter
    takes the lock only just after creating the file. pathlib's ``*`` also matches names that begin with a
    dot, so without the filter a step scanning for idle workers could lock such a file in that instant, find
    no pid and clear it away, and the new worker's start failed as infra. Seen twice in five 40-source runs of
    ``bench.child runner-only``, whose callers are threads of one process; separate step processes have the
    same instant to lose."""
    return sorted(p.name[:-len(".lock")] for p in directory.glob("*.lock") if not p.name.startswith("."))


def lease(directory: Path, *, chromium: str, browser_dir: Path | None, node_cache: str,
          startup_limit: float) -> Lease:
    """An idle warm worker of ``directory``, or a new one once its browser is up. Raises ``WorkerStartError``."""
    directory.mkdir(parents=True, exist_ok=True)
    for wid in _worker_ids(directory):
        taken = _try_take(directory, wid)
        if taken is not None:
            return taken
    return _start(directory, chromium=chromium, browser_dir=browser_dir, node_cache=node_cache,
                  startup_limit=startup_limit)


def _start(directory: Path, *, chromium: str, browser_dir: Path | None, node_cache: str,
           startup_limit: float, connect: bool = True) -> Lease | None:
    """A new worker, once its browser is up: leased to the caller, or (``connect=False``) left idle, unlocked, for
    the first step that looks."""
    wid = uuid.uuid4().hex[:12]
    paths = _paths(directory, wid)
    # The lock appears already held (renamed into place), so no other step can take a half-started worker.
    tmp_lock = directory / f".{wid}.lock"
    fd = os.open(tmp_lock, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        serve_args = [str(directory), wid, chromium, str(browser_dir or ""), node_cache]
        # forked by the zygote, with its imports done (fleet/scraping/zygote.py); a new interpreter if none answers
        popen = zygote.spawn(directory.parent, serve_args, paths["log"], directory / f"{wid}.exit", dict(os.environ),
                             os.getcwd())
        if popen is None:
            with open(paths["log"], "ab") as log:
                popen = subprocess.Popen([sys.executable, "-m", "fleet.scraping.pool", "serve", *serve_args],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, close_fds=True)
        paths["pid"].write_text(str(popen.pid))
        os.replace(tmp_lock, paths["lock"])
        deadline = time.monotonic() + startup_limit
        while not paths["sock"].exists():
            if popen.poll() is not None:
                tail = paths["log"].read_text(errors="replace")[-2000:]
                raise WorkerStartError(f"the scrape worker exited with code {popen.returncode} before its browser "
                                       f"was up:\n{tail}")
            if time.monotonic() > deadline:
                raise WorkerStartError(f"the browser did not start within {startup_limit:g}s")
            time.sleep(0.02)
        if not connect:
            os.close(fd)  # unlocks: the worker is idle, with its browser up
            return None
        return _connect(directory, wid, popen.pid, fd, popen)
    except BaseException as exc:
        if "popen" in locals():
            kill_tree(popen.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(5)
        _remove(directory, wid)
        tmp_lock.unlink(missing_ok=True)
        os.close(fd)
        if isinstance(exc, (OSError, ValueError)):
            raise WorkerStartError(f"the new scrape worker did not answer: {exc}") from exc
        raise


PRESTART_LOG = "prestart.log"


def prestart(directory: Path, count: int, *, chromium: str, browser_dir: Path | None, node_cache: str,
             startup_limit: float = 90.0) -> int:
    """Start idle workers in ``directory``, one after another, until it holds ``count``; return how many started.

    One at a time, so that it takes at most one core: ``fleet run`` runs this while it imports Dagster and
    creates the week's run (single-threaded, ~3 s on 2 cores), and each worker started here is one the first
    wave's steps need not start while they all start up at once. A worker a step starts meanwhile counts too."""
    directory.mkdir(parents=True, exist_ok=True)
    started = 0
    while started < count and len(_worker_ids(directory)) < count:
        _start(directory, chromium=chromium, browser_dir=browser_dir, node_cache=node_cache,
               startup_limit=startup_limit, connect=False)
        started += 1
    return started


def start_prestart(root: Path, count: int, *, shared: bool, chromium: str, browser_dir: Path | None,
                   node_cache: str) -> subprocess.Popen | None:
    """Run :func:`prestart` for ``count`` workers in a process of its own (its log: ``PRESTART_LOG`` in
    ``root``); ``None`` if there is nothing to start. It never fails the week: a worker it could not start is
    one a step starts, and reports, itself."""
    if count <= 0:
        return None
    root.mkdir(parents=True, exist_ok=True)
    with open(root / PRESTART_LOG, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "fleet.scraping.pool", "prestart",
                                 str(root / ("shared" if shared else "own")), str(count), chromium,
                                 str(browser_dir or ""), node_cache],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)


def stop_prestart(proc: subprocess.Popen | None) -> None:
    """Stop a prestart process that is still starting workers (SIGTERM: the worker it is starting is killed
    and its files cleared, see ``_start``; one the zygote forks at that very instant, before its pid is known,
    finds no lock of its own and leaves when its idle time is up). The workers it already started stay, idle.
    Idempotent."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _prestart_main(directory: str, count: str, chromium: str, browser_dir: str, node_cache: str) -> int:
    def on_term(signum, _frame):
        raise SystemExit(128 + signum)  # unwinds through _start, which kills the worker it was starting

    signal.signal(signal.SIGTERM, on_term)
    began = time.monotonic()
    try:
        started = prestart(Path(directory), int(count), chromium=chromium,
                           browser_dir=Path(browser_dir) if browser_dir else None, node_cache=node_cache,
                           startup_limit=browser_startup_s())
    except WorkerStartError as exc:
        print(f"prestart {os.getpid()}: {exc}", file=sys.stderr)
        return 1
    print(f"prestart {os.getpid()}: {started} idle worker(s) started in {time.monotonic() - began:.1f}s",
          file=sys.stderr)
    return 0


def _kinds(root: Path) -> list[Path]:
    return [d for d in root.iterdir() if d.is_dir()] if root.exists() else []


def stop_idle(root: Path) -> int:
    """Stop the warm workers under ``root`` that no step is using now (``fleet run`` calls this when its week is
    done); return how many were stopped."""
    stopped = []
    for directory in _kinds(root):
        for wid in _worker_ids(directory):
            try:
                fd = os.open(directory / f"{wid}.lock", os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            pid = _read_pid(directory, wid)
            if pid is not None and alive(pid):
                kill_tree(pid)
                stopped.append(pid)
            _remove(directory, wid)
            os.close(fd)
    _wait_gone(stopped)  # so that their leases on the shared browser no longer count
    zygote.stop(root)
    _clear_exit_files(root)
    sweep_tmp(tmp_root(root))  # the killed workers' browser profiles, and any left by a worker killed earlier
    return len(stopped)


def _clear_exit_files(root: Path) -> None:
    """The zygote writes ``ID.exit`` when it reaps a worker, which can be after the worker's other files are
    gone; those of workers no step can ask about any more are cleared here."""
    for directory in _kinds(root):
        for exit_file in directory.glob("*.exit"):
            if not (directory / f"{exit_file.name[:-len('.exit')]}.lock").exists():
                exit_file.unlink(missing_ok=True)


def stop(root: Path) -> None:
    """Stop every warm worker under ``root``, in use or not (the tests clean up with this)."""
    stopped = []
    for directory in _kinds(root):
        for pid_file in directory.glob("*.pid"):
            wid = pid_file.name[:-len(".pid")]
            pid = _read_pid(directory, wid)
            if pid is not None and alive(pid):
                kill_tree(pid)
                stopped.append(pid)
            _remove(directory, wid)
    _wait_gone(stopped)
    zygote.stop(root)
    _clear_exit_files(root)
    sweep_tmp(tmp_root(root))


# --- the worker -------------------------------------------------------------------------------------------

def _retire_if_unclaimed(directory: Path, wid: str) -> bool:
    """Idle for long enough: leave, unless a step has just locked this worker to use it."""
    try:
        fd = os.open(directory / f"{wid}.lock", os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _remove(directory, wid)
    os.close(fd)
    return True


def _abort(directory: Path, wid: str) -> None:
    """The step this source runs for is gone: so is the source, with this worker, its driver and browser."""
    _remove(directory, wid)
    kill_pids(descendants(os.getpid()))
    os._exit(1)


def _playwright_task(task: asyncio.Task) -> bool:
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and f"{os.sep}playwright{os.sep}" in code.co_filename


def _left_behind(tasks_before: set, threads_before: set,
                 processes_before: dict[int, int]) -> tuple[list[str], dict[int, int]]:
    """Tasks, threads and processes a scraper started and did not finish: a reason not to reuse this process.
    The tasks are cancelled and the processes killed. The processes are this worker's group and descendants
    (``procs.group_and_descendants``, pid -> process group) that were not there before the source: a scraper's
    children are in the group, or in a session of their own if it started them so (``start_new_session``), and
    are descendants either way. A new process in a group that was there before, other than the worker's, is
    not the scraper's: a browser of the worker's own starts renderers in Chromium's group. Also returns what
    it found: when nothing was left behind, that is the next source's ``processes_before``."""
    current = asyncio.current_task()
    me = os.getpid()
    found = group_and_descendants(me)
    groups_before = set(processes_before.values()) - {me}
    processes = [pid for pid, group in found.items()
                 if pid != me and pid not in processes_before and (group == me or group not in groups_before)]
    names = {pid: _command(pid) for pid in processes}
    kill_pids(processes)
    tasks = [t for t in asyncio.all_tasks() if t is not current and t not in tasks_before and not t.done()
             and not _playwright_task(t)]
    for t in tasks:
        t.cancel()
    threads = [t for t in threading.enumerate()
               if t not in threads_before and not t.name.startswith("asyncio_") and t.is_alive()]
    return ([f"task {t.get_name()}" for t in tasks] + [f"thread {t.name}" for t in threads]
            + [f"process {pid} ({names[pid]}, now killed)" for pid in processes]), found


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120] or "?"
    except OSError:
        return "?"


async def _serve_one(conn: socket.socket, browser, served: int, cap: int, directory: Path, wid: str,
                     group: dict[int, int] | None = None) -> tuple[bool, dict[int, int] | None]:
    """One source on one connection: whether this worker may take another, and its process group and
    descendants after this source (None if not known). ``group`` is that of the source before, if this worker
    served one: a worker is reused only when its source left no process behind, so that is unchanged since,
    and one scan of /proc per source does (each reads every process's stat: ~2-5 ms at a week's 70-150
    processes)."""
    from fleet.scraping import worker
    from fleet.scraping.discovery import module_name_for

    loop = asyncio.get_running_loop()
    conn.setblocking(True)
    conn.settimeout(CONNECT_TIMEOUT_S)
    try:
        conn.sendall(f"{GREETING} {os.getpid()} {served}\n".encode())
        with conn.makefile("r", encoding="utf-8") as reader:
            request = reader.readline().strip()
    except OSError:
        request = ""
    if not request:  # the step went away before asking for anything
        conn.close()
        return True, group
    conn.settimeout(None)
    out = conn.makefile("w", buffering=1, encoding="utf-8", errors="replace")
    request = json.loads(request)
    spec = json.loads(Path(request["spec"]).read_text())
    # The step's world, not the one of whichever step started this worker.
    os.environ.clear()
    os.environ.update(request["env"])
    with contextlib.suppress(OSError):
        os.chdir(request["cwd"])
    sys.modules.pop(module_name_for(Path(spec["module_path"])), None)  # its code as it is now
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = out
    logging.basicConfig(level=logging.INFO, stream=out, format="%(message)s", force=True)

    def lifeline():
        try:
            data = conn.recv(1, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            _abort(directory, wid)

    tasks_before, threads_before = set(asyncio.all_tasks()), set(threading.enumerate())
    processes_before = group if group is not None else group_and_descendants(os.getpid())
    loop.add_reader(conn.fileno(), lifeline)
    stays = False
    try:
        try:
            result = await worker.scrape(browser, spec)
        except Exception as exc:  # the module did not load, or the browser would not open a context
            result = worker.failure_result(spec, exc)
        finally:
            loop.remove_reader(conn.fileno())
        worker.write_result(spec, result)
        await asyncio.sleep(0)
        left, group = _left_behind(tasks_before, threads_before, processes_before)
        stays = (result.get("status") in ("ok", "empty") and browser.is_connected() and not left
                 and served + 1 < cap)
        if left:
            print(f"warm worker {os.getpid()}: the scraper left {', '.join(left)} running; this worker will not "
                  f"be reused", file=out)
        out.write(f"\n{DONE} {'reuse' if stays else 'retire'}\n")
        out.flush()
    finally:
        sys.stdout, sys.stderr = saved
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s", force=True)
        for closeable in (out, conn):
            with contextlib.suppress(OSError):
                closeable.close()
    return stays, group


async def _serve(directory: Path, wid: str, chromium: str, browser_dir: Path | None, node_cache: str) -> None:
    from fleet.scraping import browser as shared_browser
    from fleet.scraping import worker

    spec = {"chromium": chromium, "node_cache": node_cache}
    if browser_dir is not None:
        spec["shared_endpoint"] = shared_browser.acquire(browser_dir, chromium)  # held until this worker exits
    # after the shared browser's host may have been started from here (it must not inherit this worker's TMPDIR),
    # before the driver starts: its browser's profile goes there
    private_tmp(tmp_root(directory.parent))
    loop = asyncio.get_running_loop()
    idle_limit, cap = worker_idle_s(), worker_max_sources()
    async with worker.open_browser(spec) as browser:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = directory / f".{wid}.sock"
        tmp.unlink(missing_ok=True)
        with unix_address(tmp) as address:
            listener.bind(address)
        os.chmod(tmp, 0o600)  # only this user's steps may hand it work
        listener.listen(4)
        os.replace(tmp, directory / f"{wid}.sock")  # appears only once the browser is up
        listener.setblocking(False)
        served, idle_since, group = 0, time.monotonic(), None
        try:
            while browser.is_connected():
                try:
                    conn, _ = await asyncio.wait_for(loop.sock_accept(listener), timeout=1.0)
                except asyncio.TimeoutError:
                    if time.monotonic() - idle_since >= idle_limit and _retire_if_unclaimed(directory, wid):
                        break
                    continue
                stays, group = await _serve_one(conn, browser, served, cap, directory, wid, group)
                if not stays:
                    break
                served += 1
                idle_since = time.monotonic()
        finally:
            listener.close()
            (directory / f"{wid}.sock").unlink(missing_ok=True)


def serve(directory: Path, wid: str, chromium: str, browser_dir: str, node_cache: str) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s", force=True)
    try:
        asyncio.run(_serve(directory, wid, chromium, Path(browser_dir) if browser_dir else None, node_cache))
    finally:
        sweep_tmp(tmp_root(directory.parent), killed=(os.getpid(),))  # its own: the browser is closed or gone
        if browser_dir:
            from fleet.scraping import browser as shared_browser
            shared_browser.release(Path(browser_dir))
        (directory / f"{wid}.sock").unlink(missing_ok=True)
        (directory / f"{wid}.pid").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "serve":
        sys.exit(serve(Path(sys.argv[2]), *sys.argv[3:]))
    if len(sys.argv) == 7 and sys.argv[1] == "prestart":
        sys.exit(_prestart_main(*sys.argv[2:]))
    sys.exit("usage: python -m fleet.scraping.pool serve DIR ID CHROMIUM BROWSER_DIR NODE_CACHE\n"
             "       python -m fleet.scraping.pool prestart DIR COUNT CHROMIUM BROWSER_DIR NODE_CACHE")
