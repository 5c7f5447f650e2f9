"""Failure taxonomy and re-execution policy, read from a run's Dagster event log.

A crashed source step is first re-executed inside its run by the executor (the raw assets' retry policy,
fleet/defs/assets.py). What is left after the run, for example steps interrupted when the run's own process
died, is handled by :func:`next_action`. It re-executes crashed sources in a new run. Both draw on one budget
of N re-executions per week and source, counted by :func:`crash_reexecutions` over every run of the week:
each in-run retry after a crash that started (``STEP_RESTARTED``), and each rerun run that selected the source. The raw
asset checks the same count when a re-execution starts and fails without retry once it is spent
(:func:`budget_exhausted`), so neither a rerun run's own retry policy nor a second ``fleet run`` of the week
gets N more. One policy, two drivers: the run-status sensor and ``fleet run`` both call :func:`next_action`.
``infra``  the step's process died without reporting, never finished, never started in a failed run, or the browser crashed
           or lost a process (its renderer, a zygote, the network service: observed by fleet/engine/chromium.py).
``source`` the scraper reported a failure: its exception, its timeout, bad rows, navigation after retries.
``refused`` the step did not scrape: its week was past when the run was created, without stored rows to reuse
(fleet/policy/pastweek.py). Nothing crashed and the source is not at fault: never re-executed, never
counted against the crash budget or toward the source's failures.
``blocked`` the site turned fleet away: HTTP 403, a 429 that did not clear within the source's time, or a captcha
or bot-check page. Alerted; like ``refused``, never re-executed within the run and never a failure of the source.
A source whose stored outcome is usable (ok, empty or partial, with its rows stored: ``store.usable_outcome``) is
not a crash to repair: a step of it that never started, or died after storing its result, is not rerun, and its
outcome is never overwritten with a crash (fleet/defs/automation.py), so the week keeps its rows.
A category is what fleet recorded for the attempt: the category its step's ``Failure`` carried, or the outcome the
attempt stored; a step that failed with neither was killed (``infra``). Dagster's exception classes and messages
never decide it. Steps are named by the asset they were planned to materialize (fleet/records.py), and every read
of the event log goes through fleet/records.py.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Iterable

from dagster import AssetKey, DagsterEventType, DagsterRunStatus

from fleet import records
from fleet.storage import store as keys

RAW_GROUP = "raw"                # a source's asset is raw/<source>
RAW_PREFIX = "raw__"             # Dagster's op name for raw/<source>: the key of its run config (``ops``)
PUBLISH_ASSET = AssetKey("consolidated_raw_rows")
TAG_KIND = "fleet/kind"          # scrape | rerun | publish | reprocess | release
TAG_ATTEMPT = "fleet/attempt"
TAG_RECOVERS = "fleet/recovers"
TAG_FAILURE = "fleet/failure"    # infra | source | refused | blocked | mixed
TAG_DRIVER = "fleet/driver"      # cli for the runs a fleet command requested (fleet/defs/requests.py)
TAG_REQUEST = "fleet/request"    # the id of the run request (fleet/defs/requests.py) a run, and its follow-ups, answer
TAG_REQUESTER = "fleet/requester"  # who submitted that request: host, pid (JSON, fleet/defs/runworker.py identity)
TAG_NEXT = "fleet/next"          # the policy's decision on a finished run: "rerun: ...", "publish: ..." or "none: ..."
TAG_SUPERSEDED = "fleet/superseded"  # on a run of an older fleet that stopped because an older run of its week was going; read, no longer set
PARTITION_TAG = "dagster/partition"
REFUSED = "refused"              # the category, and the stored status, of a source the past-week rule refused
QUARANTINED = "quarantined"      # the category, and the stored status, of a source the run skipped (fleet/lifecycle/quarantine.py)
BLOCKED = "blocked"              # the site turned fleet away (403, 429, a captcha page): fleet/scraping/blocked.py
CATEGORIES = ("infra", "source", REFUSED, QUARANTINED, BLOCKED)


@dataclasses.dataclass
class StepOutcome:
    source: str
    status: str                  # succeeded | failed | interrupted | not started
    category: str | None = None  # infra | source | refused | blocked
    error: str | None = None
    metadata: dict = dataclasses.field(default_factory=dict)
    retries: int = 0             # re-executions inside the run after a crash that started (Dagster's retry policy)
    host: str | None = None      # where the step ran (its ``fleet/host`` metadata), when it said so


@dataclasses.dataclass
class Action:
    kind: str                    # rerun | publish | none
    week: str | None
    sources: list[str] = dataclasses.field(default_factory=list)
    attempt: int = 1
    reason: str = ""
    exhausted: list[str] = dataclasses.field(default_factory=list)


def source_of_asset(key: AssetKey | None) -> str | None:
    return key.path[-1] if key is not None and len(key.path) == 2 and key.path[0] == RAW_GROUP else None


def _metadata_values(md) -> dict:
    out = {}
    for k, v in (md or {}).items():
        out[k] = getattr(v, "value", getattr(v, "text", v))
    return out


def step_sources(instance, run_id: str, *types: DagsterEventType) -> tuple[dict[str, str], list]:
    """``({step key: source}, [(source, record)])`` for run ``run_id``: its raw steps, named by the asset each was
    planned to materialize, and its events of ``types`` from those steps, in order (one query)."""
    sources, found = {}, []
    for rec in records.events(instance, run_id, {DagsterEventType.ASSET_MATERIALIZATION_PLANNED, *types}):
        ev = rec.event_log_entry.dagster_event
        if ev.event_type == DagsterEventType.ASSET_MATERIALIZATION_PLANNED:
            src = source_of_asset(ev.asset_key)
            if src and ev.step_key:
                sources[ev.step_key] = src
        elif ev.step_key in sources:
            found.append((sources[ev.step_key], rec))
    return sources, found


def _attempt_start(attempt: str | None) -> float | None:
    try:  # an attempt's id starts with its start time in UTC (fleet/storage/store.py new_attempt_id)
        return dt.datetime.strptime(attempt[:21], "%Y%m%dT%H%M%S%f").replace(tzinfo=dt.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


def recorded_outcome(store, week: str, source: str, run_id: str, since: float) -> dict | None:
    """The outcome fleet stored for the attempt of ``source`` that a step of run ``run_id`` started at ``since``,
    or None when that attempt stored none (its step died before the runner could record it)."""
    rec = keys.read_outcome(store, week, source) if week else None
    start = _attempt_start((rec or {}).get("attempt"))
    return rec if rec and rec.get("run_id") == run_id and start is not None and start >= since else None


def classify_failure(failure_data, recorded: dict | None) -> tuple[str, str]:
    """(category, message) of a failed step, from what fleet recorded: the category its ``Failure`` carried, else
    the stored outcome of its attempt, else none at all, which is a kill (``infra``). Dagster's error, its class
    or its message, never decides the category; its message only describes it."""
    user = getattr(failure_data, "user_failure_data", None)
    error = getattr(failure_data, "error", None)
    message = (error.message.strip() if error and error.message else "") or "step failed"
    if user is not None:
        cat = _metadata_values(user.metadata).get("fleet/category")
        if cat in CATEGORIES:
            return cat, user.description or message
    if recorded and recorded.get("category") in CATEGORIES:
        return recorded["category"], recorded.get("error") or message
    if recorded:  # its attempt stored a result and the step died after it
        return "infra", f"the step ended after its attempt stored {recorded.get('status')}: {message}"
    return "infra", message


def run_outcomes(instance, run, store) -> dict[str, StepOutcome]:
    """Per source scraped in ``run``: what happened to its step."""
    planned, found = step_sources(instance, run.run_id, DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS,
                                  DagsterEventType.STEP_FAILURE, DagsterEventType.STEP_RESTARTED,
                                  DagsterEventType.ASSET_MATERIALIZATION)
    week = run.tags.get(PARTITION_TAG)
    out: dict[str, StepOutcome] = {}
    retries: dict[str, int] = {}
    hosts: dict[str, str] = {}
    started: dict[str, float] = {}
    for src, rec in found:
        ev = rec.event_log_entry.dagster_event
        if ev.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            host = _metadata_values(ev.event_specific_data.materialization.metadata).get("fleet/host")
            if host:
                hosts[src] = host
        elif ev.event_type == DagsterEventType.STEP_RESTARTED:
            # a retry that ran; one asked for (STEP_UP_FOR_RETRY) when its run was stopped never did
            retries[src] = retries.get(src, 0) + 1
            started[src] = rec.event_log_entry.timestamp  # an outcome stored before it is an earlier attempt's
        elif ev.event_type == DagsterEventType.STEP_START:
            started[src] = rec.event_log_entry.timestamp
            out.setdefault(src, StepOutcome(src, "interrupted", "infra", "the step started but never finished (worker lost)"))
        elif ev.event_type == DagsterEventType.STEP_SUCCESS:
            out[src] = StepOutcome(src, "succeeded")
        else:
            data = ev.step_failure_data
            recorded = recorded_outcome(store, week, src, run.run_id, started.get(src, rec.event_log_entry.timestamp))
            cat, msg = classify_failure(data, recorded)
            md = _metadata_values(data.user_failure_data.metadata) if data.user_failure_data else {}
            out[src] = StepOutcome(src, "failed", cat, msg, md)
    if run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
        for src in planned.values():
            if src not in out:
                out[src] = StepOutcome(src, "not started", "infra", "the run ended before this step started")
    for src, n in retries.items():
        if src in out:
            out[src].retries = n
    for src, o in out.items():
        o.host = hosts.get(src) or o.metadata.get("fleet/host")
    return out


def failure_tag(outcomes: Iterable[StepOutcome]) -> str | None:
    cats = {o.category for o in outcomes if o.status != "succeeded"}
    if not cats:
        return None
    return cats.pop() if len(cats) == 1 else "mixed"


def crash_reexecutions(instance, week: str, sources: Iterable[str] | None = None) -> dict[str, int]:
    """Per source, the re-executions after a crash it has had (or has been granted) in ``week``, over all the
    week's runs: each ``STEP_RESTARTED`` of its step (an in-run retry that started, in a run of any kind), plus
    each rerun run whose selection holds it. This is the budget ``FLEET_CRASH_RERUNS`` bounds. A retry that is
    running counts itself (the step logs ``STEP_RESTARTED`` before its compute), and so does a running rerun
    run. A retry that was asked for (``STEP_UP_FOR_RETRY``) but never ran, because its run was stopped first,
    spends nothing: the rerun run the sensor launches for it is that re-execution.
    ``sources=None``: every source with a count."""
    wanted = None if sources is None else set(sources)
    counts: dict[str, int] = {s: 0 for s in wanted or ()}
    for run in records.runs(instance, {PARTITION_TAG: week}):
        if run.tags.get(TAG_KIND) == "rerun":
            for key in run.asset_selection or ():
                src = source_of_asset(key)
                if src and (wanted is None or src in wanted):
                    counts[src] = counts.get(src, 0) + 1
        for src, _rec in step_sources(instance, run.run_id, DagsterEventType.STEP_RESTARTED)[1]:
            if wanted is None or src in wanted:
                counts[src] = counts.get(src, 0) + 1
    return counts


BUDGET_TAG = "fleet/budget"  # on the Failure of a re-execution refused by budget_exhausted


def budget_exhausted(instance, run, source: str, retry_number: int, max_reruns: int) -> str | None:
    """Why the execution of ``source``'s step that is starting in ``run`` must not scrape, or None.

    The first attempt of a run that is not a rerun is no re-execution and always goes ahead (and costs no
    query). Any other is one of the week's :func:`crash_reexecutions`, counted with itself; beyond
    ``max_reruns`` it is refused."""
    if retry_number == 0 and run.tags.get(TAG_KIND) != "rerun":
        return None
    week = run.tags.get(PARTITION_TAG)
    spent = crash_reexecutions(instance, week, [source])[source] if week else 0
    if spent <= max_reruns:
        return None
    return (f"crash budget exhausted ({max_reruns} re-executions this week): source {source} has had the "
            f"re-executions after a crash that FLEET_CRASH_RERUNS={max_reruns} allows for week {week}; not scraping it again")


def step_config(run, source: str) -> dict:
    """The config ``run`` gave ``source``'s step (``RawConfig``: deep, refresh, ...)."""
    return ((run.run_config or {}).get("ops", {}).get(f"{RAW_PREFIX}{source}") or {}).get("config") or {}


def _asks_to_replace(run, source: str, stored: dict) -> bool:
    """Whether ``run`` was asked to scrape ``source`` again over its stored outcome (``--refresh``, or
    ``--deep`` over a shallow artifact), so a crash of its step leaves that request undone."""
    config = step_config(run, source)
    return bool(config.get("refresh")) or (bool(config.get("deep")) and not stored.get("deep", False))


def settled(store, run, source: str) -> bool:
    """A source of ``run`` that needs no crash re-execution whatever its step did: its stored outcome is usable,
    and either ``run`` stored it or ``run`` was not asked to replace it (a rerun would only reuse it)."""
    stored = keys.usable_outcome(store, run.tags.get(PARTITION_TAG), source)
    return stored is not None and (stored.get("run_id") == run.run_id or not _asks_to_replace(run, source, stored))


def published_in(instance, run) -> bool:
    """Whether ``run`` consolidated its week (materialized the asset the publish stage starts with)."""
    return any(rec.event_log_entry.dagster_event.asset_key == PUBLISH_ASSET
               for rec in records.events(instance, run.run_id, DagsterEventType.ASSET_MATERIALIZATION))


def next_action(instance, run, max_reruns: int, store, outcomes: dict | None = None) -> Action:
    """What should follow a finished run: re-execute its crashed sources (bounded), publish the week, or nothing.

    A crashed source is re-executed while its :func:`crash_reexecutions` for the week (this run's retries
    included) are fewer than ``max_reruns``; a :func:`settled` source is not re-executed, nor is a ``refused``
    one. A run whose sources were all refused is followed by nothing."""
    week = run.tags.get(PARTITION_TAG)
    outcomes = run_outcomes(instance, run, store) if outcomes is None else outcomes
    if not week or not outcomes:
        return Action("none", week, reason="not a scrape run")
    if all(o.category == REFUSED for o in outcomes.values()):
        # nothing was scraped or reused: a publish would commit the week's stored rows again, unchanged
        return Action("none", week, reason=f"every source of the run was refused: week {week} is past")
    crashed = sorted(s for s, o in outcomes.items() if o.category == "infra" and not settled(store, run, s))
    done = crash_reexecutions(instance, week, crashed)
    eligible = [s for s in crashed if done[s] < max_reruns]
    exhausted = [s for s in crashed if s not in eligible]
    if eligible:
        attempt = max(done[s] for s in eligible) + 2  # the first run is attempt 1
        return Action("rerun", week, eligible, attempt=attempt, exhausted=exhausted,
                      reason=f"re-executing crashed sources {', '.join(eligible)} (attempt {attempt})")
    if published_in(instance, run):
        return Action("none", week, reason="the run already consolidated and committed the week")
    return Action("publish", week, exhausted=exhausted, reason="scrape stage finished; consolidating and committing")
