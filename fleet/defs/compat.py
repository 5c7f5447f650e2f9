"""The one place fleet stands in for a Dagster API that is not public. Each entry names the public API it stands
in for, and fails at import, naming itself, if Dagster has moved what it uses: it never degrades silently."""
from __future__ import annotations

from dagster import DefaultRunLauncher

from fleet.defs.runworker import worker_health

# FleetRunLauncher: stands in for a public run-worker health check of DefaultRunLauncher (Dagster has none for it;
# its run monitoring calls RunLauncher.check_run_worker_health, whose result types are internal).
try:
    from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus
except ImportError as exc:  # pragma: no cover - only on a Dagster that moved them
    raise ImportError(f"fleet.defs.compat.FleetRunLauncher: this Dagster has no dagster._core.launcher.base."
                      f"CheckRunHealthResult/WorkerStatus ({exc}); fleet's run monitoring needs a new stand-in") from exc
if not callable(getattr(DefaultRunLauncher, "check_run_worker_health", None)):  # pragma: no cover
    raise ImportError("fleet.defs.compat.FleetRunLauncher: DefaultRunLauncher.check_run_worker_health is gone from "
                      "this Dagster; fleet's run monitoring needs a new stand-in")


class FleetRunLauncher(DefaultRunLauncher):
    """DefaultRunLauncher (runs go to the code server) whose run workers Dagster's run monitoring can check
    (fleet/defs/runworker.py). Named in dagster.yaml as ``run_launcher: {module: fleet.defs.compat, class:
    FleetRunLauncher}``."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        record = self._instance.get_run_record_by_id(run.run_id)
        found = worker_health(run, started_at=record.start_time if record else None,
                              grace_s=self._instance.run_monitoring_start_timeout_seconds)
        return CheckRunHealthResult(WorkerStatus[found.status], found.msg, run_worker_id=found.run_worker_id)
