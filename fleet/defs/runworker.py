"""Who executes a run (its run worker), recorded on the run, and whether that process still lives.

Under ``fleet ui`` a run executes in a worker process that the code server starts; under ``fleet run``, in the
CLI's own process. Dagster's DefaultRunLauncher has no worker health check, so run monitoring never looks at a
STARTED run, and a run whose worker died unseen (a ``kill -9`` of ``fleet ui``, the OOM killer, a reboot) stayed
STARTED for ever, holding its week's place in the run queue.

fleet's executor (fleet/defs/executor.py) records the run worker as the run tag ``fleet/run_worker`` as it starts
the plan: host, boot id, pid and the process's start time (``/proc/PID/stat`` field 22), so a pid the kernel gave
to another process since is not taken for the worker. :func:`worker_health` compares that with ``/proc``; the
run launcher in fleet/defs/compat.py hands its answer to Dagster's run monitoring.

``/proc`` answers only for a worker on the host that asks. For a worker on another host (a `fleet run` on an
operator's machine, the daemon on the server, sharing Postgres), the run worker beats a heartbeat into the
instance, which every host sees: the run tag ``fleet/heartbeat``, rewritten every half monitoring interval
(:func:`heartbeat`). The daemon's launcher remembers, by its own clock, when it first saw each beat (two hosts'
clocks need not agree): a beat that has not changed for :data:`STALE_BEATS` beat periods is a worker that is gone.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

import dataclasses

from fleet import records
from fleet.engine.procs import stat_fields

TAG = "fleet/run_worker"
BEAT_TAG = "fleet/heartbeat"
LOST_TAG = "fleet/worker_lost"  # set by the run launcher's check as run monitoring fails a run whose worker is gone
STALE_BEATS = 8  # beats missed before a worker on another host is taken for gone (4 monitoring intervals)


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


def worker_health(run, started_at: float | None = None, grace_s: float = 0.0, seen: dict | None = None,
                  tag: str = TAG) -> Health:
    """RUNNING while the process ``run``'s :data:`TAG` names is alive, the same process (start time and boot);
    FAILED when it is gone. A worker on another host is judged by its heartbeat (:func:`remote_health`, with
    ``seen`` the asker's memory of the beats it saw). Without the tag: RUNNING for ``grace_s`` after ``started_at`` (the worker
    records itself just after the run starts), then UNKNOWN, which Dagster's run monitoring treats, like
    FAILED, as a dead worker: every run of fleet's jobs records its worker, so a run that has none is
    one whose worker died before doing so, or one started before fleet recorded workers. ``tag``: another run tag
    that names a process the same way (the fleet command that requested the run: fleet/defs/claim.py)."""
    raw = run.tags.get(tag)
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
        return remote_health(run, f"the run's worker (pid {pid}) on host {host}", started_at, grace_s,
                             {} if seen is None else seen, worker_id)
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


def beat_period(run_monitor_s: float) -> float:
    """How often a run worker beats: twice per monitoring interval (FLEET_RUN_MONITOR_S)."""
    return max(0.5, run_monitor_s / 2)


@contextlib.contextmanager
def heartbeat(instance, run_id: str, every: float):
    """While the block runs, rewrite run ``run_id``'s :data:`BEAT_TAG` every ``every`` seconds from a thread of
    its own. A write that fails (the instance's database restarting) is skipped: the next one tries again, and
    the run goes on; only beats missed for :data:`STALE_BEATS` periods make another host take it for gone."""
    stop = threading.Event()

    def beat():
        n = 0
        while True:
            n += 1
            with contextlib.suppress(Exception):
                records.add_tags(instance, run_id, {BEAT_TAG: json.dumps(
                    {"n": n, "at": round(time.time(), 3), "every": every}, sort_keys=True)})
            if stop.wait(every):
                return

    thread = threading.Thread(target=beat, name=f"fleet-heartbeat-{run_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2)  # a write stuck on a dead database must not hold the run's end


def remote_health(run, who: str, started_at: float | None, grace_s: float, seen: dict,
                  worker_id: str) -> Health:
    """The health of ``run``, whose worker (``who``) is on another host, from its heartbeat: RUNNING while the
    beat changes, FAILED once it has not for :data:`STALE_BEATS` beat periods by this host's clock (``seen``
    maps a run id to the beat last seen and when, on ``time.monotonic``, it was first seen). Before its first
    beat, the run has ``grace_s`` after ``started_at``, as a run without a worker tag has."""
    raw = run.tags.get(BEAT_TAG) or ""
    now = time.monotonic()
    last = seen.get(run.run_id)
    if last is None or last[0] != raw:
        seen[run.run_id] = last = (raw, now)
        if len(seen) > 1000:  # runs long finished: forget the oldest
            for key in sorted(seen, key=lambda k: seen[k][1])[:500]:
                seen.pop(key, None)
    if not raw:
        if started_at is None or time.time() - started_at < grace_s:
            return Health("RUNNING", f"{who} has not sent its first heartbeat yet", run_worker_id=worker_id)
        return Health("FAILED", f"{who} sent no heartbeat ({BEAT_TAG} tag) within {grace_s:g} s of the run's "
                      "start: it is gone", run_worker_id=worker_id)
    try:
        beat = json.loads(raw)
        every, n, at = float(beat["every"]), beat.get("n"), beat.get("at")
    except (ValueError, TypeError, KeyError):
        return Health("UNKNOWN", f"the run's {BEAT_TAG} tag is unreadable: {raw!r}", run_worker_id=worker_id)
    still = now - last[1]
    if still < STALE_BEATS * every:
        return Health("RUNNING", run_worker_id=worker_id)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)) if isinstance(at, (int, float)) else "?"
    return Health("FAILED", f"{who} is gone: its heartbeat (beat {n}, sent at {when} by its clock) has not "
                  f"changed for {still:.0f} s, {STALE_BEATS} times its period of {every:g} s", run_worker_id=worker_id)
