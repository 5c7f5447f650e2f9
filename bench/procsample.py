"""`python -m bench.procsample CMD...`: run CMD, sample every process's CPU from /proc every 0.2 s, and print
CPU-seconds by kind of process (Chromium's browser, renderers and GPU process, Playwright's Node driver, Dagster's
forkserver and steps, ...), then the 12 biggest processes.

It counts CPU only from processes it saw, and at most 0.2 s of a short one's life is missed. Other activity on
the machine is included too: use it to find where the time goes, not to compare.
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")
CHROMIUM_KINDS = ("--type=renderer --top-chrome-webui", "--type=renderer", "--type=gpu-process", "--type=utility",
                  "--type=zygote", "crashpad")


def kind(args: list[str]) -> str:
    line = " ".join(args)
    if not line.strip():
        return "kernel thread or zombie"
    for marker, name in (("fleet.engine.host", "python warm worker"),
                         ("fleet.engine.attempt", "python worker of one attempt"),
                         ("playwright/driver/node", "playwright node driver")):
        if marker in line:  # before "chromium": their command lines name the Chromium binary
            return name
    if "chromium" in line:
        return "chromium " + next((k for k in CHROMIUM_KINDS if k in line), "browser")
    for marker, name in (("forkserver", "python forkserver, steps, forked workers"),
                         ("fleet.engine.attempt", "python worker (new interpreter)"),
                         ("bin/fleet", "python fleet command (run worker)"), ("git", "git")):
        if marker in line:
            return name
    return "other " + args[0][-40:]


def snapshot() -> dict[tuple[str, str], tuple[float, list[str]]]:
    """(pid, start time) -> (CPU seconds so far, command line) of every process now."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                stat = fh.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline") as fh:
                args = fh.read().split("\0")
        except OSError:
            continue
        out[(pid, stat[19])] = ((int(stat[11]) + int(stat[12])) / TICKS, args)
    return out


def main(cmd: list[str]) -> int:
    before = {key: cpu for key, (cpu, _) in snapshot().items()}
    seen: dict[tuple[str, str], tuple[float, list[str]]] = {}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        for key, (cpu, args) in snapshot().items():
            used = cpu - before.get(key, 0.0)
            old = seen.get(key)
            seen[key] = (max(used, old[0] if old else 0.0), args if args != [""] or not old else old[1])
        time.sleep(0.2)
    totals, counts = collections.Counter(), collections.Counter()
    for cpu, args in seen.values():
        totals[kind(args)] += cpu
        counts[kind(args)] += 1
    for name, cpu in totals.most_common():
        print(f"{cpu:8.1f} CPU-s  {counts[name]:4d} processes  {name}")
    print(f"exit code {proc.returncode}")
    for cpu, args in sorted(seen.values(), key=lambda v: -v[0])[:12]:
        print(f"{cpu:7.2f}  {kind(args)[:40]:40s}  {' '.join(args)[:90]}")
    return proc.returncode


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
