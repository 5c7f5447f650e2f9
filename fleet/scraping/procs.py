"""Process-tree helpers shared by the runner (killing a worker), the warm worker pool and the shared browser."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path


def stat_fields(pid: int | str) -> list[str] | None:
    """``/proc/PID/stat`` from its third field on (the state, the parent's pid, ...; ``proc(5)`` numbers them
    from 1, so field N is ``[N - 3]`` here), or None when there is no such process. The command name (field 2) is
    in parentheses and may hold spaces or ')', so the split is after the last one."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, read from /proc (children first found, then theirs)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(entry)
        try:
            ppid = int(fields[1])
        except (TypeError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def kill_pids(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``, every descendant (Playwright's driver; Chromium, which Playwright starts in a group of its
    own) and ``pid``'s process group."""
    kill_pids([pid, *descendants(pid)])
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _start_time(pid: int | str) -> str | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22): with the pid, it names one
    process, even after the pid is reused."""
    fields = stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def private_tmp(base: Path) -> Path:
    """Give this process a temporary directory of its own, ``base/PID-STARTTIME``, and point ``TMPDIR`` at it, so that
    what it starts from now on writes there: Playwright's driver creates each browser's profile
    (``playwright_chromiumdev_profile-*``) and artifacts folder (``playwright-artifacts-*``) under it. The driver
    removes them when the browser closes; when the process is killed instead (a timeout, a crash, ``fleet run``
    stopping its idle workers), nothing would, and each such browser left ~0.2 MB in /tmp for good.
    :func:`sweep_tmp` removes the directories of processes that are gone."""
    own = base / f"{os.getpid()}-{_start_time(os.getpid())}"
    shutil.rmtree(own, ignore_errors=True)
    own.mkdir(parents=True, mode=0o700)
    os.environ["TMPDIR"] = str(own)
    import tempfile
    tempfile.tempdir = None  # Python's own temporary files follow TMPDIR too
    return own


def sweep_tmp(base: Path, killed=()) -> int:
    """Remove the :func:`private_tmp` directories under ``base`` whose process is gone, or is one of ``killed`` (just
    sent SIGKILL, so about to be); return how many."""
    try:
        entries = list(os.scandir(base))
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        pid, _, started = entry.name.partition("-")
        if not (pid.isdigit() and started and entry.is_dir(follow_symlinks=False)):
            continue
        if int(pid) not in killed and alive(int(pid)) and _start_time(pid) == started:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    return removed


class PolledProcess:
    """``subprocess.Popen.wait`` for a process handle that only knows how to ``poll`` (a worker forked by the
    runner, or by the zygote)."""

    pid: int
    returncode: int | None = None

    def poll(self) -> int | None:  # pragma: no cover - every subclass has its own
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode
