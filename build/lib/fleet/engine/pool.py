"""Leasing browser hosts: a step takes an idle host (or starts one) for one source, and gives it back.

A browser host (fleet/engine/host.py) keeps Playwright's driver and its own Chromium between sources, so a
source does not pay their start-up (~3 CPU-s on the 2-core machine of BENCHMARKS.md). Each source still gets a
fresh browser context, a fresh import of its module and its step's environment, and the same hard limit: at its
timeout the step kills the host with its driver and browser. A host is reused only after a clean finish; it
leaves after ``EngineSettings.max_sources`` sources or ``idle_s`` seconds with nothing to do.

A new host is a new interpreter, ``python -m fleet.engine.host``, in a session of its own. Its files are
described below; its temporary files (its browser's profile among them) are in a folder
of its own under :func:`tmp_root`, removed by whoever kills it and by the host as it leaves.

Protocol, one connection per source: the host greets with ``fleet-browser-host PID SERVED``, the step sends one
JSON line: the path of the attempt's spec (fleet/engine/spec.py), its environment and working directory.
The host streams the attempt's log lines back, then a done line that says whether it stays. The connection is
also the lifeline: if the step dies mid-source, the host sees it close and exits with its browser.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from fleet import config
from fleet.errors import FleetError
from fleet.engine import sandbox
from fleet.engine.procs import alive, kill_tree, sweep_tmp, tmp_base, unix_address
from fleet.engine.sandbox import Sandbox
from fleet.engine.settings import EngineSettings

GREETING = "fleet-browser-host"
DONE = "\x1efleet-browser-host-done"
CONNECT_TIMEOUT_S = 10.0

# A host's files in the hosts' folder, per host ``ID``: ``ID.lock`` (its flock held by the step using the host;
# taken without waiting, so one host serves one source at a time), ``ID.pid``, ``ID.sock`` (its socket, created once
# its browser is up) and ``ID.log`` (what it writes between sources). A host being started has only ``.ID.lock``
# until its starter renames it into place, already locked.
# ``ID.view`` holds the jail's plan the host runs in (fleet/engine/sandbox.py), if any: only a step whose sandbox
# has the same plan takes that host, as only then are its source's folders in the host's view.
KINDS = ("lock", "pid", "sock", "log", "view")


def paths(directory: Path, wid: str) -> dict[str, Path]:
    return {k: directory / f"{wid}.{k}" for k in KINDS}


def remove(directory: Path, wid: str) -> None:
    for path in paths(directory, wid).values():
        path.unlink(missing_ok=True)


def read_pid(directory: Path, wid: str) -> int | None:
    try:
        return int((directory / f"{wid}.pid").read_text())
    except (OSError, ValueError):
        return None


def host_ids(directory: Path) -> list[str]:
    """The hosts of ``directory``, by their ``ID.lock`` files, in name order. A host being started (``.ID.lock``)
    is left out: pathlib's ``*`` matches names beginning with a dot, and a step that locked such a file in the
    instant before its starter did would take it for a dead host and clear it away."""
    if not directory.is_dir():
        return []
    return sorted(p.name[:-len(".lock")] for p in directory.glob("*.lock") if not p.name.startswith("."))


def try_lock(directory: Path, wid: str) -> int | None:
    """The host's lock, taken without waiting: its descriptor (closing it unlocks), or None if another process
    holds it or the host's files are gone."""
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
    return fd


# The hosts this process started, by pid: a step that runs several sources (Dagster's step reuse) can then say
# how one of them ended in a later lease too, and reaps it.
_children: dict[int, subprocess.Popen] = {}


class HostStartError(FleetError):
    """A new host exited or did not get its browser up in time (an infra failure)."""


def tmp_root(hosts_dir: Path, uid: int | None = None) -> Path:
    """Where the hosts of ``hosts_dir`` running as ``uid`` keep their temporary folders (procs.private_tmp)."""
    return tmp_base(hosts_dir, uid)


def sweep_all_tmp(hosts_dir: Path, killed=()) -> None:
    """:func:`procs.sweep_tmp` for the hosts of ``hosts_dir`` of every user (fleet's own, the sandbox's)."""
    own = tmp_root(hosts_dir)
    for base in {own, *own.parent.glob("fleet-*-" + own.name.rsplit("-", 1)[1])}:
        sweep_tmp(base, killed=killed)


class Lease:
    """A browser host held by one step for one source, with the subset of ``subprocess.Popen`` the runner uses
    (``pid``, ``stderr``, ``poll``, ``wait``, ``returncode``). :meth:`release` gives it back."""

    def __init__(self, directory: Path, wid: str, pid: int, served: int, conn: socket.socket, reader, lock_fd: int,
                 new: bool):
        self.directory, self.wid, self.pid, self.served, self.new = directory, wid, pid, served, new
        self.popen = _children.get(pid)  # only the process that started the host learns how it ended
        self.returncode: int | None = None
        self.finished: str | None = None  # "reuse" or "retire", once the host said it is done
        self._conn, self._reader, self._lock_fd = conn, reader, lock_fd
        self._ended = threading.Event()

    def start(self, spec_path: Path, env: dict[str, str], cwd: str) -> None:
        """Run the attempt of ``spec_path`` with the step's environment and working directory. They go over the
        socket, never to disk: the environment may hold secrets (FLEET_GIT_TOKEN, a site's password)."""
        self._conn.sendall((json.dumps({"spec": str(spec_path), "env": env, "cwd": cwd}) + "\n").encode())

    @property
    def stderr(self):
        """The attempt's log lines, up to the host's done line or its end."""
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
            else:
                self.returncode = -1  # not this process's child: how it ended is not known here
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"browser host {self.pid}", timeout)
        return self.poll()

    def exit_reason(self) -> str:
        code = self.poll()
        if code is None or (code == -1 and self.popen is None):
            return "it was started by another process, so its exit status is unknown here"
        return f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"

    def release(self) -> None:
        """Give the host back if it said it stays; otherwise make sure it is gone and clear its files."""
        for closeable in (self._reader, self._conn):
            with contextlib.suppress(OSError):
                closeable.close()
        if self.finished != "reuse":
            if self.finished is None:  # killed at its limit, or died: nothing of it may live on
                kill_tree(self.pid)
                sweep_all_tmp(self.directory, killed=(self.pid,))  # its browser's profile
            remove(self.directory, self.wid)
            if self.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(5)
                    _children.pop(self.pid, None)
        os.close(self._lock_fd)  # unlocks


def _connect(directory: Path, wid: str, pid: int, lock_fd: int, new: bool) -> Lease:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        with unix_address(directory / f"{wid}.sock") as address:
            conn.connect(address)
        reader = conn.makefile("r", encoding="utf-8", errors="replace")
        word, said_pid, served = reader.readline().split()
        if word != GREETING or int(said_pid) != pid:
            raise ValueError(f"unexpected greeting from browser host {wid}")
        conn.settimeout(None)
    except BaseException:
        conn.close()
        raise
    return Lease(directory, wid, pid, int(served), conn, reader, lock_fd, new)


def _view(directory: Path, wid: str) -> str:
    try:
        return (directory / f"{wid}.view").read_text()
    except OSError:
        return ""


def _try_take(directory: Path, wid: str, plan: str = "") -> Lease | None:
    if _view(directory, wid) != plan:
        return None  # a host that sees other folders (its sandbox's jail was planned for other sources)
    fd = try_lock(directory, wid)
    if fd is None:
        return None
    pid = read_pid(directory, wid)
    if pid is not None and alive(pid) and not (directory / f"{wid}.sock").exists():
        os.close(fd)  # still starting up for a step that gave up on it; it will idle out
        return None
    if pid is not None and alive(pid):
        try:
            return _connect(directory, wid, pid, fd, False)
        except (OSError, ValueError):
            kill_tree(pid)  # alive but not answering: it is ours to clear, we hold its lock
    remove(directory, wid)
    os.close(fd)
    return None


def lease(settings: EngineSettings, box: Sandbox | None = None) -> Lease:
    """An idle browser host of ``settings.hosts_dir``, or a new one once its browser is up. Raises
    ``HostStartError``."""
    directory = settings.hosts_dir
    directory.mkdir(parents=True, exist_ok=True)
    for pid, popen in list(_children.items()):  # reap the ones that left since
        if popen.poll() is not None:
            del _children[pid]
    box = box or Sandbox()
    for wid in host_ids(directory):
        taken = _try_take(directory, wid, box.plan)
        if taken is not None:
            return taken
    return _start(settings, box)


def _start(settings: EngineSettings, box: Sandbox) -> Lease:
    """A new host, leased to the caller once its browser is up; as the sandbox's user when it has one."""
    directory = settings.hosts_dir
    wid = uuid.uuid4().hex[:12]
    files = paths(directory, wid)
    # The lock appears already held (renamed into place), so no other step can take a half-started host.
    tmp_lock = directory / f".{wid}.lock"
    fd = os.open(tmp_lock, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    popen = None
    try:
        home = sandbox.prepare(box, settings)
        with open(files["log"], "ab") as log:
            # the host removes its own files as it leaves, and locks its lock file to retire
            sandbox.hand_over_files(box, directory, tmp_lock, files["log"])
            popen = subprocess.Popen(sandbox.command(box, [
                sys.executable, "-m", "fleet.engine.host", str(directory), wid, settings.chromium,
                repr(float(settings.idle_s)), str(settings.max_sources), str(settings.node_cache or "")]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                env=sandbox.attempt_env(config.process_env(), box, home))
        _children[popen.pid] = popen
        if box.plan:
            files["view"].write_text(box.plan)
        files["pid"].write_text(str(popen.pid))
        sandbox.hand_over_files(box, files["pid"])
        os.replace(tmp_lock, files["lock"])
        deadline = time.monotonic() + settings.startup_s
        while not files["sock"].exists():
            if popen.poll() is not None:
                tail = files["log"].read_text(errors="replace")[-2000:]
                raise HostStartError(f"the browser host exited with code {popen.returncode} before its browser "
                                       f"was up:\n{tail}")
            if time.monotonic() > deadline:
                raise HostStartError(f"the browser did not start within {settings.startup_s:g}s")
            time.sleep(0.02)
        return _connect(directory, wid, popen.pid, fd, True)
    except BaseException as exc:
        if popen is not None:
            kill_tree(popen.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(5)
                _children.pop(popen.pid, None)
        remove(directory, wid)
        tmp_lock.unlink(missing_ok=True)
        os.close(fd)
        if isinstance(exc, (OSError, ValueError)):
            raise HostStartError(f"the new browser host did not answer: {exc}") from exc
        raise


def _stop_host(hosts_dir: Path, wid: str, stopped: list[int]) -> None:
    """Kill host ``wid`` with its browser if it lives (its pid added to ``stopped``), and clear its files."""
    pid = read_pid(hosts_dir, wid)
    if pid is not None and alive(pid):
        kill_tree(pid)
        stopped.append(pid)
    remove(hosts_dir, wid)


def stop_idle(hosts_dir: Path) -> int:
    """Stop the browser hosts of ``hosts_dir`` that no step is using now (their lock is free), and clear their
    files; return how many were stopped. Hosts leave by themselves after ``idle_s``; this is for a caller that
    is done with them sooner (a benchmark between its runs)."""
    stopped = []
    for wid in host_ids(hosts_dir):
        fd = try_lock(hosts_dir, wid)
        if fd is None:
            continue
        _stop_host(hosts_dir, wid, stopped)
        os.close(fd)
    _wait_gone(stopped)
    sweep_all_tmp(hosts_dir)  # the killed hosts' browser profiles, and any a host killed earlier left
    return len(stopped)


def stop(hosts_dir: Path) -> int:
    """Stop every browser host of ``hosts_dir``, in use or not, and clear their files; return how many ran (the
    tests clean up with this)."""
    stopped = []
    if hosts_dir.is_dir():
        for pid_file in hosts_dir.glob("*.pid"):
            _stop_host(hosts_dir, pid_file.name[:-len(".pid")], stopped)
    _wait_gone(stopped)
    sweep_all_tmp(hosts_dir)
    return len(stopped)


def _wait_gone(pids: list[int], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
