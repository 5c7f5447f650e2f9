"""The Dagster instance fleet uses: sqlite under ``FLEET_HOME/dagster``, with the scrapers pool and one run per week."""
from __future__ import annotations

import json
import os
from pathlib import Path

from fleet.config import Settings

POOL = "scrapers"


# Every line a step or a scrape worker logs reaches the event log through context.log (the worker's stderr is
# relayed line by line), so Dagster's raw stdout/stderr capture of each step only duplicates it. It costs each
# step two `tail -F` processes and two watcher interpreters (~0.3 CPU-s per step, measured). FLEET_COMPUTE_LOGS=1
# turns it back on.
NO_COMPUTE_LOGS = """compute_logs:
  module: dagster._core.storage.noop_compute_log_manager
  class: NoOpComputeLogManager
"""


# Dagster's own sqlite event log, in its own files, with a connection kept open per file and process instead of
# one opened per event (fleet/defs/storage.py). The runs and schedules databases stay Dagster's defaults.
EVENT_LOG = """event_log_storage:
  module: fleet.defs.storage
  class: FleetSqliteEventLogStorage
  config:
    base_dir: {base_dir}
"""


def dagster_yaml(s: Settings) -> str:
    events = EVENT_LOG.format(base_dir=json.dumps(os.path.join(str(s.dagster_home), "history", "runs", "")))
    return f"""# Written by fleet. Edit FLEET_* settings rather than this file.
telemetry:
  enabled: false
{events}{"" if s.compute_logs else NO_COMPUTE_LOGS}concurrency:
  pools:
    default_limit: {s.steps_in_flight}
    granularity: op
  runs:
    max_concurrent_runs: 8
    tag_concurrency_limits:
      # one run per week at a time, for the UI, the schedule and the sensors
      - key: dagster/partition
        value:
          applyLimitPerUniqueValue: true
        limit: 1
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
# DefaultRunLauncher, with a check that a started run's worker process still lives (fleet/defs/launcher.py):
# run monitoring fails a run whose worker is gone, and the run-failure sensor follows it up
run_launcher:
  module: fleet.defs.launcher
  class: FleetRunLauncher
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  poll_interval_seconds: {s.run_monitor_s}
  max_resume_run_attempts: 0
"""


def ensure_home(s: Settings) -> Path:
    """Create ``FLEET_HOME`` and the Dagster home in it, point ``DAGSTER_HOME`` there, and return it."""
    home = s.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    text = dagster_yaml(s)
    if not cfg.exists() or cfg.read_text() != text:
        tmp = cfg.with_name(f".dagster.yaml.{os.getpid()}.tmp")  # two first runs at once must not share it
        tmp.write_text(text)
        os.replace(tmp, cfg)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def get_instance(s: Settings):
    import fcntl

    from dagster import DagsterInstance

    home = ensure_home(s)
    # Two processes creating the sqlite schema at once race; the first to hold this lock creates it.
    with open(home / ".init.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        instance = DagsterInstance.get()
        # The pool cap must hold across concurrent runs, so it lives in the instance, not in a run's executor.
        # It admits steps_in_flight steps; max_parallel of them scrape at once (fleet/scraping/slots.py).
        if instance.event_log_storage.get_concurrency_info(POOL).slot_count != s.steps_in_flight:
            instance.event_log_storage.set_concurrency_slots(POOL, s.steps_in_flight)
    return instance
