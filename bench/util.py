"""Shared helpers: run a child process and measure its wall time, CPU and peak RSS (whole waited tree)."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def run_measured(cmd: list[str], *, env: dict | None = None, cwd: str | Path | None = None,
                 check: bool = True, timeout: float | None = None) -> dict:
    """Run ``cmd``; return wall seconds, user+sys CPU seconds and ru_maxrss (MB) of the child and the
    descendants it waited for (os.wait4 on the child), plus its exit code and captured output tail."""
    full_env = {**os.environ, **(env or {})}
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # Read output in this thread (children are expected to be quiet-ish), then reap with wait4 for rusage.
    out = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = out.decode(errors="replace")
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{text[-3000:]}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "maxrss_mb": ru.ru_maxrss / 1024,
            "rc": proc.returncode, "output": text}


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def rnd(x, n=3):
    return round(float(x), n)
