"""Dagster's sqlite event log, keeping one open connection per database file in each process.

Dagster's ``SqliteEventLogStorage`` creates an SQLAlchemy engine, opens the sqlite file, and closes both again
for every event it stores and every query it answers. So SQLAlchemy compiles every statement anew (its cache
lives in the engine), and each open and close of a WAL database costs its own system calls. Measured on the
2-core machine of BENCHMARKS.md (``store_event`` in a loop): a materialization 8.6-9.3 ms of CPU, a log line
3.3 ms, a latest-materialization query 12-14 ms; with a kept connection 2.3-2.4 ms, 0.5 ms and 1.6-2.0 ms. A
source's step stores ~17 events and makes ~8 such queries, and the run process writes 5 planned events per
source before the run starts.

What stays as it was: the files (``history/runs/<run_id>.db`` and ``index.db`` under ``DAGSTER_HOME``, so an
existing ``FLEET_HOME`` keeps its history), one transaction per call, the storage's lock that serialises its
threads, and sqlite's own locking between processes (WAL, the busy timeout). Two things are changed: commits
append to the WAL without an fsync (``synchronous=NORMAL``, see :func:`_wal_sync_normal`), and a batch of
events that Dagster hands over at once (a new run's planned events) is one transaction per file, not one per
event (:meth:`FleetSqliteEventLogStorage.store_event_batch`). A connection never
crosses a fork: a forked process (Dagster's steps fork from a forkserver) opens its own, and leaves the ones it
inherited untouched, since closing a copy of another process's sqlite connection is not safe. At most
``MAX_OPEN`` files stay open per process (the index and the latest runs'), so the webserver and the daemon,
which read many runs, do not accumulate file descriptors.
"""
from __future__ import annotations

import collections
import contextlib
import os
import threading
from typing import Iterator

from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData

MAX_OPEN = 8
EVENT_BATCH_SIZE = 1000  # events per store_event_batch at most (a run's planned events: 5 per source)
_INHERITED: list = []  # engines a forked child got from its parent: kept referenced, so never closed here


def _wal_sync_normal(dbapi_connection, _record) -> None:
    """``synchronous=NORMAL``: a commit appends to the WAL without an fsync; the WAL is synced at checkpoints.

    sqlite documents this as safe from corruption in WAL mode. A commit survives the process crashing at once
    (it is in the OS's page cache), and only an OS crash or power loss can roll back the last commits. fleet's
    own artifacts (spools, outcomes, frames), never the event log, are what a rerun resumes from. Measured with
    ``store_event`` in a loop: a materialization 2.3-2.9 -> 1.6-1.7 ms of wall, 1.9-2.4 -> 1.6-1.7 ms of CPU."""
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


class FleetSqliteEventLogStorage(SqliteEventLogStorage):
    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        self._engines: collections.OrderedDict = collections.OrderedDict()
        self._engines_pid = os.getpid()
        self._tables_seen: set[str] = set()
        self._batch: dict | None = None
        # Dagster hands events to store_event_batch only when this is set; fleet's storage writes a batch in one
        # transaction per file. Read by Dagster at every event; an explicit value (0: off) is kept.
        os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", str(EVENT_BATCH_SIZE))
        super().__init__(base_dir, inst_data=inst_data)  # creates a new index.db through _connect

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "FleetSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str):
        import sqlalchemy as db
        from sqlalchemy.pool import StaticPool

        if self._engines_pid != os.getpid():  # forked: what is open belongs to the parent
            _INHERITED.append(self._engines)
            self._engines, self._engines_pid = collections.OrderedDict(), os.getpid()
        engine = self._engines.get(shard)
        if engine is None:
            # one connection per file, used by one thread at a time (the storage's lock is held around every use)
            engine = db.create_engine(self.conn_string_for_shard(shard), poolclass=StaticPool,
                                      connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False})
            db.event.listen(engine, "connect", _wal_sync_normal)
            self._engines[shard] = engine
            while len(self._engines) > MAX_OPEN:
                _, oldest = self._engines.popitem(last=False)
                oldest.dispose()
        else:
            self._engines.move_to_end(shard)
        return engine

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator:
        batch = self._batch
        if batch is not None and batch["thread"] == threading.get_ident():
            yield self._batch_connection(batch, shard)  # inside store_event_batch, which holds the lock
            return
        with self._db_lock:
            with self._open(shard) as conn:
                with conn.begin():
                    yield conn

    def _open(self, shard: str):
        engine = self._engine(shard)
        if shard not in self._initialized_dbs:
            self._initdb(engine)
            self._initialized_dbs.add(shard)
        return engine.connect()

    def _batch_connection(self, batch: dict, shard: str):
        conn = batch["open"].get(shard)
        if conn is None:
            conn = batch["open"][shard] = self._open(shard)
            conn.begin()
        return conn

    def store_event_batch(self, events) -> None:
        """Store ``events`` with one transaction per database file instead of one per event and file.

        Dagster hands a batch here when batching is on (``DAGSTER_EVENT_BATCH_SIZE``, which this storage turns
        on: see ``__init__``): the run's planned events, one per asset and asset check it will execute, written
        one by one before its first step starts, and each partitioned output's materializations. Base Dagster's
        sqlite storage stores them one by one. Each event is still stored by Dagster's own ``store_event``, so
        what is written is the same; only the connections and commits are fewer. Measured with 40 sources (200
        planned events, in `fleet run` while its first wave's workers start): 0.42-0.50 s before, 0.18-0.33 s
        after; creating the same run in an idle process, 0.35-0.38 s and 0.22-0.28 s (BENCHMARKS.md).

        Nothing of a batch is committed if any of it fails, and Dagster then stores the events one by one.
        The run's file is committed before the index; if the index's commit alone failed (a full disk), the
        run's log would hold the batch twice after that retry, never lose it."""
        with self._db_lock:
            self._batch = batch = {"thread": threading.get_ident(), "open": {}}
            try:
                for event in events:
                    self.store_event(event)
                for shard in sorted(batch["open"], key=lambda name: name == INDEX_SHARD_NAME):
                    batch["open"][shard].commit()
            except BaseException:
                for conn in batch["open"].values():
                    if conn.in_transaction():
                        conn.rollback()
                raise
            finally:
                self._batch = None
                for conn in batch["open"].values():
                    conn.close()

    def has_table(self, table_name: str) -> bool:
        """Whether the index has ``table_name``: Dagster asks before storing every asset check event, each time
        through an engine and a connection of its own. A table only ever appears (a schema migration adds it),
        so once seen it is known for the life of this storage; one not seen yet is asked for again. No lock is
        taken here, as before: Dagster also asks while it holds the index's connection."""
        if table_name in self._tables_seen:
            return True
        found = super().has_table(table_name)
        if found:
            self._tables_seen.add(table_name)
        return found

    def dispose(self) -> None:
        with self._db_lock:
            if self._engines_pid == os.getpid():
                for engine in self._engines.values():
                    engine.dispose()
            self._engines.clear()
        super().dispose()
