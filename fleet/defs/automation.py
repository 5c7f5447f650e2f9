"""Schedule and run-status sensors: the weekly tick, crash re-execution, and consolidation after the scrape stage."""
from __future__ import annotations

from dagster import (
    AssetKey, DagsterRunStatus, DefaultScheduleStatus, DefaultSensorStatus, RunRequest, RunStatusSensorContext,
    ScheduleEvaluationContext, SkipReason, run_status_sensor, schedule,
)

from fleet.config import settings
from fleet.policy import taxonomy as tx
from fleet.weeks import last_complete_week


def follow_up_request(instance, run, max_reruns: int):
    """The RunRequest that should follow ``run`` under fleet's policy, or None. Shared by the sensors and the CLI."""
    outcomes = tx.run_outcomes(instance, run)
    action = tx.next_action(instance, run, max_reruns, outcomes=outcomes)
    tag = tx.failure_tag(outcomes.values())
    if tag and run.tags.get(tx.TAG_FAILURE) != tag:
        instance.add_run_tags(run.run_id, {tx.TAG_FAILURE: tag})
    record_crashes(run, outcomes)
    if action.kind == "rerun":
        step_keys = {f"{tx.RAW_PREFIX}{s}" for s in action.sources}
        ops = {k: v for k, v in (run.run_config or {}).get("ops", {}).items() if k in step_keys}
        return action, RunRequest(
            job_name="scrape_week", partition_key=action.week, run_key=f"rerun:{run.run_id}",
            asset_selection=[AssetKey(["raw", s]) for s in action.sources],
            run_config={"ops": ops} if ops else {},
            tags={tx.TAG_KIND: "rerun", tx.TAG_ATTEMPT: str(action.attempt), tx.TAG_RECOVERS: run.run_id},
        )
    if action.kind == "publish":
        return action, RunRequest(job_name="publish_week", partition_key=action.week, run_key=f"publish:{run.run_id}",
                                  tags={tx.TAG_KIND: "publish", tx.TAG_RECOVERS: run.run_id})
    return action, None


def record_crashes(run, outcomes, store=None) -> None:
    """A crashed step wrote no outcome of its own: record it, so consolidation and commits say why the source is missing.

    What is stored is kept when it is truer than "crashed in this run": a usable outcome (ok, empty or partial
    with its rows, from an earlier run or from this step before it died: consolidation takes it, and writing
    over it dropped committed rows from the week); any earlier outcome of a step that never started in this
    run (the run made no attempt); and this run's own record of the infra failure (the runner's, with its
    evidence)."""
    from fleet.defs.assets import artifact_store
    from fleet.storage import store as keys

    week = run.tags.get(tx.PARTITION_TAG)
    if not week:
        return
    store = store or artifact_store()
    for src, o in outcomes.items():
        if o.category != "infra":
            continue
        stored = store.read_json(week, keys.outcome_key(src))
        if stored and (keys.usable_outcome(store, week, src) is not None or o.status == "not started"
                       or (stored.get("run_id") == run.run_id and stored.get("category") == "infra")):
            continue
        store.write_json(week, keys.outcome_key(src), {
            "source": src, "week": week, "status": "failed", "category": "infra", "rows": 0, "seconds": 0.0,
            "pages": 0, "error": f"source {src}: {o.error}", "url": None, "evidence": {}, "run_id": run.run_id,
            "attempt": None, "reused": False})


def reap_dead_run(instance, run, reason: str) -> None:
    """Mark ``run``, whose process is gone (kill -9, a reboot), failed, and give back the pool slots its steps held.

    ``report_run_failed`` alone leaves the steps' claims on the ``scrapers`` pool in place: Dagster frees a
    run's slots when its own process ends them, or from the daemon long after the run ended (never under
    ``fleet run``), so every later step of any week waited "blocked by limit for pool scrapers" behind a dead
    run's claims. A step process of the dead run that still lives loses its claim; fleet's own scrape slots
    (fleet/scraping/slots.py) still cap what scrapes at once."""
    if not run.is_finished:
        instance.report_run_failed(run, reason)
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


def _follow(context: RunStatusSensorContext):
    run = context.dagster_run
    if run.tags.get(tx.TAG_DRIVER) == "cli":
        return SkipReason(f"run {run.run_id} is driven by `fleet run`, which applies the policy itself")
    action, request = follow_up_request(context.instance, run, settings().crash_reruns)
    if request is None:
        return SkipReason(f"run {run.run_id}: {action.reason}")
    context.log.info(f"run {run.run_id} for week {action.week}: {action.reason}")
    return request


def build_automation(scrape_job, publish_job):
    @run_status_sensor(run_status=DagsterRunStatus.FAILURE, request_jobs=[scrape_job, publish_job],
                       name="fleet_after_failed_run", minimum_interval_seconds=5,
                       default_status=DefaultSensorStatus.RUNNING)
    def after_failed_run(context: RunStatusSensorContext):
        """Classify a failed run's steps (infra/source); re-execute crashed sources (≤ N) or consolidate the week."""
        # A run that run monitoring failed because its worker died (fleet/defs/launcher.py) still holds its
        # steps' claims on the scrapers pool: Dagster's daemon frees them only with free_slots_after_run_end_seconds,
        # which fleet does not set. Give them back, as reap_dead_run does, before its follow-up asks for them. A run
        # that failed by itself holds none (its steps gave them back as they ended).
        context.instance.event_log_storage.free_concurrency_slots_for_run(context.dagster_run.run_id)
        return _follow(context)

    @run_status_sensor(run_status=DagsterRunStatus.SUCCESS, request_jobs=[scrape_job, publish_job],
                       name="fleet_after_scrape_run", minimum_interval_seconds=5,
                       default_status=DefaultSensorStatus.RUNNING)
    def after_successful_run(context: RunStatusSensorContext):
        """After a scrape-only run succeeds, consolidate and commit the week."""
        return _follow(context)

    @schedule(job=scrape_job, cron_schedule="0 6 * * 1", execution_timezone="UTC", name="weekly_fleet",
              default_status=DefaultScheduleStatus.STOPPED)
    def weekly_fleet(context: ScheduleEvaluationContext):
        """Every Monday, scrape the week that just ended (the tick's own time, never the wall clock)."""
        week = last_complete_week(context.scheduled_execution_time.date()).isoformat()
        return RunRequest(partition_key=week, run_key=f"weekly:{week}", tags={tx.TAG_KIND: "scrape"})

    return [after_failed_run, after_successful_run], [weekly_fleet]
