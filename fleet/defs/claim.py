"""One run per week, whoever launches it: ``fleet run`` on any host, the UI, the schedule or a sensor.

The run queue (QueuedRunCoordinator, one run per ``dagster/partition``) holds back the runs the daemon launches,
but ``fleet run`` executes its runs itself, and two of them may start 100 ms apart on two machines. So every run
of fleet's jobs claims its week as its executor starts, in the instance that all hosts share: the week belongs
to the oldest of its unfinished runs (the lowest storage id, which the run storage assigns in creation order).
A run that is not the oldest stops before any step, tagged ``fleet/superseded`` with the reason; the
follow-up policy never re-executes it (fleet/policy/followup.py), and the week's status counts nothing of it.

A refused run has still been created, with a planned step and check per asset. So ``fleet run`` asks first, before
it prints or creates anything: :func:`hold_week` (the week's lock on this host, which two commands started together
meet) and :func:`week_holder` (an unfinished run of the week in the instance, from any host or launcher)."""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from fleet.errors import FleetError

HOLDER_WAIT_S = 1.0  # how long a refused command waits for the week lock's holder to write who it is

# Dagster and what reads its records are imported where used: importing them takes ~2 s of a core, and
# :func:`hold_week` refuses a second command of a week before that.


def _unfinished_runs(instance, week: str) -> list:
    from dagster import DagsterRunStatus

    from fleet import records
    from fleet.policy import taxonomy as tx

    return records.run_records(instance, {tx.PARTITION_TAG: week},
                               [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
                                DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING])


def holder(instance, run) -> str | None:
    """Why ``run`` may not proceed: the older unfinished run of its week, described; None when it may."""
    from fleet import records
    from fleet.policy import taxonomy as tx

    week = run.tags.get(tx.PARTITION_TAG)
    mine = records.run_record(instance, run.run_id) if week else None
    if mine is None:
        return None
    older = [r for r in _unfinished_runs(instance, week) if r.storage_id < mine.storage_id]
    return _taken(week, older[0].dagster_run) if older else None


def week_holder(instance, week: str) -> str | None:
    """Why a new run of ``week`` may not start: its oldest unfinished run, described; None when there is none."""
    unfinished = _unfinished_runs(instance, week)
    return _taken(week, min(unfinished, key=lambda r: r.storage_id).dagster_run) if unfinished else None


def _taken(week: str, other) -> str:
    from fleet.defs import runworker
    from fleet.policy import taxonomy as tx

    driver = other.tags.get(tx.TAG_DRIVER) or other.tags.get("dagster/schedule_name") and "schedule" or "the UI or a sensor"
    where = ""
    worker = other.tags.get(runworker.TAG)
    if worker:
        try:
            who = json.loads(worker)
            where = f" on host {who.get('host')} (pid {who.get('pid')})"
        except ValueError:
            pass
    return (f"week {week} is already being run by run {other.run_id} ({other.status.value.lower()}, launched by "
            f"{driver}{where}); not starting a second run of it")


def claim_week(instance, run) -> None:
    """Raise a FleetError, after tagging ``run`` ``fleet/superseded``, when an older run of its week is
    unfinished."""
    from fleet import records
    from fleet.policy import taxonomy as tx

    why = holder(instance, run)
    if why is not None:
        records.add_tags(instance, run.run_id, {tx.TAG_SUPERSEDED: why})
        raise FleetError(why)


@contextlib.contextmanager
def hold_week(home: Path, week: str):
    """This host's commands that run ``week``, one at a time: a lock on ``FLEET_HOME/claims/<week>.lock`` held while
    the command runs. A second is refused at once, naming the first, before it prints or creates anything: two
    `fleet run`s started together would otherwise both find no run of the week, both create one, and the one
    refused leave its planned steps and checks in the week's records. A POSIX record lock (``lockf``): released
    when the process ends however it ends, and not inherited by what it forks (the forkserver, browser hosts),
    which may outlive it."""
    folder = Path(home) / "claims"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{week}.lock", "a+") as fh:
        try:
            fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            # the first may hold the lock and not have written who it is yet: give it a moment to, so the refusal
            # names it
            deadline = time.monotonic() + HOLDER_WAIT_S
            while True:
                fh.seek(0)
                said = fh.read()
                if _holder(said) or time.monotonic() > deadline:
                    raise FleetError(_held(week, said)) from None
                time.sleep(0.05)
        fh.truncate(0)
        fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "since": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}))
        fh.flush()
        try:
            yield
        finally:
            fh.truncate(0)  # while still held: the next refused command never reads a finished holder's name


def _holder(said: str) -> str:
    """`` (pid P on host H, since T)`` from a week lock's text, or "" while its holder has not written it (the
    text is empty, or names a process that is gone: one killed before it could clear it)."""
    try:
        who = json.loads(said)
        os.kill(int(who["pid"]), 0)
        return f" (pid {who['pid']} on host {who['host']}, since {who['since']})"
    except (ValueError, KeyError, TypeError, ProcessLookupError):
        return ""
    except PermissionError:  # alive, another user's
        return f" (pid {who['pid']} on host {who['host']}, since {who['since']})"


def _held(week: str, said: str) -> str:
    where = _holder(said)
    return f"week {week} is already being run by another fleet command{where}; not starting a second run of it"
