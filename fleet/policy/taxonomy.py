"""Failure taxonomy and re-execution policy, read from a run's Dagster event log.

A crashed source step is first re-executed inside its run by the executor (the raw assets' retry policy,
fleet/defs/assets.py). What is left after the run, for example steps interrupted when the run's own process
died, is handled by :func:`next_action`. It re-executes crashed sources in a new run. Both draw on one budget
of N re-executions per week and source, counted by :func:`crash_reexecutions` over every run of the week:
each in-run retry after a crash that started (``STEP_RESTARTED``), and each rerun run that selected the source. The raw
asset checks the same count when a re-execution starts and fails without retry once it is spent
(:func:`budget_exhausted`), so neither a rerun run's own retry policy nor a second ``fleet run`` of the week
gets N more. One policy, two drivers: the run-status sensor and ``fleet run`` both call :func:`next_action`.
``infra``  the step's process died without reporting, never finished, never started in a failed run, or the browser crashed.
``source`` the scraper reported a failure: its exception, its timeout, bad rows, navigation after retries.
``refused`` the step did not scrape: its week was past when the run was created, without stored rows to reuse
(fleet/policy/pastweek.py). Nothing crashed and the source is not at fault: never re-executed, never
counted against the crash budget or toward the source's failures.
``blocked`` the site turned fleet away: HTTP 403, a 429 that did not clear within the source's time, or a captcha
or bot-check page. Alerted; like ``refused``, never re-executed within the run and never a failure of the source.
A source whose stored outcome is usable (ok, empty or partial, with its rows stored: ``store.usable_outcome``) is
not a crash to repair: a step of it that never started, or died after storing its result, is not rerun, and its
outcome is never overwritten with a crash (fleet/defs/automation.py), so the week keeps its rows.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from fleet.storage import store as keys

RAW_PREFIX = "raw__"
PUBLISH_STEP = "consolidated_raw_rows"
INFRA_ERRORS = ("ChildProcessCrashException", "DagsterExecutionInterruptedError", "ChildProcessCrashedError",
                "DagsterUnknownStepStateError")
TAG_KIND = "fleet/kind"          # scrape | rerun | publish | reprocess | release
TAG_ATTEMPT = "fleet/attempt"
TAG_RECOVERS = "fleet/recovers"
TAG_FAILURE = "fleet/failure"    # infra | source | refused | blocked | mixed
TAG_DRIVER = "fleet/driver"      # cli for the runs `fleet run` launches
TAG_SUPERSEDED = "fleet/superseded"  # on a run that stopped because an older run of its week was going (fleet/defs/claim.py)
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


def source_of(step_key: str) -> str | None:
    return step_key[len(RAW_PREFIX):] if step_key.startswith(RAW_PREFIX) else None


def _error_names(error) -> list[str]:
    names = []
    while error is not None:
        names.append(error.cls_name or "")
        error = error.cause or getattr(error, "context", None)
    return names


def _metadata_values(md) -> dict:
    out = {}
    for k, v in (md or {}).items():
        out[k] = getattr(v, "value", getattr(v, "text", v))
    return out


def classify_failure(failure_data) -> tuple[str, str]:
    """(category, message) of a STEP_FAILURE event's data."""
    user = getattr(failure_data, "user_failure_data", None)
    error = getattr(failure_data, "error", None)
    if user is not None:
        md = _metadata_values(user.metadata)
        cat = md.get("fleet/category")
        if cat in CATEGORIES:
            return cat, user.description or (error.message if error else "")
    names = _error_names(error)
    message = (error.message.strip() if error and error.message else "") or "step failed"
    if any(n in INFRA_ERRORS for n in names):
        return "infra", message
    return "source", message


def planned_steps(instance: DagsterInstance, run) -> list[str]:
    if run.execution_plan_snapshot_id:
        snap = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
        if snap is not None:
            keys = snap.step_keys_to_execute or [s.key for s in snap.steps]
            return list(keys)
    return []


def run_outcomes(instance: DagsterInstance, run) -> dict[str, StepOutcome]:
    """Per source scraped in ``run``: what happened to its step."""
    records = instance.all_logs(run.run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS,
                                                      DagsterEventType.STEP_FAILURE, DagsterEventType.STEP_RESTARTED,
                                                      DagsterEventType.ASSET_MATERIALIZATION})
    out: dict[str, StepOutcome] = {}
    retries: dict[str, int] = {}
    hosts: dict[str, str] = {}
    for rec in records:
        ev = rec.dagster_event
        src = source_of(ev.step_key or "")
        if src is None:
            continue
        if ev.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            host = _metadata_values(ev.event_specific_data.materialization.metadata).get("fleet/host")
            if host:
                hosts[src] = host
        elif ev.event_type == DagsterEventType.STEP_RESTARTED:
            # a retry that ran; one asked for (STEP_UP_FOR_RETRY) when its run was stopped never did
            retries[src] = retries.get(src, 0) + 1
        elif ev.event_type == DagsterEventType.STEP_START:
            out.setdefault(src, StepOutcome(src, "interrupted", "infra", "the step started but never finished (worker lost)"))
        elif ev.event_type == DagsterEventType.STEP_SUCCESS:
            out[src] = StepOutcome(src, "succeeded")
        else:
            data = ev.step_failure_data
            cat, msg = classify_failure(data)
            md = _metadata_values(data.user_failure_data.metadata) if data.user_failure_data else {}
            out[src] = StepOutcome(src, "failed", cat, msg, md)
    if run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
        for key in planned_steps(instance, run):
            src = source_of(key)
            if src and src not in out:
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


def crash_reexecutions(instance: DagsterInstance, week: str, sources: Iterable[str] | None = None) -> dict[str, int]:
    """Per source, the re-executions after a crash it has had (or has been granted) in ``week``, over all the
    week's runs: each ``STEP_RESTARTED`` of its step (an in-run retry that started, in a run of any kind), plus
    each rerun run whose selection holds it. This is the budget ``FLEET_CRASH_RERUNS`` bounds. A retry that is
    running counts itself (the step logs ``STEP_RESTARTED`` before its compute), and so does a running rerun
    run. A retry that was asked for (``STEP_UP_FOR_RETRY``) but never ran, because its run was stopped first,
    spends nothing: the rerun run the sensor launches for it is that re-execution.
    ``sources=None``: every source with a count."""
    wanted = None if sources is None else set(sources)
    counts: dict[str, int] = {s: 0 for s in wanted or ()}
    for run in instance.get_runs(RunsFilter(tags={PARTITION_TAG: week})):
        if run.tags.get(TAG_KIND) == "rerun":
            for key in run.asset_selection or ():
                src = key.path[-1] if len(key.path) == 2 and key.path[0] == "raw" else None
                if src and (wanted is None or src in wanted):
                    counts[src] = counts.get(src, 0) + 1
        for rec in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_RESTARTED):
            src = source_of(rec.dagster_event.step_key or "")
            if src and (wanted is None or src in wanted):
                counts[src] = counts.get(src, 0) + 1
    return counts


BUDGET_TAG = "fleet/budget"  # on the Failure of a re-execution refused by budget_exhausted


def budget_exhausted(instance: DagsterInstance, run, source: str, retry_number: int, max_reruns: int) -> str | None:
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


def _asks_to_replace(run, source: str, stored: dict) -> bool:
    """Whether ``run`` was asked to scrape ``source`` again over its stored outcome (``--refresh``, or
    ``--deep`` over a shallow artifact), so a crash of its step leaves that request undone."""
    config = ((run.run_config or {}).get("ops", {}).get(f"{RAW_PREFIX}{source}") or {}).get("config") or {}
    return bool(config.get("refresh")) or (bool(config.get("deep")) and not stored.get("deep", False))


def settled(store, run, source: str) -> bool:
    """A source of ``run`` that needs no crash re-execution whatever its step did: its stored outcome is usable,
    and either ``run`` stored it or ``run`` was not asked to replace it (a rerun would only reuse it)."""
    stored = keys.usable_outcome(store, run.tags.get(PARTITION_TAG), source)
    return stored is not None and (stored.get("run_id") == run.run_id or not _asks_to_replace(run, source, stored))


def published_in(instance: DagsterInstance, run) -> bool:
    records = instance.all_logs(run.run_id, of_type={DagsterEventType.STEP_SUCCESS})
    return any(r.dagster_event.step_key == PUBLISH_STEP for r in records)


def next_action(instance: DagsterInstance, run, max_reruns: int, store, outcomes: dict | None = None) -> Action:
    """What should follow a finished run: re-execute its crashed sources (bounded), publish the week, or nothing.

    A crashed source is re-executed while its :func:`crash_reexecutions` for the week (this run's retries
    included) are fewer than ``max_reruns``; a :func:`settled` source is not re-executed, nor is a ``refused``
    one. A run whose sources were all refused is followed by nothing."""
    week = run.tags.get(PARTITION_TAG)
    outcomes = run_outcomes(instance, run) if outcomes is None else outcomes
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
