"""Shared helpers: run a child process and measure its wall time, CPU and peak RSS (whole waited tree)."""
from __future__ import annotations

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


def run_measured(cmd: list[str], *, env: dict | None = None, cwd: str | Path | None = None,
                 check: bool = True, linger_s: float = 60.0) -> dict:
    """Run ``cmd``; return wall seconds (until the command exits), user+sys CPU seconds of the whole process
    tree (this process is a child subreaper, so orphans are reaped here too; summed os.wait4 rusage, the
    same accounting as RUSAGE_CHILDREN), the largest ru_maxrss (MB) of any process in it, exit code, output."""
    _become_subreaper()
    full_env = {**os.environ, **(env or {})}
    chunks: list[bytes] = []
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: proc.stdout.read(65536), b"")), daemon=True)
    reader.start()
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
    reader.join(timeout=5)
    text = b"".join(chunks).decode(errors="replace")
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{text[-3000:]}")
    return {"wall": wall, "cpu": cpu, "maxrss_mb": maxrss / 1024, "rc": proc.returncode, "output": text,
            "reaped_orphans": lingered}


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def rnd(x, n=3):
    return round(float(x), n)
