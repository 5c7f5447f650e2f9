"""fleet's Dagster event log (fleet/defs/storage.py): a connection kept per sqlite file and process, never one
shared across a fork, and a bounded number of open files; on a real sqlite instance."""
import os
import time

from dagster import AssetKey, AssetMaterialization, DagsterEvent, DagsterEventType, job, op
from dagster._core.events import StepMaterializationData
from dagster._core.events.log import EventLogEntry

from fleet.config import settings
from fleet.defs import storage as fleet_storage
from fleet.defs.instance import get_instance


@op
def noop():
    pass


@job
def tiny():
    noop()


def _materialization(run_id: str, i: int) -> EventLogEntry:
    event = DagsterEvent(event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value, job_name="tiny", step_key="noop",
                         event_specific_data=StepMaterializationData(
                             AssetMaterialization(asset_key=AssetKey(["raw", "probe"]), metadata={"i": i})))
    return EventLogEntry(error_info=None, level=20, user_message="", run_id=run_id, timestamp=time.time(),
                         step_key="noop", job_name="tiny", dagster_event=event)


def _fresh_instance(monkeypatch, home):
    """fleet's instance over a new FLEET_HOME (and no DAGSTER_HOME of the environment's)."""
    monkeypatch.setenv("FLEET_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    return get_instance(settings())


def test_event_log_keeps_its_connections_and_never_shares_one_across_a_fork(tmp_path, monkeypatch):
    instance = _fresh_instance(monkeypatch, tmp_path / "home")
    storage = instance.event_log_storage
    assert isinstance(storage, fleet_storage.FleetSqliteEventLogStorage)
    # the files are Dagster's own layout, so an existing FLEET_HOME keeps its history
    assert storage._base_dir == str(tmp_path / "home" / "dagster" / "history" / "runs")

    run = instance.create_run_for_job(tiny)
    instance.store_event(_materialization(run.run_id, 0))
    engine = storage._engines[run.run_id]
    instance.store_event(_materialization(run.run_id, 1))
    assert storage._engines[run.run_id] is engine, "the run's connection was not kept"

    pid = os.fork()
    if pid == 0:  # the child writes through connections of its own, and leaves the inherited ones alone
        code = 1
        try:
            for i in range(2, 12):
                instance.store_event(_materialization(run.run_id, i))
            code = 0 if storage._engines[run.run_id] is not engine else 3
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    instance.store_event(_materialization(run.run_id, 12))  # the parent's connection still works
    assert storage._engines[run.run_id] is engine
    got = sorted(e.asset_materialization.metadata["i"].value for e in instance.all_logs(run.run_id)
                 if e.dagster_event is not None and e.dagster_event.event_type_value == "ASSET_MATERIALIZATION")
    assert got == list(range(13))
    latest = instance.get_latest_materialization_event(AssetKey(["raw", "probe"]))
    assert latest.asset_materialization.metadata["i"].value == 12

    for _ in range(fleet_storage.MAX_OPEN + 3):  # a process that reads many runs keeps a bounded set open
        other = instance.create_run_for_job(tiny)
        instance.store_event(_materialization(other.run_id, 0))
    assert len(storage._engines) == fleet_storage.MAX_OPEN
    instance.dispose()
    assert not storage._engines


def test_event_log_commits_append_to_the_wal_without_an_fsync(tmp_path, monkeypatch):
    """WAL with synchronous=NORMAL on fleet's connections; a second process still reads every committed event."""
    import sqlalchemy as db
    instance = _fresh_instance(monkeypatch, tmp_path / "home")
    run = instance.create_run_for_job(tiny)
    instance.store_event(_materialization(run.run_id, 0))
    storage = instance.event_log_storage
    with storage._engines[run.run_id].connect() as conn:
        assert conn.execute(db.text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(db.text("PRAGMA synchronous")).scalar() == 1  # NORMAL (FULL is 2)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            from dagster import DagsterInstance
            other = DagsterInstance.get()  # a fresh instance: its own storage and connections
            code = 0 if len(other.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)) == 1 else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_table_once_seen_is_not_asked_for_again_and_a_missing_one_is(tmp_path, monkeypatch):
    """Dagster asks whether the index has ``asset_check_executions`` before storing every asset check event,
    through a new engine each time; fleet's storage remembers a table it has seen (tables are only added)."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    storage = _fresh_instance(monkeypatch, tmp_path / "home").event_log_storage
    asked = []
    original = SqliteEventLogStorage.has_table
    monkeypatch.setattr(SqliteEventLogStorage, "has_table", lambda self, name: asked.append(name) or original(self, name))
    assert storage.supports_asset_checks and storage.supports_asset_checks
    assert storage.has_table("asset_check_executions")
    assert asked.count("asset_check_executions") <= 1  # at most once (it may have been seen at start-up)
    assert not storage.has_table("no_such_table") and not storage.has_table("no_such_table")
    assert asked.count("no_such_table") == 2  # not seen: asked each time, so a migration that adds it is seen


def _planned_week_job():
    """A partitioned asset job with checks: creating a run of it writes its planned events (2 assets, 3 checks)."""
    from dagster import AssetCheckSpec, Definitions, MaterializeResult, WeeklyPartitionsDefinition, asset, define_asset_job

    parts = WeeklyPartitionsDefinition(start_date="2026-01-05", day_offset=1)

    @asset(partitions_def=parts, check_specs=[AssetCheckSpec(n, asset="probe_a") for n in ("one", "two")])
    def probe_a():
        return MaterializeResult()

    @asset(partitions_def=parts, deps=[probe_a], check_specs=[AssetCheckSpec("three", asset="probe_b")])
    def probe_b():
        return MaterializeResult()

    return Definitions(assets=[probe_a, probe_b], jobs=[define_asset_job("probe_week")]).resolve_job_def("probe_week")


def _planned_state(instance, run_id: str) -> dict:
    from dagster import AssetCheckKey

    events = [(e.dagster_event.event_type_value, e.dagster_event.step_key, str(e.dagster_event.asset_key or ""),
               getattr(e.dagster_event.event_specific_data, "check_name", None))
              for e in instance.all_logs(run_id) if e.dagster_event is not None]
    storage = instance.event_log_storage
    checks = {name: [(r.run_id, r.status.value) for r in storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey(asset), name), limit=5)] for asset, name in
        (("probe_a", "one"), ("probe_a", "two"), ("probe_b", "three"))}
    planned = {k: instance.get_latest_planned_materialization_info(AssetKey(k)).run_id for k in ("probe_a", "probe_b")}
    return {"events": sorted(events), "checks": checks, "planned": planned}


def test_a_runs_planned_events_are_stored_in_one_batch_with_what_one_by_one_stores(tmp_path, monkeypatch):
    """Dagster's planned events (one per asset and check a run will execute) reach store_event_batch when
    DAGSTER_EVENT_BATCH_SIZE is on; fleet's storage writes them in one transaction per file. What is stored is
    what storing them one by one stores: the run's log, the asset index, the check executions."""
    from fleet.policy import taxonomy as tx

    week_job = _planned_week_job()
    batches, opened = [], []
    cls = fleet_storage.FleetSqliteEventLogStorage
    original_batch, original_open = cls.store_event_batch, cls._open

    def store_event_batch(self, events):
        before = len(opened)
        original_batch(self, events)
        batches.append((len(events), len(opened) - before))

    monkeypatch.setattr(cls, "store_event_batch", store_event_batch)
    monkeypatch.setattr(cls, "_open", lambda self, shard: opened.append(shard) or original_open(self, shard))
    state = {}
    for label, size in (("batched", "1000"), ("one by one", "0")):
        monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", size)
        instance = _fresh_instance(monkeypatch, tmp_path / label)
        run = instance.create_run_for_job(week_job, tags={tx.PARTITION_TAG: "2026-11-16"})
        state[label] = _planned_state(instance, run.run_id)
        state[label]["planned"] = {k: v == run.run_id for k, v in state[label]["planned"].items()}
        state[label]["checks"] = {k: [(r == run.run_id, s) for r, s in v] for k, v in state[label]["checks"].items()}
        instance.dispose()
    # the batched run's 2 + 3 planned events in one batch, through one connection and transaction per file
    # (the run's and the index); the other run's none
    assert batches == [(5, 2)], batches
    assert state["batched"] == state["one by one"]
    assert state["batched"]["checks"]["one"] == [(True, "PLANNED")]
    assert state["batched"]["planned"] == {"probe_a": True, "probe_b": True}


def test_a_batch_that_fails_stores_none_of_its_events_and_the_storage_goes_on(tmp_path, monkeypatch):
    instance = _fresh_instance(monkeypatch, tmp_path / "home")
    storage = instance.event_log_storage
    run = instance.create_run_for_job(tiny)
    events = [_materialization(run.run_id, i) for i in range(4)]
    original = fleet_storage.SqliteEventLogStorage.store_event
    calls = []

    def flaky(self, event):
        calls.append(event)
        if len(calls) == 3:
            raise OSError("disk full")
        return original(self, event)

    monkeypatch.setattr(fleet_storage.SqliteEventLogStorage, "store_event", flaky)
    try:
        storage.store_event_batch(events)
    except OSError:
        pass
    else:
        raise AssertionError("the batch's failure was not raised, so Dagster would not store its events again")
    monkeypatch.setattr(fleet_storage.SqliteEventLogStorage, "store_event", original)
    assert instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION) == []
    assert instance.get_latest_materialization_event(AssetKey(["raw", "probe"])) is None
    storage.store_event_batch(events)  # the lock was released and the batch's state cleared
    instance.store_event(_materialization(run.run_id, 4))
    got = [e.asset_materialization.metadata["i"].value
           for e in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)]
    assert got == [0, 1, 2, 3, 4]
    assert instance.get_latest_materialization_event(AssetKey(["raw", "probe"])).asset_materialization.metadata["i"].value == 4


def test_fleets_storage_turns_dagsters_event_batching_on_and_keeps_an_explicit_setting(tmp_path):
    import subprocess
    import sys

    from fleet_tests.conftest import ROOT

    code = ("import os\nfrom fleet.config import settings\nfrom fleet.defs.instance import get_instance\n"
            "get_instance(settings())\nprint(os.environ.get('DAGSTER_EVENT_BATCH_SIZE'))\n")
    base = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_EVENT_BATCH_SIZE", "DAGSTER_HOME")}
    for given, expected in ((None, str(fleet_storage.EVENT_BATCH_SIZE)), ("0", "0")):
        env = {**base, "FLEET_HOME": str(tmp_path / f"home-{given}"), "PYTHONPATH": str(ROOT),
               **({"DAGSTER_EVENT_BATCH_SIZE": given} if given is not None else {})}
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == expected
