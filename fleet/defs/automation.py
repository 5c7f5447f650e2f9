"""Schedule and run-status sensors: the weekly tick, crash re-execution, and consolidation after the scrape stage."""
from __future__ import annotations

from dagster import (
    DagsterInvalidDefinitionError, DagsterRunStatus, DefaultScheduleStatus, DefaultSensorStatus, RunRequest,
    RunStatusSensorContext, ScheduleEvaluationContext, SkipReason, run_status_sensor, schedule,
)

from fleet import records
from fleet.errors import FleetError
from fleet.policy import taxonomy as tx
from fleet.policy.followup import follow_up_request
from fleet.weeks import last_complete_week

# The weekly tick: Monday 06:00 UTC, for the week that ended on Sunday (FLEET_SCHEDULE or a defs.yaml moves it).
SCHEDULE_CRON = "0 6 * * 1"


def _follow(context: RunStatusSensorContext, crash_reruns: int, artifacts):
    run = context.dagster_run
    action, request = follow_up_request(context.instance, run, crash_reruns, artifacts.store())
    if request is None:
        return SkipReason(f"run {run.run_id}: {action.reason}")
    context.log.info(f"run {run.run_id} for week {action.week}: {action.reason}")
    return request


def build_automation(scrape_job, publish_job, crash_reruns: int, artifacts, cron: str = SCHEDULE_CRON,
                     running: bool = False):
    # every run of the instance's weeks, whatever code location launched it (`fleet ui`, `dg dev` and deploy/ name
    # the location differently)
    @run_status_sensor(run_status=DagsterRunStatus.FAILURE, request_jobs=[scrape_job, publish_job],
                       name="fleet_after_failed_run", minimum_interval_seconds=5,
                       default_status=DefaultSensorStatus.RUNNING, monitor_all_code_locations=True)
    def after_failed_run(context: RunStatusSensorContext):
        """Classify a failed run's steps (infra/source); re-execute crashed sources (≤ N) or consolidate the week."""
        return _follow(context, crash_reruns, artifacts)

    @run_status_sensor(run_status=DagsterRunStatus.SUCCESS, request_jobs=[scrape_job, publish_job],
                       name="fleet_after_scrape_run", minimum_interval_seconds=5,
                       default_status=DefaultSensorStatus.RUNNING, monitor_all_code_locations=True)
    def after_successful_run(context: RunStatusSensorContext):
        """After a scrape-only run succeeds, consolidate and commit the week."""
        return _follow(context, crash_reruns, artifacts)

    def weekly_fleet(context: ScheduleEvaluationContext):
        """At each tick (Mondays), scrape the last week complete at the tick's own time, never the wall clock's."""
        week = last_complete_week(context.scheduled_execution_time.date()).isoformat()
        # Dagster dedups a schedule's run_key within one tick only: a second tick in the week (a schedule that
        # fires daily, a tick launched by hand from the UI) would scrape the week again
        launched = records.runs(context.instance, tags={"dagster/schedule_name": "weekly_fleet",
                                                        "dagster/partition": week}, limit=1)
        if launched:
            return SkipReason(f"week {week} was launched by this schedule already (run {launched[0].run_id}); "
                              "the sensors follow its runs up")
        return RunRequest(partition_key=week, run_key=f"weekly:{week}", tags={tx.TAG_KIND: "scrape"})

    try:
        weekly = schedule(job=scrape_job, cron_schedule=cron, execution_timezone="UTC", name="weekly_fleet",
                          default_status=DefaultScheduleStatus.RUNNING if running else DefaultScheduleStatus.STOPPED
                          )(weekly_fleet)
    except DagsterInvalidDefinitionError:
        raise FleetError(f"the weekly schedule (FLEET_SCHEDULE, or a fleet's defs.yaml `schedule`) must be a cron "
                         f"expression of five fields, UTC (e.g. {SCHEDULE_CRON!r}, Mondays 06:00), "
                         f"got {cron!r}") from None

    return [after_failed_run, after_successful_run], [weekly]
