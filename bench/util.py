"""Shared helpers: run a child process and measure its wall time, CPU and peak RSS (whole waited tree)."""
from __future__ import annotations

import contextlib

import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


_SUBREAPER = False


def _become_subreaper() -> None:
    """Orphaned descendants (double-forked run workers, browsers) re-parent to this process, so they are
    reaped here and their CPU is counted (PR_SET_CHILD_SUBREAPER)."""
    global _SUBREAPER
    if not _SUBREAPER:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
        _SUBREAPER = True


def _children(pid: int) -> list[int]:
    # The kernel's per-thread child lists, not fleet.engine.procs.descendants: that reads every /proc entry,
    # too much to do ten times a second beside the command being measured.
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class PeakSampler(threading.Thread):
    """The largest VmHWM of any one process in a command's tree, sampled every ``period_s``.

    ``ru_maxrss`` cannot give this: a child started by fork or vfork and exec keeps its parent's high-water mark
    in it, so every process the bench starts reports at least the bench's own RSS at that moment. VmHWM belongs
    to the process's current program and starts afresh at exec. A process that reaches its peak in the last
    ``period_s`` of its life can be under-read by that much growth; the commands measured here live for seconds."""

    def __init__(self, root: int, period_s: float = 0.1):
        super().__init__(daemon=True)
        self.root, self.period_s, self.peak_kb = root, period_s, 0
        self._before = set(_children(os.getpid())) - {root}  # the bench's other children (a demo site server)
        self._stop_event = threading.Event()

    def sample(self) -> None:
        todo = [self.root] + [c for c in _children(os.getpid()) if c not in self._before]  # with re-parented orphans
        seen: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid not in seen:
                seen.add(pid)
                self.peak_kb = max(self.peak_kb, _hwm_kb(pid))
                todo += _children(pid)

    def run(self) -> None:
        while not self._stop_event.wait(self.period_s):
            self.sample()

    def stop(self) -> float:
        self._stop_event.set()
        self.join(timeout=5)
        return self.peak_kb / 1024


def run_measured(cmd: list[str], *, env: dict | None = None, cwd: str | Path | None = None,
                 check: bool = True, linger_s: float = 60.0) -> dict:
    """Run ``cmd``; return wall seconds (until the command exits), user+sys CPU seconds of the whole process
    tree (this process is a child subreaper, so orphans are reaped here too; summed os.wait4 rusage, the
    same accounting as RUSAGE_CHILDREN), the peak RSS (MB) of its largest process (:class:`PeakSampler`; the
    floored ``ru_maxrss`` is kept as ``ru_maxrss_mb``), exit code, output, and when it was spawned (``started_unix``)."""
    _become_subreaper()
    full_env = {**os.environ, **(env or {})}
    chunks: list[bytes] = []
    started, started_unix = time.perf_counter(), time.time()
    proc = subprocess.Popen(cmd, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: proc.stdout.read(65536), b"")), daemon=True)
    reader.start()
    sampler = PeakSampler(proc.pid)
    sampler.sample()
    sampler.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu, maxrss = ru.ru_utime + ru.ru_stime, ru.ru_maxrss
    # Reap descendants that outlived the command (re-parented to us); wait up to linger_s for them.
    deadline = time.monotonic() + linger_s
    lingered = 0
    while True:
        try:
            pid, st, r = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
            continue
        lingered += 1
        cpu += r.ru_utime + r.ru_stime
        maxrss = max(maxrss, r.ru_maxrss)
    peak_mb = sampler.stop()
    reader.join(timeout=5)
    text = b"".join(chunks).decode(errors="replace")
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{text[-3000:]}")
    return {"wall": wall, "cpu": cpu, "peak_rss_mb": peak_mb, "ru_maxrss_mb": maxrss / 1024, "rc": proc.returncode,
            "output": text, "reaped_orphans": lingered, "started_unix": started_unix}


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def rnd(x, n=3):
    return round(float(x), n)


@contextlib.contextmanager
def environ(**changes: str):
    """``os.environ`` with ``changes`` inside the block, and exactly as it was after it: for a setting a bench needs
    in its own process for a moment (scale_out reading its instance's dagster.yaml, which names its Postgres)."""
    before = dict(os.environ)
    os.environ.update(changes)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


def process_state() -> dict:
    """What one bench could leave behind for the next in this process: the environment, the working folder and
    ``sys.path`` (a FLEET_POSTGRES_URL left set once made the next bench's FLEET_HOME name a Postgres that was gone)."""
    return {"env": dict(os.environ), "cwd": os.getcwd(), "path": list(sys.path)}


def restore(before: dict) -> list[str]:
    """Put the process back as :func:`process_state` found it; return what had changed (variables by name only:
    their values may be secrets), empty when nothing had."""
    env, was = dict(os.environ), before["env"]
    left = [f"{k} {'changed' if k in was else 'set'}" for k in sorted(env) if was.get(k) != env[k]]
    left += [f"{k} unset" for k in sorted(set(was) - set(env))]
    if left:
        os.environ.clear()
        os.environ.update(was)
    try:
        cwd = os.getcwd()
    except FileNotFoundError:  # a folder the bench removed
        cwd = None
    if cwd != before["cwd"]:
        left.append(f"working folder {cwd}")
        os.chdir(before["cwd"])
    if sys.path != before["path"]:
        left.append("sys.path")
        sys.path[:] = before["path"]
    return left
