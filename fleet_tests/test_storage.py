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


def test_event_log_keeps_its_connections_and_never_shares_one_across_a_fork(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    instance = get_instance(settings())
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
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    instance = get_instance(settings())
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

    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    storage = get_instance(settings()).event_log_storage
    asked = []
    original = SqliteEventLogStorage.has_table
    monkeypatch.setattr(SqliteEventLogStorage, "has_table", lambda self, name: asked.append(name) or original(self, name))
    assert storage.supports_asset_checks and storage.supports_asset_checks
    assert storage.has_table("asset_check_executions")
    assert asked.count("asset_check_executions") <= 1  # at most once (it may have been seen at start-up)
    assert not storage.has_table("no_such_table") and not storage.has_table("no_such_table")
    assert asked.count("no_such_table") == 2  # not seen: asked each time, so a migration that adds it is seen
