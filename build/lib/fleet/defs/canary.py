"""The daily canary as a Dagster job and a schedule of its own, off by default (fleet/lifecycle/canary.py)."""
# No `from __future__ import annotations`: Dagster inspects the op's annotations at runtime.

from dagster import DefaultScheduleStatus, Failure, OpExecutionContext, ScheduleDefinition, job, op

from fleet.defs.resources import Alerts, ArtifactStore

CANARY_CRON = "0 6 * * *"


def build_canary(sources: list):
    @op(name="fleet_canary_op")
    def canary_op(context: OpExecutionContext, artifacts: ArtifactStore, alerts: Alerts) -> None:
        """One live page per source; the sources that fail are alerted once, on the day they break."""
        from fleet.lifecycle.canary import check

        results = check(sources, artifacts.store(), alerts.home, webhook=alerts.webhook or "")
        for r in results:
            context.log.info(f"[canary] [{r.source}] {r.result} {r.rows} rows {r.seconds:.1f}s {r.detail}")
        failed = [r.source for r in results if r.result == "fail"]
        if failed:
            raise Failure(description=f"canary failed for {', '.join(failed)}", allow_retries=False)

    @job(name="fleet_canary", description="One live page per source, daily; nothing is committed.")
    def canary_job():
        canary_op()

    schedule = ScheduleDefinition(name="fleet_canary_daily", job=canary_job, cron_schedule=CANARY_CRON,
                                  default_status=DefaultScheduleStatus.STOPPED)
    return canary_job, schedule
