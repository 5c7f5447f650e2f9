"""One run per week, whoever launches it: ``fleet run`` on any host, the UI, the schedule or a sensor.

The run queue (QueuedRunCoordinator, one run per ``dagster/partition``) holds back the runs the daemon launches,
but ``fleet run`` executes its runs itself, and two of them may start 100 ms apart on two machines. So every run
of fleet's jobs claims its week as its executor starts, in the instance that all hosts share: the week belongs
to the oldest of its unfinished runs (the lowest storage id, which the run storage assigns in creation order).
A run that is not the oldest stops before any step, tagged :data:`SUPERSEDED_TAG` with the reason; the
follow-up policy never re-executes it (fleet/policy/followup.py)."""
from __future__ import annotations

import json

from dagster import DagsterRunStatus, RunsFilter

from fleet.errors import FleetError
from fleet.policy import taxonomy as tx

SUPERSEDED_TAG = tx.TAG_SUPERSEDED
UNFINISHED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
              DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


def holder(instance, run) -> str | None:
    """Why ``run`` may not proceed: the older unfinished run of its week, described; None when it may."""
    week = run.tags.get("dagster/partition")
    if not week:
        return None
    mine = instance.get_run_record_by_id(run.run_id)
    older = [r for r in instance.get_run_records(RunsFilter(tags={"dagster/partition": week}, statuses=UNFINISHED))
             if r.dagster_run.run_id != run.run_id and mine is not None and r.storage_id < mine.storage_id]
    if not older:
        return None
    first = min(older, key=lambda r: r.storage_id)
    other = first.dagster_run
    driver = other.tags.get("fleet/driver") or other.tags.get("dagster/schedule_name") and "schedule" or "the UI or a sensor"
    where = ""
    worker = other.tags.get("fleet/run_worker")
    if worker:
        try:
            who = json.loads(worker)
            where = f" on host {who.get('host')} (pid {who.get('pid')})"
        except ValueError:
            pass
    return (f"week {week} is already being run by run {other.run_id} ({other.status.value.lower()}, launched by "
            f"{driver}{where}); not starting a second run of it")


def claim_week(instance, run) -> None:
    """Raise a FleetError, after tagging ``run`` :data:`SUPERSEDED_TAG`, when an older run of its week is
    unfinished."""
    why = holder(instance, run)
    if why is not None:
        instance.add_run_tags(run.run_id, {SUPERSEDED_TAG: why})
        raise FleetError(why)
