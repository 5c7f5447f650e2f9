"""Live progress of `fleet run`: each source's step as it finishes, in whichever process the daemon runs it, read from
the Dagster instance's event log by a thread. These lines, not Dagster's console, are what `fleet run` says while it runs (Dagster's only with -v)."""
from __future__ import annotations

import threading
import time

import click

from fleet import records
from fleet.policy import taxonomy as tx
from fleet.storage import store as keys

POLL_S = 0.5


class Progress:
    """Watches the runs of ``week`` made of this `fleet run`'s request (tag ``fleet/request``: the run the daemon
    launched for it and their follow-ups) and reports each raw step's end: one plain line per source (a failed one's with its error's first
    line), or a rich live view on a terminal."""

    def __init__(self, instance, store, week: str, total: int, echo, request: str, live: bool = False):
        # a thread of its own reads through an instance of its own: the command's follows the runs meanwhile
        self._instance = records.reopen(instance)
        self._store, self._week, self.total, self._echo, self._request = store, week, total, echo, request
        self._since = time.time()
        self._started: dict[str, float] = {}
        self._seen: set[int] = set()          # events already taken in (by event storage id)
        self.finished: dict[str, dict] = {}   # source -> its last reported result
        self._stop = threading.Event()
        self._lock = threading.Lock()         # the thread's polls and catch_up's, one at a time
        self._thread = threading.Thread(target=self._loop, name="fleet-progress", daemon=True)
        self._live = self._make_live() if live else None

    def __enter__(self):
        if self._live is not None:
            self._live.start()
        self._thread.start()
        return self

    def catch_up(self) -> bool:
        """Report what finished since the last poll, now: before the driver's next line, so that every source's
        line comes before what follows the stage. Progress is a courtesy: a failed read (the instance's database
        restarting) is said in one line and never stops the run. False when it failed."""
        with self._lock:
            try:
                self._poll()
                return True
            except Exception as exc:
                click.echo(f"fleet: progress unavailable ({type(exc).__name__}: {exc})", err=True)
                return False

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)
        self.catch_up()  # what finished between the last poll and the end
        if self._live is not None:
            self._live.update(self._view())
            self._live.stop()
        records.close(self._instance)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            if not self.catch_up():
                return

    def _runs(self) -> list:
        return records.runs(self._instance, {tx.TAG_REQUEST: self._request})

    def _poll(self) -> None:
        from dagster import DagsterEventType

        kinds = (DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE)
        for run in self._runs():
            for src, rec in tx.step_sources(self._instance, run.run_id, *kinds)[1]:
                ev = rec.event_log_entry.dagster_event
                if rec.storage_id in self._seen:
                    continue
                self._seen.add(rec.storage_id)
                when = rec.event_log_entry.timestamp
                if ev.event_type == DagsterEventType.STEP_START:
                    self._started.setdefault(f"{run.run_id}/{src}", when)
                    continue
                began = self._started.pop(f"{run.run_id}/{src}", when)
                self._report(src, run.run_id, ev.event_type == DagsterEventType.STEP_SUCCESS, when - began, ev)

    def _report(self, src: str, run_id: str, ok: bool, seconds: float, ev) -> None:
        stored = keys.read_outcome(self._store, self._week, src) or {}
        mine = stored.get("run_id") == run_id
        if ok:
            status, rows = stored.get("status", "ok"), int(stored.get("rows") or 0)
        else:
            md = ev.step_failure_data.user_failure_data.metadata if ev.step_failure_data.user_failure_data else {}
            status = getattr(md.get("fleet/status"), "value", None) or (stored.get("status") if mine else "failed")
            rows = 0
        self.finished[src] = {"status": status, "rows": rows, "seconds": seconds, "ok": ok}
        line = f"{src} {status} {rows} rows {seconds:.1f}s"
        if not ok:  # why, in its stored error's first line (or Dagster's, when its attempt stored none)
            why = ((stored.get("error") if mine else None)
                   or tx.classify_failure(ev.step_failure_data, None)[1]).strip().splitlines()
            line += f": {why[0]}" if why else ""
        if ok and stored and not mine:  # a step succeeds without storing an outcome only by reusing the stored one
            line += ", reusing the stored artifact"
        if self._live is not None:
            self._live.update(self._view())  # first: printing above the view redraws it
            self._live.console.print(line, highlight=False)
        else:
            self._echo(line)

    def _make_live(self):
        from rich.live import Live

        return Live(self._view(), refresh_per_second=2, transient=False, get_renderable=self._view)

    def _view(self):
        from rich.text import Text

        failed = sum(1 for r in self.finished.values() if not r["ok"])
        running = len(self._started)
        elapsed = time.time() - self._since
        return Text(f"week {self._week}: {len(self.finished)}/{self.total} done, {running} running, {failed} failed, "
                    f"{int(elapsed) // 60}:{int(elapsed) % 60:02d} elapsed")
