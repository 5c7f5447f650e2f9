"""One run per week, whoever launches it: ``fleet run`` on any host, the UI, the schedule or a sensor.

The run queue (QueuedRunCoordinator, one run per ``dagster/partition``) holds back the runs the daemon launches,
but ``fleet run`` executes its runs itself, and two of them may start 100 ms apart on two machines. So every run
of fleet's jobs claims its week as its executor starts, in the instance that all hosts share: the week belongs
to the oldest of its unfinished runs (the lowest storage id, which the run storage assigns in creation order).
A run that is not the oldest stops before any step, tagged ``fleet/superseded`` with the reason; the
follow-up policy never re-executes it (fleet/policy/followup.py)."""
from __future__ import annotations

import json

from dagster import DagsterRunStatus

from fleet import records
from fleet.defs import runworker
from fleet.errors import FleetError
from fleet.policy import taxonomy as tx

UNFINISHED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
              DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


def holder(instance, run) -> str | None:
    """Why ``run`` may not proceed: the older unfinished run of its week, described; None when it may."""
    week = run.tags.get(tx.PARTITION_TAG)
    mine = records.run_record(instance, run.run_id) if week else None
    if mine is None:
        return None
    older = [r for r in records.run_records(instance, {tx.PARTITION_TAG: week}, UNFINISHED) if r.storage_id < mine.storage_id]
    if not older:
        return None
    other = older[0].dagster_run
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
    why = holder(instance, run)
    if why is not None:
        records.add_tags(instance, run.run_id, {tx.TAG_SUPERSEDED: why})
        raise FleetError(why)
