"""What follows a finished run of a week, and who launches it: the one driver of fleet's follow-up policy.

The run-status sensors (fleet/defs/automation.py) go through :func:`follow_up_request` for every run of a week,
whoever launched it (`fleet run` too: fleet/defs/week.py). A run is followed up once: a follow-up carries
``fleet/recovers=<run id>``, and a run that already has one is not followed again."""
from __future__ import annotations

from dagster import AssetCheckKey, AssetKey, RunRequest

from fleet import records
from fleet.policy import taxonomy as tx
from fleet.engine import outcome
from fleet.policy.pastweek import FORCE_TAG
from fleet.storage import store as keys


def followed_by(instance, run) -> str | None:
    """The id of a run already launched to follow ``run``, or None."""
    found = records.runs(instance, {tx.TAG_RECOVERS: run.run_id}, limit=1)
    return found[0].run_id if found else None


def follow_up_request(instance, run, max_reruns: int, store):
    """``(action, RunRequest or None)``: what should follow ``run`` under fleet's policy. None when nothing
    should, or when another driver has already launched its follow-up, or when ``run`` stopped because an older
    run of its week was going (its steps never started; the older run's own follow-up owns the week).

    The decision is written on ``run`` as ``fleet/next`` (``rerun: <reason>``, ``publish: <reason>`` or
    ``none: <reason>``), so a command following a request's runs (fleet/defs/requests.py) knows when the chain has
    ended without deriving the policy again; a run already followed keeps the decision that launched its follower.
    A follow-up carries the run's request, driver and console logger config, so it belongs to the same request and
    prints as much."""
    if tx.TAG_SUPERSEDED in run.tags:
        action = tx.Action("none", run.tags.get(tx.PARTITION_TAG), reason=run.tags[tx.TAG_SUPERSEDED])
        records.add_tags(instance, run.run_id, {tx.TAG_NEXT: f"none: {action.reason}"})
        return action, None
    outcomes = tx.run_outcomes(instance, run, store)
    action = tx.next_action(instance, run, max_reruns, store, outcomes=outcomes)
    tag = tx.failure_tag(outcomes.values())
    record_crashes(run, outcomes, store)
    if action.kind in ("rerun", "publish"):
        other = followed_by(instance, run)
        if other:
            if tag and run.tags.get(tx.TAG_FAILURE) != tag:
                records.add_tags(instance, run.run_id, {tx.TAG_FAILURE: tag})
            if tx.TAG_NEXT not in records.run_by_id(instance, run.run_id).tags:  # launched by a driver before the tag
                kind = records.run_by_id(instance, other).tags.get(tx.TAG_KIND, action.kind)
                records.add_tags(instance, run.run_id, {tx.TAG_NEXT: f"{kind}: followed up by run {other}"})
            return tx.Action("none", action.week, reason=f"already followed up by run {other}"), None
    decided = {tx.TAG_NEXT: f"{action.kind}: {action.reason}"}
    if tag and run.tags.get(tx.TAG_FAILURE) != tag:
        decided[tx.TAG_FAILURE] = tag
    records.add_tags(instance, run.run_id, decided)
    carried = {k: run.tags[k] for k in (tx.TAG_REQUEST, tx.TAG_DRIVER) if k in run.tags}
    loggers = {"loggers": run.run_config["loggers"]} if (run.run_config or {}).get("loggers") else {}
    if action.kind == "rerun":
        step_keys = {f"{tx.RAW_PREFIX}{s}" for s in action.sources}
        ops = {k: v for k, v in (run.run_config or {}).get("ops", {}).items() if k in step_keys}
        return action, RunRequest(
            job_name="scrape_week", partition_key=action.week, run_key=f"rerun:{run.run_id}",
            asset_selection=[AssetKey(["raw", s]) for s in action.sources],
            # the sources' own quality checks only: a selection's default adds every check of its assets, the
            # weekly freshness checks (fleet/defs/freshness.py) included, which judge on their own schedule
            asset_check_keys=quality_checks(action.sources),
            run_config={**({"ops": ops} if ops else {}), **loggers},
            tags={**carried, tx.TAG_KIND: "rerun", tx.TAG_ATTEMPT: str(action.attempt), tx.TAG_RECOVERS: run.run_id,
                  # what the run was allowed to scrape, its re-execution is (pastweek.origin judges by it anyway)
                  **({FORCE_TAG: run.tags[FORCE_TAG]} if FORCE_TAG in run.tags else {})},
        )
    if action.kind == "publish":
        return action, RunRequest(job_name="publish_week", partition_key=action.week, run_key=f"publish:{run.run_id}",
                                  run_config=loggers,
                                  tags={**carried, tx.TAG_KIND: "publish", tx.TAG_RECOVERS: run.run_id})
    return action, None


def record_crashes(run, outcomes, store) -> None:
    """A crashed step wrote no outcome of its own: record it, so consolidation and commits say why the source is missing.

    What is stored is kept when it is truer than "crashed in this run": a usable outcome (ok, empty or partial
    with its rows, from an earlier run or from this step before it died: consolidation takes it, and writing
    over it dropped committed rows from the week); any earlier outcome of a step that never started in this
    run (the run made no attempt); and this run's own record of the infra failure (the runner's, with its
    evidence)."""
    week = run.tags.get(tx.PARTITION_TAG)
    if not week:
        return
    for src, o in outcomes.items():
        if o.category != "infra":
            continue
        stored = keys.read_outcome(store, week, src)
        if stored and (keys.usable_outcome(store, week, src) is not None or o.status == "not started"
                       or (stored.get("run_id") == run.run_id and stored.get("category") == "infra")):
            continue
        outcome.failed(store, src, week, run.run_id, f"source {src}: {o.error}", "infra")


QUALITY_CHECK = "quality"  # a source's own check, evaluated by its raw step (fleet/defs/assets.py)


def quality_checks(sources) -> list[AssetCheckKey]:
    return [AssetCheckKey(AssetKey(["raw", s]), QUALITY_CHECK) for s in sources]
