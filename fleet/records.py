"""The one adapter to Dagster's records: every read or write of fleet's runs, their events and their tags goes
through here, and this is the only module of fleet that reaches a Dagster member Dagster does not mark public.

It uses Dagster's public API where there is one (``DagsterInstance.get_run_records``, ``get_run_by_id``,
``get_run_record_by_id``, marked ``@public``). What has no public equivalent is listed in :data:`NON_PUBLIC`, each
with what it stands in for; the import-time tripwire below fails, naming the member, on a Dagster that moved one,
so a minor release never changes fleet's policy unseen. fleet_tests/test_records.py holds that no other module
touches a non-public ``DagsterInstance`` member or imports ``dagster._``."""
from __future__ import annotations

import importlib.util
from typing import Iterable

from dagster import (
    AssetKey, AssetRecordsFilter, DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus, EventLogRecord,
    RunRecord, RunsFilter,
)

# Each non-public member fleet uses, and why there is no public way (Dagster 1.13).
NON_PUBLIC = {
    "DagsterInstance.get_records_for_run": "a run's step events; the public readers cover asset events and run "
                                           "status changes only",
    "DagsterInstance.add_run_tags": "tags on an existing run (run worker, code version, failure category, follow-up decision)",
    "DagsterInstance.report_engine_event": "a line in a run's event log from fleet's Celery watch",
    "DagsterInstance.event_log_storage": "the pool slots and asset-check history below",
    "EventLogStorage.get_concurrency_keys": "the pools set with `dagster instance concurrency set`",
    "EventLogStorage.get_concurrency_info": "a pool's limit",
    "EventLogStorage.get_asset_check_execution_history": "the checks the UI shows as failed",
    "DagsterInstance.run_monitoring_start_timeout_seconds": "the grace before a run worker records itself",
    "DagsterInstance.get_daemon_heartbeats": "each daemon's latest heartbeat (its time and daemon id), to tell "
                                             "whether a daemon serves the instance and whether fleet started it "
                                             "(fleet/defs/daemon.py); the public `dagster-daemon liveness-check` "
                                             "answers only yes or no, and costs ~1.5 s of a core per command",
    "RunLauncher._instance": "the instance of fleet's run launcher (fleet/defs/compat.py)",
    "RunLauncher.check_run_worker_health, supports_check_run_worker_health": "the run-worker health check fleet's "
                                                                            "launcher gives run monitoring",
    "dagster._core.launcher.base.CheckRunHealthResult": "what a run launcher's worker health check returns",
    "dagster._core.launcher.base.WorkerStatus": "the statuses in it",
    "DagsterInstance.get_ref, from_ref, dispose": "an instance of its own for a reading thread "
                                                  "(fleet/lifecycle/progress.py)",
    # modules the dagster.yaml fleet writes names, as Dagster's instance docs do (fleet/defs/instance.py)
    "module dagster._core.run_coordinator": "QueuedRunCoordinator, the run queue",
    "module dagster._core.storage.noop_compute_log_manager": "NoOpComputeLogManager (FLEET_COMPUTE_LOGS unset)",
}

try:
    from dagster._core.launcher.base import CheckRunHealthResult, RunLauncher, WorkerStatus
    from dagster._core.storage.event_log.base import EventLogStorage
except ImportError as exc:  # pragma: no cover - only on a Dagster that moved them
    raise ImportError(f"fleet.records: this Dagster moved a module fleet uses ({exc}); see fleet.records.NON_PUBLIC") from exc

# A run of these statuses is not finished: it may still start, run or be cancelled.
UNFINISHED = (DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
              DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING)


def tripwire(entries: dict) -> None:
    """Raise ImportError naming the first listed member this Dagster lacks."""
    owners = {"DagsterInstance": DagsterInstance, "EventLogStorage": EventLogStorage, "RunLauncher": RunLauncher}
    for entry in entries:
        if entry.startswith("module "):
            if importlib.util.find_spec(entry.split()[1]) is None:
                raise ImportError(f"fleet.records: {entry} is gone from this Dagster ({entries[entry]})")
            continue
        owner, _, names = entry.partition(".")
        if owner not in owners:
            continue
        for name in names.split(", "):
            if not hasattr(owners[owner], name):
                raise ImportError(f"fleet.records: {owner}.{name} is gone from this Dagster ({entries[entry]}); "
                                  "fleet needs a new way to it")


tripwire(NON_PUBLIC)

# --- runs ---------------------------------------------------------------------------------------------------


def run_by_id(instance, run_id: str) -> DagsterRun | None:
    return instance.get_run_by_id(run_id)


def run_records(instance, tags: dict | None = None, statuses=None, limit: int | None = None) -> list[RunRecord]:
    """The runs with ``tags`` (and in ``statuses``), oldest first (storage ids are given in creation order)."""
    found = instance.get_run_records(RunsFilter(tags=tags or None, statuses=list(statuses) if statuses else None),
                                     limit=limit)
    return sorted(found, key=lambda r: r.storage_id)


def runs(instance, tags: dict | None = None, statuses=None, limit: int | None = None) -> list[DagsterRun]:
    return [r.dagster_run for r in run_records(instance, tags, statuses, limit)]


def run_record(instance, run_id: str) -> RunRecord | None:
    """The record of a run: its storage id, ``create_timestamp``, ``start_time``."""
    return instance.get_run_record_by_id(run_id)


def add_tags(instance, run_id: str, tags: dict) -> None:
    instance.add_run_tags(run_id, tags)


def engine_event(instance, run, message: str) -> None:
    instance.report_engine_event(message, run)


# --- events ---------------------------------------------------------------------------------------------------

PAGE = 10_000


def events(instance, run_id: str, types: Iterable[DagsterEventType] | DagsterEventType | None = None) -> list[EventLogRecord]:
    """The records of run ``run_id``'s events of ``types`` (all when None), in order, every page of them."""
    of_type = {types} if isinstance(types, DagsterEventType) else set(types) if types is not None else None
    out, cursor = [], None
    while True:
        page = instance.get_records_for_run(run_id, cursor=cursor, of_type=of_type, limit=PAGE)
        out += page.records
        if not page.has_more:
            return out
        cursor = page.cursor


# --- pools and checks -----------------------------------------------------------------------------------------


def pool_limit(instance, pool: str) -> int | None:
    """The limit set on ``pool`` in the instance's storage (`dagster instance concurrency set`), or None."""
    storage = instance.event_log_storage
    if pool in set(storage.get_concurrency_keys()):
        return storage.get_concurrency_info(pool).slot_count
    return None


def pool_holders(instance, pool: str) -> set[str]:
    """The ids of the runs whose steps hold slots of ``pool`` now."""
    storage = instance.event_log_storage
    if pool not in set(storage.get_concurrency_keys()):
        return set()
    return {slot.run_id for slot in storage.get_concurrency_info(pool).claimed_slots}


def materialized(instance, key: AssetKey, partition: str) -> bool:
    """Whether ``key`` has a materialization of ``partition`` (``DagsterInstance.fetch_materializations``, public)."""
    found = instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1)
    return bool(found.records)


def check_history(instance, key, limit: int = 1000) -> list:
    """The executions of asset check ``key``, newest first."""
    return instance.event_log_storage.get_asset_check_execution_history(key, limit=limit)


# --- the daemons ------------------------------------------------------------------------------------------------


def daemon_heartbeats(instance) -> dict:
    """Each daemon type's latest heartbeat (``timestamp``, ``daemon_type``, ``daemon_id``) by type ("SENSOR",
    "QUEUED_RUN_COORDINATOR", ...): Dagster's daemons write one every 30 s, each `dagster-daemon` process with a
    daemon id of its own."""
    return dict(instance.get_daemon_heartbeats())


# --- the run launcher and a reading thread's instance ----------------------------------------------------------


def launcher_instance(launcher) -> DagsterInstance:
    return launcher._instance


def monitoring_grace_s(instance) -> float:
    return instance.run_monitoring_start_timeout_seconds


def reopen(instance) -> DagsterInstance:
    """An instance of its own on the same storage, for a thread that reads while ``instance`` is busy; close it
    with :func:`close`."""
    return DagsterInstance.from_ref(instance.get_ref())


def close(instance) -> None:
    instance.dispose()
