"""fleet's run launcher, named in dagster.yaml as ``run_launcher: {module: fleet.defs.compat, class:
FleetRunLauncher}``. It stands in for a public run-worker health check of DefaultRunLauncher (Dagster has none;
its run monitoring calls RunLauncher.check_run_worker_health, whose result types are not public): those types,
like every non-public Dagster member fleet uses, come from fleet/records.py, whose tripwire fails at import."""
from __future__ import annotations

from dagster import DefaultRunLauncher

from fleet import records
from fleet.defs.runworker import LOST_TAG, worker_health


class FleetRunLauncher(DefaultRunLauncher):
    """DefaultRunLauncher (runs go to the code server) whose run workers Dagster's run monitoring can check
    (fleet/defs/runworker.py)."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run) -> records.CheckRunHealthResult:
        instance = records.launcher_instance(self)
        record = records.run_record(instance, run.run_id)
        # the heartbeats seen of runs on other hosts, by this process's clock (fleet/defs/runworker.py)
        seen = self.__dict__.setdefault("fleet_beats_seen", {})
        found = worker_health(run, started_at=record.start_time if record else None,
                              grace_s=records.monitoring_grace_s(instance), seen=seen)
        if found.status == "FAILED":  # run monitoring fails it now; the run-failure sensor follows it up
            records.add_tags(instance, run.run_id, {LOST_TAG: found.msg})
        return records.CheckRunHealthResult(records.WorkerStatus[found.status], found.msg,
                                            run_worker_id=found.run_worker_id)
