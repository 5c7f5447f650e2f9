"""The Dagster instance fleet runs on. fleet writes a ``dagster.yaml`` only where there is none; the file is then
the user's (Postgres, run monitoring, anything Dagster documents). At start, :func:`check_instance` refuses an
instance that lacks what fleet relies on, in one line naming the missing key."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml

from fleet import records
from fleet import config
from fleet.config import Settings
from fleet.errors import FleetError

POOL = "scrapers"
# Dagster's scrapers pool (and the multiprocess executor's max_concurrent) admits this many steps per source of the
# cap: fleet's own slot (fleet/engine/slot.py) holds the cap around the scrape only, and a step holds its pool slot
# ~1.3x its scrape (launch, start-up, then the run process draining its tail events, ~20 ms per live step per
# event). Twice the cap lets the next steps start, and the finished ones drain, while the cap's slots scrape.
STEPS_PER_SLOT = 2


def pool_limit(max_parallel: int) -> int:
    """The scrapers pool's limit for a cap of ``max_parallel`` sources scraping at once."""
    return STEPS_PER_SLOT * max_parallel


def dagster_yaml(s: Settings) -> str:
    """The ``dagster.yaml`` fleet writes into a new home: sqlite storage (Dagster's default), the scrapers pool,
    one run per week in the run queue, and run monitoring of each run's worker."""
    # Every line a step or a scrape worker logs reaches the event log through context.log, so Dagster's raw
    # stdout/stderr capture of each step only duplicates it, at two `tail -F` processes and two watcher
    # interpreters per step. FLEET_COMPUTE_LOGS=1 keeps it.
    compute_logs = "" if s.compute_logs else """compute_logs:
  module: dagster._core.storage.noop_compute_log_manager
  class: NoOpComputeLogManager
"""
    # Postgres holds runs, events and schedules where every host reaches them; the URL stays in the environment
    # (Dagster reads `env:` values when the instance loads), so the file holds no password.
    storage = """storage:
  postgres:
    postgres_url:
      env: FLEET_POSTGRES_URL
""" if s.postgres_url else ""
    return f"""# Written by fleet for a new FLEET_HOME; yours to edit (fleet never overwrites it). fleet checks at start
# that the scrapers pool limit, one run per dagster/partition and run monitoring are configured.
telemetry:
  enabled: false
{storage}{compute_logs}concurrency:
  pools:
    # the steps admitted at once, across runs: {STEPS_PER_SLOT} x FLEET_MAX_PARALLEL, the cap on sources scraping at
    # once that fleet holds around each scrape (its own slots: fleet/engine/slot.py)
    default_limit: {pool_limit(s.max_parallel)}
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
  config:
    # every week's runs go through this queue, `fleet run`'s too: a run waits at most a second to be launched
    dequeue_interval_seconds: 1
# DefaultRunLauncher with a check that a started run's worker process still lives (fleet/defs/compat.py):
# run monitoring fails a run whose worker is gone, and the run-failure sensor follows it up
run_launcher:
  module: fleet.defs.compat
  class: FleetRunLauncher
# Dagster prints STEP_WORKER_STARTED (DEBUG) in each step's process through a logger that no run config reaches;
# this level quiets it. Events reach the event log whatever it is: Dagster's own lines show only with `-v`.
python_logs:
  python_log_level: INFO
run_monitoring:
  enabled: true
  start_timeout_seconds: 60  # a run left STARTING by a killed daemon is failed after this; its week goes on
  poll_interval_seconds: {s.run_monitor_s}
  # the scrapers pool's slots a run's steps still held when it ended (a killed step, a revoked Celery task) are
  # given back a second after the run ended, before its follow-up asks for them
  free_slots_after_run_end_seconds: 1
  max_resume_run_attempts: 0
"""


def ensure_home(s: Settings) -> Path:
    """Create ``FLEET_HOME`` and the Dagster home in it (``FLEET_HOME/dagster``), point ``DAGSTER_HOME`` there,
    write fleet's ``dagster.yaml`` if the home has none, and return the Dagster home."""
    home = s.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        tmp = cfg.with_name(f".dagster.yaml.{os.getpid()}.tmp")
        tmp.write_text(dagster_yaml(s))
        try:
            os.link(tmp, cfg)  # only where there is still none: two first runs at once must not overwrite
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    config.export(DAGSTER_HOME=str(home))
    return home


def read_config(home: Path) -> dict:
    cfg = home / "dagster.yaml"
    try:
        data = yaml.safe_load(cfg.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise FleetError(f"{cfg}: cannot be read as YAML ({exc})") from None
    if not isinstance(data, dict):
        raise FleetError(f"{cfg}: is not a mapping of Dagster's instance settings")
    return data


def _partition_limit(data: dict) -> bool:
    runs = (data.get("concurrency") or {}).get("runs") or {}
    coordinator = (data.get("run_coordinator") or {}).get("config") or {}
    limits = [*(runs.get("tag_concurrency_limits") or []), *(coordinator.get("tag_concurrency_limits") or [])]
    return any(isinstance(x, dict) and x.get("key") == "dagster/partition" and x.get("limit") == 1
               and isinstance(x.get("value"), dict) and x["value"].get("applyLimitPerUniqueValue") for x in limits)


def _shared_storage(data: dict) -> bool:
    storage = data.get("storage") or {}
    return any(k in storage for k in ("postgres", "mysql")) or "Postgres" in str(data.get("run_storage") or "")


def check_instance(s: Settings, instance) -> None:
    """Refuse an instance without what fleet relies on, naming the missing ``dagster.yaml`` key: a limit for the
    scrapers pool of :func:`pool_limit` of ``FLEET_MAX_PARALLEL``, the run queue's limit of one run per ``dagster/partition``
    (QueuedRunCoordinator), and run monitoring."""
    home = config.dagster_home()
    if home is None:
        raise FleetError("DAGSTER_HOME is not set: run fleet's commands, which set it to FLEET_HOME/dagster, or set it")
    data = read_config(home)
    where = home / "dagster.yaml"
    limit = records.pool_limit(instance, POOL)  # `dagster instance concurrency set`
    if limit is None:
        limit = ((data.get("concurrency") or {}).get("pools") or {}).get("default_limit")
    if limit is None:
        raise FleetError(f"{where}: concurrency.pools.default_limit is missing: fleet's '{POOL}' pool needs a limit "
                         f"(or set one with `dagster instance concurrency set {POOL} N`)")
    if limit != pool_limit(s.max_parallel):
        raise FleetError(f"the instance's '{POOL}' pool limit is {limit} but FLEET_MAX_PARALLEL is {s.max_parallel}; "
                         f"the pool admits {STEPS_PER_SLOT} steps per source of the cap on sources scraping at once: "
                         f"set it to {pool_limit(s.max_parallel)} (`dagster instance concurrency set {POOL} "
                         f"{pool_limit(s.max_parallel)}`)")
    if "QueuedRunCoordinator" not in str((data.get("run_coordinator") or {}).get("class", "")):
        raise FleetError(f"{where}: run_coordinator is not Dagster's QueuedRunCoordinator; fleet needs the run queue "
                         "for one run per week")
    if not _partition_limit(data):
        raise FleetError(f"{where}: concurrency.runs.tag_concurrency_limits has no limit of 1 per unique value of "
                         "dagster/partition; fleet needs one run per week at a time")
    if s.executor == "celery" and not _shared_storage(data):
        raise FleetError(f"{where}: storage is this machine's sqlite, but FLEET_EXECUTOR=celery runs steps on other "
                         "hosts: set storage to postgres (FLEET_POSTGRES_URL writes it into a new dagster.yaml)")
    if not (data.get("run_monitoring") or {}).get("enabled"):
        raise FleetError(f"{where}: run_monitoring.enabled is not true; fleet needs run monitoring to fail runs "
                         "whose worker died")
    if (data.get("run_monitoring") or {}).get("free_slots_after_run_end_seconds") is None:
        raise FleetError(f"{where}: run_monitoring.free_slots_after_run_end_seconds is not set; fleet needs run "
                         "monitoring to give back the scrapers pool's slots a dead run's steps held (1 is fleet's)")


def get_instance(s: Settings, check: bool = True):
    """The instance of ``s``'s home, its storage reached now (one line naming the setting when it cannot be);
    ``check``: refused without what fleet's runs rely on (:func:`check_instance`), which a worker does not judge."""
    import fcntl

    from dagster import DagsterInstance

    home = ensure_home(s)
    # Two processes creating a sqlite schema at once race; the first to hold this lock creates it.
    with open(home / ".init.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # dagster-postgres logs each retry of a refused connection on the root logger, which, unconfigured,
        # prints it: the one line below says it all
        quiet = logging.NullHandler() if not logging.getLogger().handlers else None
        if quiet:
            logging.getLogger().addHandler(quiet)
        try:
            instance = DagsterInstance.get()
            # Postgres connects lazily: ask it something now, so an unreachable server is refused here, in one
            # line, and not as a stack trace from the first run
            records.run_records(instance, limit=1)
        except Exception as exc:
            if not type(exc).__module__.startswith(("sqlalchemy", "psycopg", "dagster_postgres")):
                raise
            root = exc
            while root.__cause__ is not None:  # "too many retries": the refused connection is its cause
                root = root.__cause__
            first = str(root).strip().splitlines()[0] if str(root).strip() else type(root).__name__
            where = (f"FLEET_POSTGRES_URL ({home / 'dagster.yaml'} storage)" if s.postgres_url else
                     f"the Dagster instance's storage ({home / 'dagster.yaml'})")
            raise FleetError(f"{where} cannot be reached: {first}") from None
        finally:
            if quiet:
                logging.getLogger().removeHandler(quiet)
    if check:
        check_instance(s, instance)
    return instance
