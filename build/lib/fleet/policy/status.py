"""Per-source status of a week, read from the Dagster instance (step outcomes) and the stored outcomes (rows, seconds);
the week's failed checks as the instance records them."""
from __future__ import annotations

import dataclasses

from fleet import records
from fleet.policy import taxonomy as tx
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore


@dataclasses.dataclass
class SourceStatus:
    source: str
    status: str            # ok | partial | empty | failed | timeout | refused | quarantined | not run
    category: str | None
    rows: int
    seconds: float
    attempts: int
    error: str | None
    note: str = ""
    host: str = ""         # where its last step ran


def week_runs(instance, week: str) -> list:
    """The week's runs that count: not one refused because another held the week (fleet/defs/claim.py), whose
    planned steps never started and said nothing of the week."""
    return [r for r in records.runs(instance, {tx.PARTITION_TAG: week}) if tx.TAG_SUPERSEDED not in r.tags]


def week_status(instance, store: ArtifactStore, week: str, sources: list[str]) -> list[SourceStatus]:
    history: dict[str, list[tx.StepOutcome]] = {s: [] for s in sources}
    for run in week_runs(instance, week):
        for src, outcome in tx.run_outcomes(instance, run, store).items():
            if src in history:  # a source an earlier run of the week had and this code does not: not this table's
                history[src].append(outcome)
    out = []
    for src in sorted(history):
        steps = history[src]
        stored = keys.read_outcome(store, week, src) or {}
        if not steps:
            out.append(SourceStatus(src, stored.get("status", "not run"), stored.get("category"), int(stored.get("rows") or 0),
                                    float(stored.get("seconds") or 0), 0, stored.get("error")))
            continue
        last = steps[-1]
        # a source whose stored outcome is usable keeps it through a later run's crash (fleet/defs/automation.py)
        kept = last.status != "succeeded" and last.category == "infra" and keys.usable_outcome(store, week, src) is not None
        if last.status == "succeeded" or kept:
            status, category, error = stored.get("status", "ok"), None, stored.get("error") if stored.get("status") == "partial" else None
        elif last.category == "infra":
            status, category, error = "failed", "infra", last.error
        else:
            status = last.metadata.get("fleet/status") or stored.get("status") or "failed"
            category, error = last.category, last.error
        note = ""
        tried = [s for s in steps if s.status != "not started"]  # a step that never started made no attempt
        # each in-run retry followed a crash; so did every run whose step ended as infra, except for an execution
        # the crash budget refused (it neither scraped nor crashed: fleet/defs/assets.py check_crash_budget). A
        # step the past-week rule refused made no attempt either.
        refused = sum(1 for s in tried if s.metadata.get(tx.BUDGET_TAG))
        attempts = sum(1 + s.retries for s in tried) - refused - sum(1 for s in tried if s.category in (tx.REFUSED, tx.QUARANTINED))
        crashed = sum(s.retries for s in tried) + sum(1 for s in tried if s.category == "infra") - refused
        if kept:
            note = f"kept the stored rows of run {stored.get('run_id')}; the last run's step {last.status}: {last.error}"
        elif last.status == "succeeded" and crashed:
            note = f"recovered from infra failure on attempt {attempts}"
        elif last.category == "infra" and attempts and crashed == attempts:
            note = f"infra failure on all {attempts} attempts"
        rows = int(stored.get("rows") or 0) if status in ("ok", "partial", "empty") else 0
        host = next((s.host for s in reversed(steps) if s.host), "")
        out.append(SourceStatus(src, status, category, rows, float(stored.get("seconds") or 0), attempts, error, note,
                                host))
    return out


@dataclasses.dataclass
class FailedCheck:
    source: str
    check: str
    severity: str          # ERROR | WARN, or "-" for a check its step never evaluated
    message: str


def failed_checks(instance, week: str, sources: list[str], check: str, parts) -> list[FailedCheck]:
    """The checks the Dagster UI shows as failed for ``week``, from what the instance records: each source's
    ``check``'s latest execution for the week's partition, evaluated as failed (listed per failed part of it, from
    its metadata: ``parts`` are their names), or planned in a run that failed without evaluating it (the UI's
    "Execution failed": its step failed). The stored check results alone miss the latter, so `fleet status` said
    "0 failed" while the UI showed the checks of every failed source as failed."""
    out = []
    counted = {r.run_id for r in week_runs(instance, week)}
    for source in sources:
        latest = _latest_check(instance, source, check, week, counted)
        if latest is None:
            continue
        if latest.status.value == "FAILED":
            evaluation = latest.event.dagster_event.event_specific_data
            said = {name: getattr(evaluation.metadata.get(name), "value", "") for name in parts}
            failed = [(name, text.partition(": ")) for name, text in said.items() if text.startswith("failed ")]
            out += [FailedCheck(source, name, verdict.split()[-1], message) for name, (verdict, _, message) in failed]
            if not failed:  # evaluated by another version of fleet: the check as a whole
                out.append(FailedCheck(source, check, evaluation.severity.value, evaluation.description or ""))
        elif latest.status.value == "PLANNED":
            run = records.run_by_id(instance, latest.run_id)
            if run is not None and run.status.value == "FAILURE":
                out.append(FailedCheck(source, check, "-", f"not evaluated: run {latest.run_id[:8]} failed "
                                                           "before the check ran (see the source's status)"))
    return out


def _latest_check(instance, source: str, check: str, week: str, counted: set[str]):
    """The latest execution of ``source``'s ``check`` for ``week`` in one of the runs that count (``week_runs``: a
    superseded run's planned check is no trace of it)."""
    from dagster import AssetCheckKey, AssetKey

    key = AssetCheckKey(AssetKey(["raw", source]), check)
    return next((r for r in records.check_history(instance, key) if r.partition == week and r.run_id in counted),
                None)


def skipped_checks(instance, week: str, sources: list[str], check: str, parts) -> list[FailedCheck]:
    """The parts of each source's ``check`` (its latest evaluation for ``week``) whose usual judgement was skipped,
    with why and what judged instead (``<part>/skipped`` in its metadata: fleet/quality/outcome.py): a check that
    could not look is not one that looked and passed. ``severity`` is "-"."""
    out = []
    counted = {r.run_id for r in week_runs(instance, week)}
    for source in sources:
        latest = _latest_check(instance, source, check, week, counted)
        if latest is None or latest.status.value not in ("SUCCEEDED", "FAILED"):
            continue
        metadata = latest.event.dagster_event.event_specific_data.metadata
        out += [FailedCheck(source, name, "-", str(getattr(metadata[f"{name}/skipped"], "value", "")))
                for name in parts if f"{name}/skipped" in metadata]
    return out


def domain_summary(store: ArtifactStore, week: str, sources: list[str], politeness_root=None,
                   shared: str = "") -> dict[str, dict]:
    """Per domain, over the week's stored outcomes (fleet/scraping/politeness.py ``summary``): requests, 429s,
    Retry-After waits, the least concurrency and the interval used, robots.txt; and the concurrency level the 429
    backoff holds for next week (fleet/scraping/backoff.py), read where the attempts keep it (``shared``: the
    broker's Redis once fleet scales out, config.politeness()'s)."""
    import asyncio
    import datetime as dt

    from fleet.scraping.politeness import Politeness

    out: dict[str, dict] = {}
    for name in sources:
        for host, st in ((keys.read_outcome(store, week, name) or {}).get("domains") or {}).items():
            d = out.setdefault(host, {"requests": 0, "http_429": 0, "retry_after_waits": 0, "retry_after_s": 0.0,
                                      "concurrency": None, "interval_s": 0.0, "robots": set(), "sources": []})
            for k in ("requests", "http_429", "retry_after_waits", "retry_after_s"):
                d[k] += st.get(k) or 0
            if st.get("concurrency") is not None:
                d["concurrency"] = min(d["concurrency"] or st["concurrency"], st["concurrency"])
            d["interval_s"] = max(d["interval_s"], st.get("interval_s") or 0.0)
            d["robots"].add(st.get("robots") or "-")
            d["sources"].append(name)
    following = (dt.date.fromisoformat(week) + dt.timedelta(days=7)).isoformat()
    for d in out.values():
        d["robots"] = "; ".join(sorted(d["robots"]))

    async def halvings():
        polite = Politeness(politeness_root, 1, 0.0, source="fleet status", shared=shared, week=following,
                            obey_robots=False)
        try:
            for host, d in out.items():
                d["next_week_halvings"] = await polite.backoff_level(host)
        finally:
            await polite.close()
    if politeness_root and out:
        asyncio.run(halvings())
    return out
