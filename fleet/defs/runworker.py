"""Who executes a run (its run worker), recorded on the run, and whether that process still lives.

Under ``fleet ui`` a run executes in a worker process that the code server starts; under ``fleet run``, in the
CLI's own process. Dagster's DefaultRunLauncher has no worker health check, so run monitoring never looks at a
STARTED run, and a run whose worker died unseen (a ``kill -9`` of ``fleet ui``, the OOM killer, a reboot) stayed
STARTED for ever, holding its week's place in the run queue.

fleet's executor (fleet/defs/executor.py) records the run worker as the run tag ``fleet/run_worker`` as it starts
the plan: host, boot id, pid and the process's start time (``/proc/PID/stat`` field 22), so a pid the kernel gave
to another process since is not taken for the worker. :func:`worker_health` compares that with ``/proc``; the
run launcher in fleet/defs/compat.py hands its answer to Dagster's run monitoring.
"""
from __future__ import annotations

import json
import os
import socket
import time

import dataclasses

from fleet import records
from fleet.engine.procs import stat_fields

TAG = "fleet/run_worker"


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, ``/proc/PID/stat`` field 22), or None when there is
    no such process or it has exited and waits to be reaped (a zombie)."""
    fields = stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):  # field 3, the state: exited
        return None
    return int(fields[19])  # field 22


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def identity(pid: int | None = None) -> dict:
    """Who process ``pid`` (default: this one) is, as :data:`TAG` records it."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "boot": boot_id(), "pid": pid, "start": process_start(pid)}


def record_run_worker(instance, run_id: str) -> None:
    """Record this process as the worker of run ``run_id`` (the process that executes its plan)."""
    records.add_tags(instance, run_id, {TAG: json.dumps(identity(), sort_keys=True)})


@dataclasses.dataclass(frozen=True)
class Health:
    """What :func:`worker_health` found: ``status`` is the name of one of Dagster's worker statuses
    (RUNNING, FAILED, UNKNOWN)."""
    status: str
    msg: str | None = None
    run_worker_id: str | None = None


def worker_health(run, started_at: float | None = None, grace_s: float = 0.0) -> Health:
    """RUNNING while the process ``run``'s :data:`TAG` names is alive, the same process (start time and boot);
    FAILED when it is gone. Without the tag: RUNNING for ``grace_s`` after ``started_at`` (the worker
    records itself just after the run starts), then UNKNOWN, which Dagster's run monitoring treats, like
    FAILED, as a dead worker: every run of fleet's jobs records its worker, so a run that has none is
    one whose worker died before doing so, or one started before fleet recorded workers."""
    raw = run.tags.get(TAG)
    if not raw:
        if started_at is not None and time.time() - started_at < grace_s:
            return Health("RUNNING", "the run's worker has not recorded itself yet")
        return Health("UNKNOWN", f"the run's worker recorded no identity ({TAG} tag)")
    try:
        who = json.loads(raw)
        pid, start, host, boot = int(who["pid"]), who.get("start"), who.get("host"), who.get("boot")
    except (ValueError, TypeError, KeyError):
        return Health("UNKNOWN", f"the run's {TAG} tag is unreadable: {raw!r}")
    worker_id = f"{host}:{pid}"
    if host != socket.gethostname():
        return Health("UNKNOWN", f"the run's worker (pid {pid}) is on another host, {host}",
                      run_worker_id=worker_id)
    if boot and boot != boot_id():
        return Health("FAILED", f"the run's worker process (pid {pid}) is gone: "
                      "the machine has rebooted since it started", run_worker_id=worker_id)
    now_start = process_start(pid)
    if now_start is None:
        return Health("FAILED", f"the run's worker process (pid {pid}) is gone",
                      run_worker_id=worker_id)
    if start is not None and now_start != start:
        return Health("FAILED", f"the run's worker process (pid {pid}) is gone "
                      f"(pid {pid} is now another process, started at tick {now_start}, "
                      f"not {start})", run_worker_id=worker_id)
    return Health("RUNNING", run_worker_id=worker_id)
