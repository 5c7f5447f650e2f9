"""The week driver: a week (or the demo's, or a backfill's) through the same jobs the schedule and the UI launch, and
the same follow-up policy as the sensors (fleet/policy/followup.py), here in this process instead of the daemon.
Also the driver's other runs of a week (reprocess, release, commit) and what it tidies first (runs left by a
killed driver). `fleet`'s commands call these; each returns the exit code. What it prints is in fleet/defs/report.py."""
from __future__ import annotations

import datetime as dt
import json
import os
import sys

import click

from fleet import config
from fleet.config import chromium_path, scraper_dirs, settings
from fleet.defs.report import EXIT_NOTHING, EXIT_OK, report, source_names
from fleet.errors import FleetError, without_credentials
from fleet.storage.open import host_store
from fleet.weeks import parse_week, utc_now


def _logging(verbose: bool) -> dict:
    """The run config of Dagster's console logger. Without -v it prints nothing: fleet's own lines (a line per
    source as it ends, then the table) say what happened, and Dagster's lines would say it again, each with the
    run id twice (its own prefix and fleet's message's). Events reach the event log whatever this level. The one
    console line no run config reaches (STEP_WORKER_STARTED, logged in each step's process by a log manager of
    Dagster's defaults) follows the instance's ``python_logs.python_log_level``."""
    return {"loggers": {"console": {"config": {"log_level": "DEBUG" if verbose else "CRITICAL"}}}}


def say_sandbox(home, echo=click.echo) -> None:
    """One line at start when the operator turned the browser sandbox off (fleet/engine/sandbox.py); refused
    (``SandboxRefused``, one line naming why and the fix) where it cannot be had."""
    from fleet.engine import sandbox

    sandbox.announce(home, scraper_dirs(), chromium_path(), lambda line: echo(line, err=True))


def past_week_refusal(week: str, sources: tuple[str, ...] = (), deep: tuple[str, ...] = (),
                      refresh: bool = False) -> str | None:
    """Why running ``week`` must not go ahead without --force, or None: the raw assets' past-week rule
    (fleet/policy/pastweek.py), which refuses such sources inside the run anyway, checked up front for the
    selected sources so the command stops with one line before it starts anything."""
    from fleet.policy import pastweek
    from fleet.scraping.discovery import discover

    now = utc_now()
    if not pastweek.is_past(week, now):
        return None
    names = list(sources) or sorted(src.name for src in discover(scraper_dirs()))
    return pastweek.refusal(week, names, store=host_store(), as_of=now, deep=deep, refresh=refresh,
                            how_to_force="Use --force to scrape anyway")


def run(week: str, sources: tuple[str, ...] = (), deep: tuple[str, ...] = (), refresh: bool = False,
        force: bool = False, verbose: bool = False, demo: bool = False, echo=click.echo) -> int:
    """`fleet run` (``demo``: `fleet demo`, with the bundled demo sites serving on 127.0.0.1 meanwhile): refused
    up front for a past week without ``force``, else :func:`run_week`."""
    from fleet.defs.claim import hold_week
    from fleet.demo.sites import DemoSites

    with hold_week(settings().home, week):  # first: a second `fleet run` of the week says so, and nothing else
        why = None if force else past_week_refusal(week, sources, deep, refresh)
        if why:
            raise FleetError(why)
        if not demo:
            return run_week(week, sources, deep, refresh, force, echo, verbose)
        demo_data_remote()
        with DemoSites() as sites:
            config.export(FLEET_DEMO_URL=sites.url)  # the demo scrapers and every step of the run read it
            echo(f"fleet: demo sites at {sites.url}")
            return run_week(week, sources, deep, refresh, force, echo, verbose)


def backfill(first: str, last: str, force: bool, echo=click.echo) -> int:
    """Each week from ``first`` to ``last``; a past week that would scrape today's web is skipped, named, and
    makes the exit code 2, unless ``force``. The worst week's exit code."""
    from fleet.defs.claim import hold_week

    worst = EXIT_OK
    week = parse_week(first)
    while week <= parse_week(last):
        w = week.isoformat()
        with hold_week(settings().home, w):
            why = None if force else past_week_refusal(w)
            if why:
                echo(f"fleet: {why}", err=True)
                worst = max(worst, EXIT_NOTHING)
            else:
                worst = max(worst, run_week(w, force=force, echo=echo))
        week += dt.timedelta(days=7)
    return worst


def run_week(week: str, sources: tuple[str, ...] = (), deep: tuple[str, ...] = (), refresh: bool = False,
             force: bool = False, echo=click.echo, verbose: bool = False) -> int:
    """Drive one week: the scrape run, then the follow-ups the policy asks for (reruns, the publish run), then
    the report. ``force`` tags the runs ``fleet/force=true``: the raw assets then scrape a past week from today's
    web (fleet/policy/pastweek.py)."""
    from dagster import AssetKey, execute_job, reconstructable

    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    from fleet.lifecycle.progress import Progress
    from fleet.policy import taxonomy as tx
    from fleet.policy.followup import drive
    from fleet.policy.pastweek import FORCE_TAG
    from fleet.storage.open import check_store

    s = settings()
    # Refused before the week is scraped: a bad FLEET_DATA_BRANCH or FLEET_DATA_PREFIX, a FLEET_DATA_REMOTE that is not
    # there or does not answer (its commit would fail after the whole scrape), no Chromium (each attempt would fail
    # as infra, the source named but not the cause).
    check_data_remote()
    check_store(d.defs.resources["artifacts"].store())  # a bucket that does not exist, an endpoint that does not answer
    chromium_path()
    scraper_dirs()  # FLEET_SCRAPERS_DIR names folders that exist
    if not config.scrapers_dir_set() and not config.demo_url():
        raise FleetError("no FLEET_SCRAPERS_DIR is set, and the bundled demo scrapers need the demo sites: "
                         "use `fleet demo`, or point FLEET_SCRAPERS_DIR at your scrapers")
    if s.executor == "celery":
        from fleet.defs.celery import check_broker, check_workers

        check_broker(s)
        instance = get_instance(s)
        check_workers(s)  # else every step would wait in the queue for a worker
    else:
        warm_forkserver(echo)
        instance = get_instance(s)
    names = source_names()
    unknown = [n for n in (*sources, *deep) if n not in names]
    if unknown:
        raise FleetError(f"unknown source(s): {', '.join(unknown)}; known: {', '.join(names)}")
    ops = {f"{tx.RAW_PREFIX}{n}": {"config": {"deep": n in deep, "refresh": refresh}} for n in (sources or names)
           if n in deep or refresh}
    base_tags = {**cli_run_tags(week), **({FORCE_TAG: "true"} if force else {})}
    selection = [AssetKey(["raw", n]) for n in sources] if sources else None
    store = host_store()

    def launch(request, action):
        job = d.scrape_week_job if action.kind == "rerun" else d.publish_week_job
        # execute_job takes no check selection: a subset run here also runs its sources' fresh_week checks (one step)
        result = execute_job(reconstructable(job), instance, run_config={**(request.run_config or {}), **_logging(verbose)},
                             tags={**base_tags, **request.tags}, asset_selection=request.asset_selection)
        return instance.get_run_by_id(result.run_id)

    reap_orphaned_runs(instance, week, echo)
    refuse_if_running(instance, week)
    say_sandbox(s.home, echo)  # after every refusal: a bad setting is the one line a refused run prints
    where = f"on the workers of {without_credentials(s.celery_broker)}" if s.executor == "celery" else "on this machine"
    echo(f"fleet: scraping week {week} ({len(sources or names)} sources, at most {s.max_parallel} at once, {where})")
    with Progress(instance, store, week, len(sources or names), echo,
                  live=echo is click.echo and sys.stdout.isatty() and not verbose) as progress:
        result = execute_job(reconstructable(d.scrape_week_job), instance, run_config={"ops": ops, **_logging(verbose)},
                             tags={**base_tags, tx.TAG_KIND: "scrape"}, asset_selection=selection)
        run = instance.get_run_by_id(result.run_id)
        superseded(run)
        progress.catch_up()  # every source's line before the stage's end is said
        follow_ups = drive(instance, run, s.crash_reruns, store, launch, echo)
    publish_run = next((r for r in follow_ups if r.tags.get(tx.TAG_KIND) == "publish"), None)
    return report(instance, store, week, names, publish_run, echo, selected=list(sources or names),
                  run_ids=[run.run_id, *(r.run_id for r in follow_ups)])


def check_data_remote() -> None:
    """The data repository is there and answers (fleet/publish/datarepo.py ``verify_remote``), before a run that
    would commit to it starts."""
    from fleet.publish import DataRepo, verify_remote

    verify_remote(DataRepo.from_settings(settings()))


def demo_data_remote() -> None:
    """The demo (`fleet demo`, `fleet ui` with the demo sites) without FLEET_DATA_REMOTE commits to a bare
    repository of its own under FLEET_HOME: made here if missing, the one data repository fleet ever creates."""
    from fleet.publish import DataRepo, create_remote

    if not config.data_remote_set():
        create_remote(DataRepo.from_settings(settings()))


def cli_run_tags(week: str) -> dict:
    """The tags of a run this process executes: its week, its driver, and this process as its run worker from
    the start (fleet/defs/runworker.py), so a run left behind by a killed `fleet run` is known for dead even if
    it died before its executor started."""
    from fleet.defs.runworker import TAG, identity
    from fleet.policy import taxonomy as tx

    return {tx.PARTITION_TAG: week, tx.TAG_DRIVER: "cli", TAG: json.dumps(identity(), sort_keys=True)}


def refuse_if_running(instance, week: str) -> None:
    """A run of ``week`` unfinished in the instance (from another host, the UI, the schedule or a sensor) is
    refused before this command creates a run of its own: a refused run leaves a planned step and check per asset.
    Two that pass here together are still told apart by the claim at their executors' start (fleet/defs/claim.py)."""
    from fleet.defs.claim import week_holder

    taken = week_holder(instance, week)
    if taken:
        raise FleetError(taken)


def superseded(run) -> None:
    """Raise the FleetError of a run that stopped because an older run of its week was going (one run per
    week, fleet/defs/claim.py): nothing was done, and the CLI says why."""
    from fleet.policy import taxonomy as tx

    if tx.TAG_SUPERSEDED in run.tags:
        raise FleetError(run.tags[tx.TAG_SUPERSEDED])


def warm_forkserver(echo=click.echo) -> None:
    """Start this process's forkserver now, in the background, instead of when the scrape run launches its first
    step: the server is a new interpreter that imports fleet's definitions (several seconds of one core), and
    this way it does so while this process creates the instance and the run. Dagster's multiprocess executor
    (``start_method: forkserver``) then finds it running and forks every step from it. Only multiprocessing's
    public API: the first process of a forkserver context starts the server."""
    import multiprocessing
    import threading

    from fleet.defs.definitions import PRELOAD

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))

    def start():
        try:
            ctx.Process(target=os.getpid).start()
        except Exception as exc:  # the executor starts the server itself, only later
            echo(f"fleet: forkserver not started ahead of the run ({type(exc).__name__}: {exc})", err=True)

    threading.Thread(target=start, name="fleet-forkserver-warmup", daemon=True).start()


def reap_orphaned_runs(instance, week: str, echo) -> None:
    """Runs of this week left "in progress" by a `fleet run` that was killed: their run worker, recorded on the
    run (fleet/defs/runworker.py), was a process on this machine that is gone. Mark them failed with the reason,
    so they never hold the week (fleet/defs/claim.py). A run on another host is the run monitoring's to judge."""
    from dagster import DagsterRunStatus

    from fleet import records
    from fleet.defs.runworker import worker_health
    from fleet.policy import taxonomy as tx
    from fleet.policy.followup import reap_dead_run

    stuck = [run for run in records.runs(instance, {tx.PARTITION_TAG: week, tx.TAG_DRIVER: "cli"},
                                         [DagsterRunStatus.STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.NOT_STARTED])
             if worker_health(run).status == "FAILED"]
    for run in stuck:
        echo(f"fleet: run {run.run_id} for week {week} was left in progress by a process that is gone; marking it failed")
        reap_dead_run(instance, run, "the fleet run process died (kill -9 or reboot)")
        records.add_tags(instance, run.run_id, {"fleet/abandoned": "the fleet run process died (kill -9 or reboot)"})


def _publish(week: str, tags: dict, echo, asset_selection=None):
    """A publish run of ``week`` executed here (no network), after the runs a killed driver left are reaped."""
    from dagster import execute_job, reconstructable

    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance

    from fleet.defs.claim import hold_week

    with hold_week(settings().home, week):
        check_data_remote()
        instance = get_instance(settings())
        reap_orphaned_runs(instance, week, echo)
        refuse_if_running(instance, week)
        result = execute_job(reconstructable(d.publish_week_job), instance,
                             run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}},
                             tags={**cli_run_tags(week), **tags}, asset_selection=asset_selection)
        superseded(instance.get_run_by_id(result.run_id))
        return result


def reprocess_week(week: str, echo=click.echo) -> int:
    """Post-process the stored raw rows again and commit the result; no network."""
    from dagster import AssetKey

    from fleet.policy import taxonomy as tx
    from fleet.storage import store as keys
    from fleet.transform.postprocess import consolidated

    consolidated(host_store(), week)  # one line when the week has no consolidated rows (of this layout)
    result = _publish(week, {tx.TAG_KIND: "reprocess"}, echo,
                      asset_selection=[AssetKey("post_processed"), AssetKey("processed_commit")])
    rec = host_store().read_json(week, keys.commit_key("processed"))
    if result.success and rec:
        echo(f"commit processed {rec['status']:<10} {rec['sha']}")
        return EXIT_OK
    echo("fleet: reprocessing failed; see the log above", err=True)
    return EXIT_NOTHING


def release_week(week: str, sources: tuple[str, ...], note: str, echo=click.echo) -> int:
    """Commit the rows the quality gate held out of ``week``: a publish run tagged ``fleet/release`` (as the UI
    can launch one) consolidates and commits the week again with them; no network."""
    from fleet.policy import taxonomy as tx
    from fleet.quality import gate
    from fleet.storage import store as keys

    gate.check_held(host_store(), week, list(sources))  # one line naming a source that is not held, before any run
    result = _publish(week, {tx.TAG_KIND: "release", gate.RELEASE_TAG: ",".join(sources),
                             gate.RELEASE_NOTE_TAG: note}, echo)
    for stage in ("raw", "processed"):
        rec = host_store().read_json(week, keys.commit_key(stage)) or {}
        echo(f"commit {stage:<9} {rec.get('status', '-'):<10} {rec.get('sha')}")
    if not result.success:
        echo("fleet: the release run failed; see the log above", err=True)
        return EXIT_NOTHING
    return EXIT_OK


def commit_week(week: str, stage: str | None, drop: tuple[str, ...] = (), echo=click.echo) -> int:
    """Only the commit of ``week`` again, from its stored artifacts (each stored stage, or ``stage``); ``drop``
    removes those sources' files from the week's folder on the branch."""
    from fleet.defs import definitions as d
    from fleet.publish import message
    from fleet.publish.week import STAGES, commit_stage
    from fleet.storage import store as keys
    from fleet.transform import layout

    store = host_store()
    stages = [stage] if stage else [st for st in STAGES if layout.files(store, week, st) is not None]
    if not stages:
        raise FleetError(f"week {week} has no stored artifacts to commit; run it first (`fleet run --week {week}`)")
    check_data_remote()
    for st in stages:
        res = commit_stage(d.defs.resources["data_repo"].data_repo(), store, week, st, run_id="cli-commit", drop=drop)
        echo(f"commit {st:<9} {res.status:<10} {res.sha}")
    for line in message.week_folder_report(week, [store.read_json(week, keys.commit_key(st)) or {} for st in stages]):
        echo(f"  {line}")
    return EXIT_OK
