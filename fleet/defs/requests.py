"""Run requests: how a command (`fleet run`, `reprocess`, `release`) has the daemon serving an instance run a week.

Dagster has no public way to submit a run to a daemon without a webserver, except through a sensor. So a command
records its request as a runless observation of the external asset ``fleet/requests`` (:func:`submit`), and the
``fleet_requests`` sensor, in whichever code location the daemon loaded, reads the requests it has not seen and
answers each once, in an observation of the same asset (:func:`answer` reads it): refused, with why in one line, or
accepted, with the run it asks for. The run then goes through the instance's run queue and launcher like any
other, and the run-status sensors follow it up (fleet/defs/automation.py). The asset's partitions are the weeks, so
the UI shows every request and its answer by week: an audit trail, never materialized."""
from __future__ import annotations

import json
import os
import uuid

from dagster import (
    AssetKey, AssetObservation, AssetRecordsFilter, AssetSpec, DefaultSensorStatus, RunRequest,
    SensorEvaluationContext, SensorResult, sensor,
)

from fleet.errors import FleetError, without_credentials
from fleet.policy import taxonomy as tx
from fleet.policy.followup import quality_checks
from fleet.policy.pastweek import FORCE_TAG
from fleet.weeks import utc_now

REQUESTS = AssetKey(["fleet", "requests"])
GROUP = "fleet_requests"
JOBS = {"scrape": "scrape_week", "reprocess": "publish_week", "release": "publish_week"}
REPROCESS = [AssetKey("post_processed"), AssetKey("processed_commit")]
TTL_S = 600  # a request older than this is refused: its command is gone (killed before any daemon ran) or gave up
PAGE = 100   # request records the sensor reads per tick; the next tick reads on from its cursor
# How a refusal names a setting the command and the daemon disagree on.
SAYS = {"data_remote": "commits to", "branch": "commits on the branch", "prefix": "commits under",
        "executor": "runs steps with the executor", "scrapers": "loads its scrapers from",
        "store": "keeps the artifacts in"}


def requests_spec(partitions_def) -> AssetSpec:
    return AssetSpec(REQUESTS, partitions_def=partitions_def, group_name=GROUP,
                     description="fleet's run requests and the daemon's answers: each `fleet run`, `reprocess` or "
                                 "`release` observes its request here, and the fleet_requests sensor answers it "
                                 "(accepted, with its run, or refused, with why). An audit trail; never materialized.")


def location_settings(s, scrapers) -> dict:
    """The settings a command and the daemon serving its instance must share (``s`` a fleet Settings,
    ``scrapers`` the scrapers' folders): where the week is committed, how its steps run, which sources there are, and
    where the artifacts are (the command reports from them).
    The remote without its credentials: they are written in the instance's event log."""
    return {"data_remote": without_credentials(s.data_remote), "branch": s.branch, "prefix": s.prefix,
            "executor": s.executor, "scrapers": os.pathsep.join(str(p) for p in scrapers),
            "store": without_credentials(s.store_url)}


def submit(instance, week: str, *, kind: str, sources=(), deep=(), refresh: bool = False, force: bool = False,
           verbose: bool = False, tags: dict | None = None, settings: dict | None = None) -> str:
    """Record a request to run ``week`` (a partition key) and return its id. ``kind``: ``scrape`` (the sources, or
    all), ``reprocess`` (post-process and commit again) or ``release`` (``tags`` carry the release's). ``settings``:
    this process's :func:`location_settings`, by default those of its environment."""
    from fleet import config
    from fleet.defs.runworker import identity

    if kind not in JOBS:
        raise FleetError(f"unknown request kind {kind!r}: one of {', '.join(JOBS)}")
    if settings is None:
        settings = location_settings(config.settings(), config.scraper_dirs())
    request_id = str(uuid.uuid4())
    instance.report_runless_asset_event(AssetObservation(
        asset_key=REQUESTS, partition=week, description=f"{kind} request {request_id} for week {week}",
        metadata={"event": "request", "request": request_id, "kind": kind, "sources": list(sources),
                  "deep": list(deep), "refresh": bool(refresh), "force": bool(force), "verbose": bool(verbose),
                  "tags": {k: str(v) for k, v in (tags or {}).items()}, "settings": dict(settings),
                  "requester": identity()}))
    return request_id


def _values(record) -> dict:
    return {k: v.value for k, v in record.asset_observation.metadata.items()}


def answer(instance, week: str, request_id: str) -> dict | None:
    """The sensor's answer to request ``request_id`` of ``week``: ``{"state": "accepted" | "refused", "reason":
    ...}``, or None while it has none. Read newest first, down to the request itself; the first answer counts."""
    found, cursor = None, None
    while True:
        page = instance.fetch_observations(AssetRecordsFilter(asset_key=REQUESTS, asset_partitions=[week]),
                                           limit=PAGE, cursor=cursor)
        for rec in page.records:
            md = _values(rec)
            if md.get("request") != request_id:
                continue
            if md.get("event") == "request":
                return found
            found = {"state": md.get("state"), "reason": md.get("reason")}
        if not page.has_more:
            return found
        cursor = page.cursor


def build_requests_sensor(scrape_job, publish_job, source_names, settings: dict):
    """The ``fleet_requests`` sensor of a code location whose sources are ``source_names`` and whose settings are
    ``settings`` (:func:`location_settings`)."""
    known = sorted(source_names)
    ours = dict(settings)

    @sensor(name="fleet_requests", jobs=[scrape_job, publish_job], minimum_interval_seconds=1,
            default_status=DefaultSensorStatus.RUNNING)
    def fleet_requests(context: SensorEvaluationContext):
        """Answer each new run request of fleet/requests once: refused with why, or accepted with its run."""
        after = json.loads(context.cursor)["after"] if context.cursor else None
        page = context.instance.fetch_observations(AssetRecordsFilter(asset_key=REQUESTS, after_storage_id=after),
                                                   limit=PAGE, ascending=True)
        runs, answers = [], []
        for rec in page.records:
            after = rec.storage_id
            md = _values(rec)
            if md.get("event") != "request":
                continue
            try:
                run, reason = judge(context, md, rec.partition_key, rec.timestamp, known, ours)
            except Exception as exc:  # a malformed request must not stop the sensor: it would never get past it
                run, reason = None, f"malformed request ({type(exc).__name__}: {exc})"
            runs += [run] if run else []
            answers.append(AssetObservation(
                asset_key=REQUESTS, partition=rec.partition_key,
                description=f"request {md.get('request')}: {'accepted' if run else 'refused'}: {reason}",
                metadata={"event": "answer", "request": md.get("request"), "state": "accepted" if run else "refused",
                          "reason": reason}))
        return SensorResult(run_requests=runs, asset_events=answers,
                            cursor=None if after is None else json.dumps({"after": after}))

    return fleet_requests


def logging_config(verbose: bool) -> dict:
    """The run config of Dagster's console logger. Without -v it prints nothing: fleet's own lines (a line per
    source as it ends, then the table) say what happened, and Dagster's lines would say it again, each with the
    run id twice (its own prefix and fleet's message's). Events reach the event log whatever this level. The one
    console line no run config reaches (STEP_WORKER_STARTED, logged in each step's process by a log manager of
    Dagster's defaults) follows the instance's ``python_logs.python_log_level``."""
    return {"loggers": {"console": {"config": {"log_level": "DEBUG" if verbose else "CRITICAL"}}}}


def judge(context, md: dict, week: str, at: float, known: list[str], ours: dict) -> tuple[RunRequest | None, str]:
    """``(RunRequest, what it runs)`` for an acceptable request ``md`` of ``week`` recorded at ``at`` (unix time),
    else ``(None, why not)``."""
    kind, request_id = md["kind"], md["request"]
    if kind not in JOBS:
        return None, f"unknown request kind {kind!r}: one of {', '.join(JOBS)}"
    age = utc_now().timestamp() - at
    if age > TTL_S:
        return None, (f"the request is {age:.0f} s old, over {TTL_S} s: the command that made it is gone or gave "
                      "up; run it again")
    theirs = md.get("settings") or {}
    differ = [k for k in sorted({*ours, *theirs}) if ours.get(k) != theirs.get(k)]
    if differ:
        return None, "; ".join(f"the daemon serving this instance {SAYS.get(k, k)} {ours.get(k)!r}; this command "
                               f"names {theirs.get(k)!r} ({k})" for k in differ) + \
            "; give the command the daemon's settings, or stop that daemon"
    sources, deep = list(md.get("sources") or ()), list(md.get("deep") or ())
    unknown = [n for n in (*sources, *deep) if n not in known]
    if unknown:
        return None, f"unknown source(s): {', '.join(unknown)}; known: {', '.join(known)}"
    weeks = context.repository_def.get_job(JOBS[kind]).partitions_def.get_partition_keys()
    if week not in weeks:
        return None, f"week {week} is not one of the weekly partitions ({weeks[0]} to {weeks[-1]})"
    tags = {**md.get("tags", {}), tx.TAG_KIND: kind, tx.TAG_REQUEST: request_id, tx.TAG_DRIVER: "cli",
            tx.TAG_REQUESTER: json.dumps(md.get("requester"), sort_keys=True),
            **({FORCE_TAG: "true"} if md.get("force") else {})}
    run_config = logging_config(bool(md.get("verbose")))
    if kind == "scrape":
        refresh = bool(md.get("refresh"))
        ops = {f"{tx.RAW_PREFIX}{n}": {"config": {"deep": n in deep, "refresh": refresh}} for n in (sources or known)
               if n in deep or refresh}
        # A subset runs its sources' quality checks only (not the weekly fresh_week checks, which judge on their
        # own schedule). All sources: the job itself, which leaves those out already; a check selection without
        # an asset selection would be a run of the checks alone.
        run = RunRequest(job_name=JOBS[kind], partition_key=week, run_key=f"request:{request_id}",
                         asset_selection=[AssetKey(["raw", n]) for n in sources] if sources else None,
                         asset_check_keys=quality_checks(sources) if sources else None,
                         run_config={**({"ops": ops} if ops else {}), **run_config}, tags=tags)
        return run, f"scrape_week of week {week} ({', '.join(sources) if sources else 'every source'})"
    run = RunRequest(job_name=JOBS[kind], partition_key=week, run_key=f"request:{request_id}",
                     asset_selection=REPROCESS if kind == "reprocess" else None, run_config=run_config, tags=tags)
    return run, f"publish_week of week {week} ({kind})"
