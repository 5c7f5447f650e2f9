"""Process-tree helpers shared by the runner (killing a worker), the warm worker pool and the shared browser."""
from __future__ import annotations

import os
import signal
import subprocess
import time


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
