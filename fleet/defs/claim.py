"""One command per week on a host, and how a week's run is described when a command is refused for it.

One run per week at a time is the run queue's (QueuedRunCoordinator, one run per ``dagster/partition``): every run
of a week, `fleet run`'s too, goes through it (fleet/defs/week.py). The queue holds a second run of a week back; it
never refuses it. fleet's commands promise more: a second `fleet run` of a week is refused at once, in one line
naming the first, before it prints or starts anything. That is :func:`hold_week` on one host, and, for a run from
anywhere else (another host, the UI, the schedule), week.precheck_week with :func:`describe_run`."""
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


def describe_run(week: str, other) -> str:
    """Why a command may not run ``week``: its unfinished run ``other``, launched by whom and where."""
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


def requested_by_gone_command(run) -> bool:
    """Whether ``run`` was requested by a fleet command on this host that is gone (its process, by pid, start time
    and boot, no longer lives): a run left by a killed command, which Dagster's run monitoring and sensors finish."""
    from fleet.defs import runworker
    from fleet.policy import taxonomy as tx

    try:
        host = json.loads(run.tags.get(tx.TAG_REQUESTER) or "").get("host")
    except (ValueError, AttributeError):
        return False
    return host == socket.gethostname() and runworker.worker_health(run, tag=tx.TAG_REQUESTER).status == "FAILED"


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
