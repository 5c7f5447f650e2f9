"""Run one source for one week in an attempt process, with a hard timeout, and store its raw artifact.

This is the isolation boundary: whatever the scraper does (raise, hang in asyncio, block in C, crash the
browser), the caller gets an ``Outcome`` back within ``timeout_s`` plus a few seconds. The process is a browser host
(fleet/engine/pool.py), or, for ``own_process`` and ``own_browser`` scrapers and ``browser_hosts="fresh"``, a new
one for this attempt alone. Either way, at the limit it is killed with its browser (fleet/engine/supervise.py).
"""
from __future__ import annotations

import contextlib

from fleet.errors import ScraperDefinitionError
from fleet.engine import outcome, pool, slot, supervise
from fleet.engine.spec import Trial, new_attempt
from fleet.scraping.contract import check_seconds
from fleet.scraping.discovery import Source
from fleet.engine.outcome import Outcome
from fleet.scraping.retry import RetryPolicy
from fleet.engine.settings import EngineSettings
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore

__all__ = ["Outcome", "Trial", "EngineSettings", "run_source"]


def run_source(source: Source, week: str, *, store: ArtifactStore, run_id: str, settings: EngineSettings,
               deep: bool = False, timeout_s: float | None = None, retry: dict | None = None, refresh: bool = False,
               reexecution: bool = False, forced: str | None = None, log=None, trial: Trial | None = None,
               judge_trace: bool = False) -> Outcome:
    """Scrape ``source`` for ``week`` (reusing a stored complete artifact unless ``refresh``), store and return its
    outcome. ``settings`` says which Chromium to launch and how attempt processes are kept (:class:`EngineSettings`).

    ``refresh`` also clears the source's work for the week (checkpoint, seen URLs, spooled rows), once: not on a
    ``reexecution``, the re-execution of a crashed attempt of the same request (Dagster's retry of the step, a
    rerun run), which resumes from what the crashed attempt left, as any re-execution does. ``forced``: the date
    a past week is scraped on under ``fleet/force=true`` (fleet/policy/pastweek.py), kept in its outcome so the
    week's commit says so. ``trial``: what a lifecycle command (`fleet test`, `canary`, ...) changes about the
    attempt (its network, its first rows); the attempt is otherwise this one, run the same way. ``judge_trace``:
    a successful attempt's trace waits in the work folder for the caller's quality gate (outcome.settle_trace)."""
    log_line = (log.info if log else (lambda *a: None))
    prefix = f"[run {run_id}] [{source.name}]"
    # one execution of the source's week at a time, on every host: a second (a redelivered task, a rerun of a
    # step taken for dead that still scrapes) waits, then reuses what the first stored (fleet/engine/slot.py)
    lease = (slot.source_lease(settings.slots_dir, settings.slots_shared, week, source.name, run_id,
                               say=lambda line: log_line(f"{prefix} {line}"))
             if trial is None else contextlib.nullcontext())
    # the stored attempt before the lease: one stored while this waited was made for this same request, and answers
    # a ``refresh`` too
    before = (keys.read_outcome(store, week, source.name) or {}).get("attempt")
    try:
        with lease:
            return _run_source(source, week, store, run_id, settings, deep, timeout_s, retry, refresh, reexecution,
                               forced, log, trial, judge_trace, before)
    except slot.SlotError as exc:  # the lease's or the cap's Redis cannot be reached: infra
        log_line(f"{prefix} {exc}")
        return outcome.failed(store, source.name, week, run_id, f"source {source.name}: {exc}", "infra")


def _run_source(source: Source, week: str, store: ArtifactStore, run_id: str, settings: EngineSettings, deep: bool,
                timeout_s: float | None, retry: dict | None, refresh: bool, reexecution: bool, forced: str | None, log,
                trial: Trial | None, judge_trace: bool, before: str | None = None) -> Outcome:
    """:func:`run_source` under its lease; ``before``: the stored attempt when it was asked for."""
    log_line = (log.info if log else (lambda *a: None))
    prefix = f"[run {run_id}] [{source.name}]"
    latest = keys.read_outcome(store, week, source.name) or {}
    previous = keys.stored_complete(store, week, source.name, deep=deep)
    # a corrupt object in the store (a garbled outcome, a truncated parquet) is named and never reused: scraped again
    problem = latest.get("corrupt") and latest["error"] or (previous and keys.rows_problem(store, week, previous))
    if problem:
        (log.warning if log else log_line)(f"{prefix} {problem}; scraping the source again")
        previous = None
    if previous is not None and (not refresh or previous.get("attempt") != before):
        out = Outcome(**{**previous, "reused": True, "run_id": run_id})
        log_line(f"{prefix} week {week} already scraped ({out.rows} rows"
                 f"{'' if not refresh else ', by the execution this one waited for'}); reusing the stored artifact")
        return out

    spool = keys.spool_key(source.name)
    if refresh and not reexecution:
        log_line(f"{prefix} refresh: clearing this week's checkpoint and spooled rows")
        for key in store.list(week, spool):
            store.delete(week, key)
        for p in store.workdir(week, spool).iterdir():
            p.unlink()
    work = store.sync_down(week, spool)
    outcome.clear_evidence(store.local_dir(week, keys.evidence_key(source.name)))
    if source.broken:
        return outcome.failed(store, source.name, week, run_id, source.error, "source")

    try:  # the run's own settings (RawConfig, from the UI or a schedule): refused before an attempt process is taken
        timeout = (check_seconds(source.name, "timeout_s (run config)", timeout_s) if timeout_s is not None
                   else float(source.timeout_s))
        RetryPolicy(**(retry or {}))
    except (ScraperDefinitionError, ValueError, TypeError) as exc:
        msg = str(exc) if isinstance(exc, ScraperDefinitionError) else f"source {source.name}: {exc}"
        return outcome.failed(store, source.name, week, run_id, msg, "source")

    attempt = new_attempt(source, week, store=store, run_id=run_id, deep=deep, timeout=timeout, retry=retry,
                          settings=settings, trial=trial, judge_trace=judge_trace)
    warm = settings.browser_hosts == "warm" and not (source.own_process or source.own_browser)
    # fleet's cap on sources scraping at once, held from the lease to the stored outcome (fleet/engine/slot.py);
    # the source's hard limit starts after it
    held = (slot.scrape_slot(settings.scrape_cap, settings.slots_dir, settings.slots_shared, source.name, run_id,
                             say=lambda line: log_line(f"{prefix} {line}"))
            if settings.scrape_cap else contextlib.nullcontext(0.0))
    with held as waited:
        try:
            proc, how = supervise.start(attempt, settings, warm)
        except pool.HostStartError as exc:
            result = {"status": "failed", "category": "infra", "error": f"source {source.name}: {exc}"}
            log_line(f"{prefix} {result['error']}")
            return outcome.finish(source, week, store, run_id, attempt.id, deep, work, result, 0.0, forced)
        if waited:
            how += f"; waited {waited:g}s for a scrape slot"
        seen = supervise.supervise(proc, attempt, how=how, timeout=timeout, startup_s=settings.startup_s,
                                   log_line=log_line, prefix=prefix)
        result = outcome.classify(source, attempt, seen, timeout=timeout, startup_s=settings.startup_s)
        return outcome.finish(source, week, store, run_id, attempt.id, deep, work, result, seen.seconds, forced)
