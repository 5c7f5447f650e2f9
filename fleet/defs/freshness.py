"""Freshness per week: each raw asset's ``fresh_week`` check passes when the week that is due (the newest week whose
FLEET_FRESHNESS_DEADLINE has passed, fleet/policy/freshness.py) has a materialization of that asset's partition,
whatever older or newer partitions did.

Dagster's ``FreshnessPolicy`` judges from the asset's latest materialization of any partition, so a backfilled old
week made a source look fresh while this week's partition was missing; its ``build_time_partition_freshness_checks``
expects the partitions' last window, which for fleet's partitions (``end_offset=1``) is the week in progress. So the
check is fleet's own, run weekly at the deadline by the ``fleet_freshness`` schedule (or from the UI)."""
# No `from __future__ import annotations`: Dagster inspects the check function's annotations at runtime.

import datetime as dt

from dagster import (
    AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey, AssetSelection,
    DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, define_asset_job, multi_asset_check, schedule,
)

from fleet import records
from fleet.policy.freshness import due_week
from fleet.weeks import Deadline, utc_now

FRESH_CHECK = "fresh_week"
AS_OF_TAG = "fleet/as_of"  # the moment a run of the check judges at: its schedule's tick (else now)


def deadline_cron(deadline: Deadline) -> str:
    """The deadline as a weekly cron (the week after the week: Monday is cron's 1)."""
    return f"{deadline.minute} {deadline.hour} * * {(deadline.day + 1) % 7}"


def judge(instance, key: AssetKey, deadline: Deadline, as_of: dt.datetime, start_week: str) -> AssetCheckResult:
    week = due_week(as_of, deadline)
    due = deadline.of(week)
    meta = {"week": week.isoformat(), "due": due.isoformat(), "as_of": as_of.isoformat()}
    if week.isoformat() < start_week:
        return AssetCheckResult(asset_key=key, check_name=FRESH_CHECK, passed=True, metadata=meta,
                                description=f"no week is due yet (the first week is {start_week})")
    done = records.materialized(instance, key, week.isoformat())
    return AssetCheckResult(
        asset_key=key, check_name=FRESH_CHECK, passed=done, severity=AssetCheckSeverity.ERROR, metadata=meta,
        description=(f"week {week} materialized (due {due:%Y-%m-%d %H:%M} UTC)" if done else
                     f"late: week {week} has no materialization of its partition, due {due:%Y-%m-%d %H:%M} UTC "
                     "(older weeks do not count)"))


CHUNK = 50  # sources per multi-asset check


def freshness_checks(keys: list[AssetKey], deadline: Deadline, start_week: str):
    """The raw assets' ``fresh_week`` checks (multi-asset checks of :data:`CHUNK` sources each, subsettable), the job
    that runs them and its weekly schedule at the deadline (off by default, like the weekly scrape: turn both on in
    the UI). One multi-asset check of every source cost each process that loads the definitions time that grew with
    the square of the sources (Dagster resolves such a check once per check key, each time over all its specs):
    5.8 CPU-s at 1,000 sources; in chunks, 0.7 (BENCHMARKS.md, many_sources)."""
    def check(n: int, chunk: list[AssetKey]):
        specs = [AssetCheckSpec(FRESH_CHECK, asset=key,
                                description="The week that is due (its FLEET_FRESHNESS_DEADLINE passed) has this "
                                            "source's partition materialized; a backfilled older week does not count.")
                 for key in chunk]

        @multi_asset_check(specs=specs, name=f"fleet_fresh_week_{n}", can_subset=True)
        def fresh_week(context: AssetCheckExecutionContext):
            tag = context.run.tags.get(AS_OF_TAG)
            as_of = dt.datetime.fromisoformat(tag) if tag else utc_now()
            for check_key in sorted(context.selected_asset_check_keys, key=lambda k: k.asset_key.to_user_string()):
                yield judge(context.instance, check_key.asset_key, deadline, as_of, start_week)

        return fresh_week

    fresh_week = [check(n, keys[i:i + CHUNK]) for n, i in enumerate(range(0, len(keys), CHUNK))]
    job = define_asset_job("fleet_freshness", selection=AssetSelection.checks(*fresh_week),
                           description="Whether each source's due week is materialized (its fresh_week check).")

    @schedule(job=job, cron_schedule=deadline_cron(deadline), execution_timezone="UTC", name="fleet_freshness_weekly",
              default_status=DefaultScheduleStatus.STOPPED)
    def weekly(context: ScheduleEvaluationContext):
        """At the week's deadline, judge each source's due week (the tick's own time, never the wall clock)."""
        tick = context.scheduled_execution_time.astimezone(dt.timezone.utc)
        return RunRequest(run_key=f"freshness:{tick.isoformat()}", tags={AS_OF_TAG: tick.isoformat()})

    return fresh_week, job, weekly
