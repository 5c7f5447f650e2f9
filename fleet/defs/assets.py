"""The asset graph: raw/<source> per scraper -> consolidated_raw_rows -> raw_commit -> post_processed -> processed_commit."""
# No `from __future__ import annotations` here: Dagster inspects the annotations of asset functions at runtime.
import contextlib
import dataclasses
from typing import Optional

import polars as pl
from dagster import (
    AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetExecutionContext, AssetKey, AssetObservation, Backoff,
    Config, Failure, MaterializeResult, MetadataValue, RetryPolicy, WeeklyPartitionsDefinition, asset,
)

from fleet.config import worker_name
from fleet.quality import alerts as alerting
from fleet.quality import baseline as first_weeks
from fleet.quality import checks as qc
from fleet.defs import codeversion
from fleet.defs.evidence import evidence_metadata, failure_observation
from fleet.quality import gate
from fleet.quality.structure import structure_check
from fleet.defs.resources import Alerts, ArtifactStore, Browser, DataRepository
from fleet.lifecycle import quarantine
from fleet.policy import followup, pastweek
from fleet.policy import taxonomy as tx
from fleet.policy.status import domain_summary
from fleet.engine import outcome as scrape_outcome
from fleet.scraping.discovery import Source
from fleet.engine.runner import run_source
from fleet.storage import faults
from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.transform.consolidate import consolidate
from fleet.transform.postprocess import post_process

RAW_GROUP = "raw"
PUBLISH_GROUP = "publish"


def partitions(start_week: str) -> WeeklyPartitionsDefinition:
    # ISO weeks start on Monday (day_offset=1); end_offset=1 includes the in-progress week for manual runs.
    return WeeklyPartitionsDefinition(start_date=start_week, day_offset=1, end_offset=1, fmt="%Y-%m-%d")


class RawConfig(Config):
    deep: bool = False
    """Turn on this source's expensive phase (detail pages)."""
    timeout_s: Optional[float] = None
    """Override the scraper's timeout_s for this run."""
    refresh: bool = False
    """Scrape again even if this week's artifact is already stored."""
    retry_attempts: int = 3
    """Attempts for transient navigation errors."""


QUALITY_CHECK = followup.QUALITY_CHECK
"""A source's one Dagster check: it carries the results of the five below (one check, not five, so a step's tail
is one check's two events instead of ten, and a run plans one check evaluation per source)."""
SOURCE_CHECKS = {
    "non_empty": "The source returned at least one row this week (ERROR: empty feed).",
    "volume": "Rows against the median of the last 4 successful weeks, or in a source's first weeks its fixture's "
              "(WARN below 50%, ERROR below 10%: the quality gate holds the source out of the week's commit).",
    "coverage": "Per-column fill rate and value shape against the trailing weeks, or in a source's first weeks the "
                "fill against its fixture's or its schema (WARN: selector rot suspected; the quality gate holds the "
                "source out of the week's commit).",
    "schema": "The stored columns and types equal the scraper's declared schema (else the quality gate holds the "
              "source out of the week's commit).",
    "structure": "The aria structure of the regions the scraper reads, and the page's frame around them (its "
                 "landmarks and headings), against the last week's (WARN: either moved while rows still come out; "
                 "fleet/quality/structure.py).",
}
SEVERITY = {"ERROR": AssetCheckSeverity.ERROR, "WARN": AssetCheckSeverity.WARN}


checks_key = qc.checks_key


def run_source_checks(source: Source, week: str, store, attempt: str) -> list:
    """Evaluate the source's checks on the rows ``attempt`` stored, against its own history; store the results
    for alerting."""
    # rows stored before fleet's columns had their namespace are read under today's names (reused by a rerun)
    frame = provenance.upgrade_raw(store.read_parquet(week, keys.raw_key(source.name, attempt)))
    outcomes = qc.source_checks(source.name, source.schema, frame, qc.history(store, source.name, week),
                                warn_ratio=source.volume_warn_ratio, error_ratio=source.volume_error_ratio, week=week,
                                baseline=first_weeks.for_source(source), optional=source.optional)
    if frame.height == 0:
        # one problem, one alert: an empty feed is reported by non_empty, not again as a volume collapse
        outcomes = [dataclasses.replace(o, passed=True, message="skipped: empty feed (see non_empty)",
                                        skipped="empty feed (see non_empty)")
                    if o.name == "volume" else o for o in outcomes]
    outcomes.append(structure_check(store, week, source.name, frame.height))
    qc.save_profile(store, week, source.name, qc.profile(frame))
    store.write_json(week, checks_key(source.name), [dataclasses.asdict(o) for o in outcomes])
    return outcomes


def alert_week(context, store, week: str, sources: list[str], alerts: Alerts, limits: dict | None = None,
               owners: dict | None = None) -> list:
    """Turn the week's failed checks and missing sources into alerts, once each (the ledger dedups reruns); a
    source in quarantine raises one alert, in the week it got there (``limits``: its ``quarantine_after``). A
    source's alerts go to its owner's route (``owners``: source -> owner; fleet/quality/alerts.py)."""
    found = []
    for name in sources:
        failed = [qc.CheckOutcome(**r) for r in (store.read_json(week, checks_key(name)) or []) if not r["passed"]]
        if failed:
            rec = keys.read_outcome(store, week, name) or {}
            found += alerting.from_source_checks(name, week, failed, category=rec.get("category"),
                                                 evidence=rec.get("evidence"), run_id=context.run_id,
                                                 last_good_week=qc.last_good_week(store, name, week))
    # a source nobody asked to run this week (`--source` subsets) is not a problem to alert on, nor is one that
    # quarantine skipped: it alerted once, when it got there
    skipped = quarantine.held(store, week, sources)
    week_results = [r for r in qc.week_checks(store, week, sources)
                    if not (r["check"] == "missing" and r.get("status") == "not run") and r.get("source") not in skipped]
    found += alerting.from_week_checks(week, week_results, run_id=context.run_id)
    found += quarantine.alerts(store, week, limits or {}, context.run_id)
    sent = alerting.deliver(found, alerts.home, webhook=alerts.webhook or "", owners=owners, routes=alerts.routes)
    for a in sent:
        context.log.warning(f"[run {context.run_id}] [{a.source or 'week'}] ALERT {a.severity} {a.check}: {a.message}")
    return sent


def crash_retry_policy(crash_reruns: int) -> RetryPolicy:
    """Re-execute a crashed source step inside the run, at most ``FLEET_CRASH_RERUNS`` times, after 1 s, 2 s, 4 s…

    The multiprocess executor applies an asset's retry policy when the step's process dies (SIGKILL, OOM), so the
    crashed source starts again while the rest of the week goes on; a rerun run after the week would cost a
    second pass. A source failure never reaches it: the asset raises ``Failure(allow_retries=False)`` for those.
    The policy is the same N in every run; what bounds a source's re-executions over the week (a rerun run's
    retries, a second run of the week) is the raw asset's budget check (``check_crash_budget``)."""
    return RetryPolicy(max_retries=crash_reruns, delay=1, backoff=Backoff.EXPONENTIAL)


def check_crash_budget(context, source: str, crash_reruns: int) -> None:
    """Refuse a re-execution of ``source`` beyond the week's crash budget (taxonomy.budget_exhausted), before it
    takes a browser host: ``Failure(allow_retries=False)``, category infra, tagged ``fleet/budget``."""
    refused = tx.budget_exhausted(context.instance, context.run, source, context.retry_number, crash_reruns)
    if refused:
        context.log.warning(f"[run {context.run_id}] [{source}] {refused}")
        raise Failure(description=f"[infra] {refused}",
                      metadata={"fleet/status": "failed", "fleet/category": "infra", tx.BUDGET_TAG: "exhausted"},
                      allow_retries=False)


def host_label() -> str:
    """Which host scraped: the `fleet worker` (its Celery node name, worker@host: FLEET_WORKER_NAME), else the
    machine."""
    return worker_name()


def refuse_other_code(context, source: str) -> None:
    """A worker whose fleet or scrapers differ from the code the run was planned with refuses the step, naming
    both versions (fleet/defs/codeversion.py): ``infra``, so it runs again on a worker that matches."""
    why = codeversion.mismatch(context.run.tags, f"raw/{source}")
    if why:
        context.log.error(f"[run {context.run_id}] [{source}] {why}")
        raise Failure(description=f"[infra] {why}", metadata={"fleet/status": "failed", "fleet/category": "infra",
                                                              "fleet/host": MetadataValue.text(host_label())})


def refuse_past_week(context, source: str, week: str, store, config: RawConfig) -> str | None:
    """Refuse to scrape today's web into a past week (fleet/policy/pastweek.py), whatever launched the run (the
    UI, a backfill, the schedule, a sensor, ``fleet run``): the source's outcome is stored as ``refused`` and the
    step fails with ``Failure(allow_retries=False)``, category ``refused``. Returns the date a past week is
    scraped on when the run is forced (``fleet/force=true``), else None."""
    why, forced = pastweek.judge_step(context.instance, context.run, week, source, store=store, deep=config.deep,
                                      refresh=config.refresh)
    if forced:
        context.log.warning(f"[run {context.run_id}] [{source}] week {week} is past; scraping it from today's web "
                            f"anyway ({pastweek.FORCE_TAG}=true)")
    if why:
        scrape_outcome.failed(store, source, week, context.run_id, why, tx.REFUSED, status=tx.REFUSED)
        context.log.warning(f"[run {context.run_id}] [{source}] {why}")
        context.log_event(failure_observation(AssetKey(["raw", source]), week, tx.REFUSED, why, {}))
        raise Failure(description=f"[{tx.REFUSED}] {why}",
                      metadata={"fleet/status": tx.REFUSED, "fleet/category": tx.REFUSED, "week": week,
                                "source": source, "error": MetadataValue.text(why)},
                      allow_retries=False)
    return forced


def skip_quarantined(context, source: Source, week: str, store, config: RawConfig) -> None:
    """Skip a quarantined source (fleet/lifecycle/quarantine.py) before it takes a browser host: its outcome
    is stored as ``quarantined`` and the step fails with ``Failure(allow_retries=False)`` of that category. A week
    whose complete rows are stored is reused as ever."""
    if not config.refresh and keys.stored_complete(store, week, source.name, deep=config.deep) is not None:
        return
    q = quarantine.state(store, source.name, source.quarantine_after, before=week)
    if q is None:
        return
    why = quarantine.skip(store, source.name, week, context.run_id, q)
    context.log.warning(f"[run {context.run_id}] [{source.name}] {why}")
    metadata = {"fleet/status": tx.QUARANTINED, "fleet/category": tx.QUARANTINED, "quarantined_since": q.since,
                "error": MetadataValue.text(why)}
    # a failed step's metadata is not on the asset's page; an observation of the partition is, in its events
    context.log_event(AssetObservation(asset_key=AssetKey(["raw", source.name]), partition=week,
                                       description=why, metadata=metadata))
    raise Failure(description=f"[{tx.QUARANTINED}] {why}", metadata=metadata, allow_retries=False)


@contextlib.contextmanager
def storage_failures(context, source: str, store):
    """A read or write of the artifact store that failed for the storage's sake (the disk full, the object store
    not answering: ``faults.storage_failure``) fails the step as ``infra``, naming it, and may be re-executed."""
    try:
        yield
    except Exception as exc:
        why = faults.storage_failure(exc, store)
        if why is None:
            raise
        context.log.error(f"[run {context.run_id}] [{source}] {why}")
        raise Failure(description=f"[infra] source {source}: {why}", allow_retries=True,
                      metadata={"fleet/status": "failed", "fleet/category": "infra", "error": MetadataValue.text(why),
                                "fleet/host": MetadataValue.text(host_label())}) from exc


def tag_sandbox_off(context, settings, source: Source) -> None:
    """A run that scrapes without the browser sandbox (the operator's FLEET_SANDBOX=off) says so in its tags
    (``fleet/sandbox``); where the sandbox cannot be had, the step is refused (``SandboxRefused``)."""
    from fleet import records
    from fleet.engine import sandbox

    box = sandbox.for_attempt(settings, source.module_path)
    if box.off and context.run.tags.get(sandbox.TAG) != "off":
        records.add_tags(context.instance, context.run_id, {sandbox.TAG: "off"})


def _raw_compute(source: Source, crash_reruns: int):
    """The compute function of ``raw/<source>``: scrape the week (or reuse it), check it, report it."""
    key = AssetKey(["raw", source.name])

    def _raw(context: AssetExecutionContext, config: RawConfig, artifacts: ArtifactStore, browser: Browser):
        week = context.partition_key
        refuse_other_code(context, source.name)
        check_crash_budget(context, source.name, crash_reruns)
        store = artifacts.store()
        forced = refuse_past_week(context, source.name, week, store, config)
        skip_quarantined(context, source, week, store, config)
        # A crash's re-execution (in the run, or a rerun run of the sensors or `fleet run`) carries the first
        # attempt's config: its `refresh` must not clear what the crashed attempt left to resume from.
        reexecution = context.retry_number > 0 or context.run.tags.get(tx.TAG_KIND) == "rerun"
        settings = browser.engine_settings()
        tag_sandbox_off(context, settings, source)
        with storage_failures(context, source.name, store):
            out = run_source(source, week, store=store, run_id=context.run_id, deep=config.deep,
                             timeout_s=config.timeout_s, refresh=config.refresh, reexecution=reexecution,
                             retry={"attempts": config.retry_attempts}, forced=forced, log=context.log,
                             settings=settings, judge_trace=True)
        common = {
            "fleet/status": out.status, "seconds": float(out.seconds), "pages": out.pages,
            "url": MetadataValue.text(out.url or "-"), "fleet/host": MetadataValue.text(host_label()),
            # the attempt whose rows and outcome count (fleet/storage/store.py read_outcome): its own keys in the store
            "fleet/attempt": MetadataValue.text(out.attempt or "-"),
            # per domain: requests, 429s, Retry-After waits, concurrency used, robots.txt (fleet/scraping/politeness.py)
            **({"fleet/domains": MetadataValue.json(out.domains)} if out.domains else {}),
            **({} if source.obey_robots else {"fleet/robots": MetadataValue.text(
                f"not obeyed: {source.obey_robots_reason}")}),
        }
        if not out.succeeded:
            evidence = evidence_metadata(store, week, source.name, out.evidence)
            context.log_event(failure_observation(key, week, out.category or "source", out.error or "",
                                                  {**common, **evidence}))
            raise Failure(
                description=f"[{out.category}] {out.error}",
                metadata={**common, "fleet/category": out.category or "source", "error": MetadataValue.text(out.error or ""),
                          **evidence},
                # infra (the browser or the attempt process died) may recover on a re-execution; a source failure will not
                allow_retries=out.category == "infra",
            )
        if out.status == "partial":
            context.log.warning(f"[run {context.run_id}] [{source.name}] {out.error}; keeping the {out.rows} rows collected")
        with storage_failures(context, source.name, store):
            outcomes = run_source_checks(source, week, store, out.attempt)
        coverage = next((o.metadata for o in outcomes if o.name == "coverage"), {})
        # rows the quality gate holds out keep the attempt's Playwright trace, as a failure does
        held = scrape_outcome.settle_trace(store, week, out, bool(gate.blocking_failures(store, week, source.name)))
        yield MaterializeResult(
            metadata={**common, **(evidence_metadata(store, week, source.name, held) if held else {}), "dagster/row_count": out.rows, "path": MetadataValue.path(store.location(week, keys.raw_key(source.name, out.attempt))),
                      "reused": out.reused,
                      **{k: float(v) for k, v in coverage.items() if k.startswith("coverage/") and v is not None}})
        # The check follows the materialization it evaluates, naming its asset and check. Embedded in the
        # MaterializeResult (check_results=), Dagster looked up the asset's latest materialization once more per
        # check, only to learn the check's key.
        yield quality_result(key, outcomes)

    return _raw


def quality_result(key: AssetKey, outcomes: list) -> AssetCheckResult:
    """The source's one check from its five outcomes: failed when any failed, ERROR when a failed one is; its
    description names each failed one, and each one whose usual judgement was skipped, why; its metadata holds
    every one's verdict (``<name>``), figures (``<name>/...``) and the reason it was skipped
    (``<name>/skipped``), which `fleet status` lists (fleet/policy/status.py ``failed_checks``,
    ``skipped_checks``)."""
    failed = [o for o in outcomes if not o.passed]
    metadata = {o.name: MetadataValue.text(f"{'passed' if o.passed else 'failed ' + o.severity}: {o.message}")
                for o in outcomes}
    metadata.update({k if k.startswith(f"{o.name}/") else f"{o.name}/{k}": v
                     for o in outcomes for k, v in o.metadata.items() if v is not None})
    metadata.update({f"{o.name}/skipped": MetadataValue.text(o.skipped) for o in outcomes if o.skipped})
    skipped = ", ".join(f"{o.name} ({o.skipped})" for o in outcomes if o.skipped)
    return AssetCheckResult(
        asset_key=key, check_name=QUALITY_CHECK, passed=not failed, metadata=metadata,
        severity=SEVERITY["ERROR" if any(o.severity == "ERROR" for o in failed) else "WARN"],
        description=("; ".join(f"{o.name}: {o.message}" for o in failed) or f"all {len(outcomes)} passed: "
                     + ", ".join(o.name for o in outcomes)) + (f". Skipped: {skipped}" if skipped else ""))


def _check_specs(key: AssetKey, partitions_def) -> list:
    """The source's check, partitioned as its asset is: it evaluates one week's rows. Unpartitioned,
    Dagster planned each check for the run's week but stored its evaluation without one, so the planned row
    stayed PLANNED (shown as skipped once the run ended) next to a second, partition-less row with the result.
    (A partitioned check spec is a preview feature in Dagster 1.13; its warning is silenced here.)"""
    import warnings

    from dagster import PreviewWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreviewWarning)
        return [AssetCheckSpec(QUALITY_CHECK, asset=key, blocking=False, partitions_def=partitions_def,
                               description="The week's rows, five ways; failed when any fails. "
                                           + " ".join(f"{name}: {text}" for name, text in SOURCE_CHECKS.items()))]


def raw_asset(source: Source, partitions_def, crash_reruns: int):
    """``raw/<source>``: its own op, so its own step and process, with the source's quality check, its weekly freshness
    check (fleet/defs/freshness.py) and its owner."""
    key = AssetKey(["raw", source.name])
    return asset(
        retry_policy=crash_retry_policy(crash_reruns),
        owners=[source.owner] if source.owner else None,
        key=key, partitions_def=partitions_def, pool="scrapers", group_name=RAW_GROUP,
        description=source.description, kinds={"playwright", "parquet"},
        check_specs=_check_specs(key, partitions_def),
        tags={"fleet/source": source.name},
    )(_raw_compute(source, crash_reruns))


def raw_assets(sources: list[Source], partitions_def, crash_reruns: int) -> list:
    return [raw_asset(source, partitions_def, crash_reruns) for source in sources]


def publish_assets(sources: list[Source], partitions_def):
    names = [s.name for s in sources]
    raw_keys = [AssetKey(["raw", n]) for n in names]

    @asset(partitions_def=partitions_def, deps=raw_keys, group_name=PUBLISH_GROUP, kinds={"polars", "parquet"})
    def consolidated_raw_rows(context: AssetExecutionContext, artifacts: ArtifactStore,
                              alerts: Alerts) -> MaterializeResult:
        """Whatever succeeded this week, each source in a parquet file of its own, with its own columns and types."""
        week = context.partition_key
        store = artifacts.store()
        released = gate.parse_release(context.run.tags.get(gate.RELEASE_TAG))
        if released:  # `fleet release`, or the tag on a publish run launched from the UI
            gate.release(store, week, released, by=context.run_id, note=context.run.tags.get(gate.RELEASE_NOTE_TAG, ""))
        summary = consolidate(store, week, names, carry={s.name: s.carry_forward_weeks for s in sources if s.carry_forward})
        alert_week(context, store, week, names, alerts, {s.name: s.quarantine_after for s in sources},
                   {s.name: s.owner for s in sources})
        if summary["rows"] == 0 and summary.get("held"):
            raise Failure(description=f"nothing to commit for week {week}: the quality gate held every source with "
                                      f"rows ({', '.join(sorted(summary['held']))}); `fleet release` commits them",
                          metadata={"held": MetadataValue.json(summary["held"])}, allow_retries=False)
        if summary["rows"] == 0:
            raise Failure(description=f"infrastructure failure: no source returned data for week {week}",
                          metadata={"fleet/category": "infra", "missing": MetadataValue.json(summary["missing"])},
                          allow_retries=False)
        for name, why in summary["missing"].items():
            context.log.warning(f"[run {context.run_id}] [{name}] missing from week {week}: {why.get('status')} "
                                f"({why.get('category')}): {why.get('error')}")
        return MaterializeResult(metadata={
            "dagster/row_count": summary["rows"], "sources_included": len(summary["included"]),
            "sources_missing": len(summary["missing"]), "missing": MetadataValue.json(summary["missing"]),
            "included": MetadataValue.json(summary["included"]), "carried": MetadataValue.json(summary["carried"]),
            "domains": MetadataValue.json(domain_summary(store, week, names)),  # fleet/scraping/politeness.py
        })

    def _commit(context, stage: str, data_repo: DataRepository, artifacts: ArtifactStore) -> MaterializeResult:
        from fleet.publish.week import commit_stage

        week = context.partition_key
        from fleet.publish.week import DROP_TAG, parse_drop

        result = commit_stage(data_repo.data_repo(), artifacts.store(), week, stage, run_id=context.run_id,
                              drop=parse_drop(context.run.tags.get(DROP_TAG)), log=context.log)
        context.log.info(f"[run {context.run_id}] {stage} commit for week {week}: {result.status} {result.sha}")
        return MaterializeResult(metadata={"commit": result.sha or "-", "status": result.status, "attempts": result.attempts})

    @asset(partitions_def=partitions_def, deps=[consolidated_raw_rows], group_name=PUBLISH_GROUP, kinds={"git"})
    def raw_commit(context: AssetExecutionContext, data_repo: DataRepository,
                   artifacts: ArtifactStore) -> MaterializeResult:
        """The week's consolidated raw rows committed to the data repository (a file per source), before
        post-processing starts; sources the week's folder holds and this run does not are kept."""
        return _commit(context, "raw", data_repo, artifacts)

    @asset(partitions_def=partitions_def, deps=[raw_commit], group_name=PUBLISH_GROUP, kinds={"polars", "parquet"})
    def post_processed(context: AssetExecutionContext, artifacts: ArtifactStore) -> MaterializeResult:
        """Expensive post-processing of the stored raw rows, per source in its own types: normalisation, dedup
        across sources of one shape, derived columns."""
        rows = post_process(artifacts.store(), context.partition_key)
        return MaterializeResult(metadata={"dagster/row_count": rows})

    @asset(partitions_def=partitions_def, deps=[post_processed], group_name=PUBLISH_GROUP, kinds={"git"})
    def processed_commit(context: AssetExecutionContext, data_repo: DataRepository,
                         artifacts: ArtifactStore) -> MaterializeResult:
        """The week's post-processed rows committed to the data repository, in a commit of their own."""
        return _commit(context, "processed", data_repo, artifacts)

    return [consolidated_raw_rows, raw_commit, post_processed, processed_commit]
