"""The week's client: `fleet run`, `fleet demo`, `fleet backfill`, `fleet reprocess` and `fleet release` submit a
week to the daemon serving the Dagster instance (one started for the command where none does: fleet/defs/daemon.py)
through the ``fleet_requests`` sensor (fleet/defs/requests.py), the way the schedule and the UI start a week: the
run queue, the run launcher, run monitoring and the run-status sensors' follow-ups (fleet/defs/automation.py). The
client only checks first, follows the runs and reports. `fleet commit` is no Dagster run. Each returns the exit
code; what it prints is in fleet/defs/report.py."""
from __future__ import annotations

import contextlib
import datetime as dt
import sys
import time

import click

from fleet import config
from fleet.config import chromium_path, scraper_dirs, settings
from fleet.defs.report import EXIT_NOTHING, EXIT_OK, report, source_names
from fleet.errors import FleetError, without_credentials
from fleet.storage.open import host_store
from fleet.weeks import parse_week, utc_now


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
    up front for a past week without ``force``, else the week submitted to the daemon serving the instance (one
    started for this command where none does) and followed until its runs end."""
    from fleet.defs.claim import hold_week
    from fleet.demo.sites import DemoSites

    with hold_week(settings().home, week):  # first: a second `fleet run` of the week says so, and nothing else
        why = None if force else past_week_refusal(week, sources, deep, refresh)
        if why:
            raise FleetError(why)
        if not demo:
            return _weeks([week], sources, deep, refresh, force, echo, verbose)
        demo_data_remote()
        with DemoSites() as sites:
            config.export(FLEET_DEMO_URL=sites.url)  # the demo scrapers, the daemon and every step of the run read it
            echo(f"fleet: demo sites at {sites.url}")
            return _weeks([week], sources, deep, refresh, force, echo, verbose, demo=True)


def backfill(first: str, last: str, force: bool, echo=click.echo) -> int:
    """Each week from ``first`` to ``last``, one after another, through one daemon; a past week that would scrape
    today's web is skipped, named, and makes the exit code 2, unless ``force``. The worst week's exit code."""
    weeks = []
    week = parse_week(first)
    while week <= parse_week(last):
        weeks.append(week.isoformat())
        week += dt.timedelta(days=7)
    return _weeks(weeks, force=force, echo=echo, each=True)


def _checks(sources: tuple[str, ...], deep: tuple[str, ...]):
    """What is refused before a week is submitted, each in one line naming the setting: a bad FLEET_DATA_BRANCH or
    FLEET_DATA_PREFIX, a FLEET_DATA_REMOTE that is not there or does not answer (its commit would fail after the
    whole scrape), a store that does not answer, no Chromium (each attempt would fail as infra, the source named
    but not the cause), an unknown source, and the instance's own settings. Returns (instance, source names)."""
    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    from fleet.storage.open import check_store

    s = settings()
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
        instance = get_instance(s)
    names = source_names()
    unknown = [n for n in (*sources, *deep) if n not in names]
    if unknown:
        raise FleetError(f"unknown source(s): {', '.join(unknown)}; known: {', '.join(names)}")
    return instance, names


def _weeks(weeks: list[str], sources: tuple[str, ...] = (), deep: tuple[str, ...] = (), refresh: bool = False,
           force: bool = False, echo=click.echo, verbose: bool = False, each: bool = False, demo: bool = False) -> int:
    """Scrape ``weeks`` one after another through the daemon serving the instance, or one started for this command
    (fleet/defs/daemon.py); ``each``: take each week's lock and judge its past-week rule here (a backfill); ``demo``:
    the demo sites serve from this process, so the daemon must be this command's own. The worst week's exit code."""
    from fleet.defs import daemon
    from fleet.defs.claim import hold_week

    s = settings()
    instance, names = _checks(sources, deep)
    worst = EXIT_OK
    if each:  # a backfill: its past weeks that would scrape today's web are skipped, before any daemon starts
        refused = {w: why for w in weeks if not force and (why := past_week_refusal(w))}
        for why in refused.values():
            echo(f"fleet: {why}", err=True)
            worst = EXIT_NOTHING
        weeks = [w for w in weeks if w not in refused]
        if not weeks:
            return worst
    else:
        precheck_week(instance, weeks[0], echo)
    say_sandbox(s.home, echo)  # after every refusal: a bad setting is the one line a refused run prints
    with daemon.serving(s, instance, echo, verbose) as serving:
        if demo and not serving.ours:
            raise FleetError(f"`fleet demo` serves its demo sites from this process, which {serving.describe()} and "
                             "its runs do not know of: stop that daemon, or give the demo a FLEET_HOME of its own")
        for week in weeks:
            with hold_week(s.home, week) if each else contextlib.nullcontext():
                if each:
                    precheck_week(instance, week, echo)
                worst = max(worst, _scrape(instance, serving, week, names, sources, deep, refresh, force, echo, verbose))
    return worst


def _scrape(instance, serving, week: str, names: list[str], sources: tuple[str, ...] = (), deep: tuple[str, ...] = (),
            refresh: bool = False, force: bool = False, echo=click.echo, verbose: bool = False) -> int:
    """One week: its request, its runs followed as the sensors chain them (the scrape run, crash re-executions, the
    publish run), a line per source as it ends, then the report. ``force``: the runs are tagged ``fleet/force=true``
    and the raw assets then scrape a past week from today's web (fleet/policy/pastweek.py)."""
    from fleet.defs import requests
    from fleet.lifecycle.progress import Progress
    from fleet.policy import taxonomy as tx

    s = settings()
    store = host_store()
    selected = list(sources or names)
    where = (f"on the workers of {without_credentials(s.celery_broker)}" if s.executor == "celery"
             else "on this machine" if serving.ours else f"through {serving.describe()}")
    echo(f"fleet: scraping week {week} ({len(selected)} sources, at most {s.max_parallel} at once, {where})")
    request = requests.submit(instance, week, kind="scrape", sources=sources, deep=deep, refresh=refresh,
                              force=force, verbose=verbose)
    with Progress(instance, store, week, len(selected), echo, request=request,
                  live=echo is click.echo and sys.stdout.isatty() and not verbose) as progress:
        chain = follow(instance, serving, week, request, echo, before_line=progress.catch_up)
    publish_run = next((r for r in reversed(chain) if r.tags.get(tx.TAG_KIND) == "publish"), None)
    return report(instance, store, week, names, publish_run, echo, selected=selected,
                  run_ids=[r.run_id for r in chain])


FINISHED = ("SUCCESS", "FAILURE", "CANCELED")
ANSWER_S = 300.0   # a daemon's first pass over the request, its code server loading (seconds; ~5 on a quiet machine)
DECIDE_S = 120.0   # a finished run's follow-up decision by the daemon's run-status sensors (a tick every ~5 s)
POLL_S = 0.5


def follow(instance, serving, week: str, request: str, echo, before_line=lambda: None) -> list:
    """Wait for ``request``'s runs to end: the run the daemon's ``fleet_requests`` sensor made of it and the
    follow-ups its run-status sensors launched after each (tagged with the request too). A run's decision is its
    ``fleet/next`` tag (fleet/policy/followup.py); the chain has ended when every run finished, each has its
    decision, and each rerun or publish decision has its run. Each decision's reason is said once, as it is made.
    Returns the chain's runs, oldest first. Refused in one line when the daemon refuses the request, stops, or
    never answers or decides."""
    from fleet import records
    from fleet.defs import requests
    from fleet.policy import taxonomy as tx

    started = time.monotonic()
    answered = False
    said: set[str] = set()
    undecided: dict[str, float] = {}
    while True:
        serving.check()
        if not answered:
            answer = requests.answer(instance, week, request)
            if answer is None and time.monotonic() - started > ANSWER_S:
                raise FleetError(f"{serving.describe()} did not take this command's request for week {week} within "
                                 f"{ANSWER_S:.0f} s: is its fleet_requests sensor running (the UI's Automation page)?")
            if answer is not None and answer["state"] == "refused":
                raise FleetError(answer["reason"])
            answered = answer is not None
        chain = [r.dagster_run for r in records.run_records(instance, {tx.TAG_REQUEST: request})]  # oldest first
        done = answered and bool(chain)
        for run in chain:
            if run.status.value not in FINISHED:
                done = False
                continue
            if run.status.value == "CANCELED":
                continue
            decision = run.tags.get(tx.TAG_NEXT)
            if decision is None:
                done = False
                if time.monotonic() - undecided.setdefault(run.run_id, time.monotonic()) > DECIDE_S:
                    raise FleetError(f"run {run.run_id} of week {week} ended {DECIDE_S:.0f} s ago and {serving.describe()} "
                                     "has not decided what follows it: see the fleet_after_* sensors' ticks in the UI")
                continue
            kind, _, reason = decision.partition(": ")
            if kind in ("rerun", "publish"):
                if run.run_id not in said:
                    before_line()  # every source's line of the stage before what follows it
                    echo(f"fleet: {reason}")
                    said.add(run.run_id)
                if not any(r.tags.get(tx.TAG_RECOVERS) == run.run_id for r in chain):
                    done = False
                    if time.monotonic() - undecided.setdefault(run.run_id, time.monotonic()) > DECIDE_S:
                        raise FleetError(f"{serving.describe()} decided {decision!r} after run {run.run_id} of week "
                                         f"{week} {DECIDE_S:.0f} s ago and launched no run for it: see the "
                                         "fleet_after_* sensors' ticks in the UI")
        if done:
            return chain
        time.sleep(POLL_S)


def precheck_week(instance, week: str, echo) -> None:
    """Refuse a week another launcher is running: an unfinished run of it in the instance, from another host, the
    UI, the schedule or a sensor, named. Runs this host's fleet commands requested are another matter: this
    command holds the week's lock on this host (claim.hold_week), so their command is gone (killed); they are left
    to Dagster, whose run monitoring and sensors end and follow them up before this command's runs, which queue
    behind them (one run per week)."""
    from fleet import records
    from fleet.defs.claim import describe_run, requested_by_gone_command
    from fleet.policy import taxonomy as tx

    unfinished = records.run_records(instance, {tx.PARTITION_TAG: week}, records.UNFINISHED)
    if not unfinished:
        return
    left = [r.dagster_run for r in unfinished if requested_by_gone_command(r.dagster_run)]
    others = [r for r in unfinished if r.dagster_run not in left]
    if others:
        raise FleetError(describe_run(week, others[0].dagster_run))  # the oldest
    echo(f"fleet: week {week} has runs left by a fleet command that is gone ({', '.join(r.run_id for r in left)}); "
         "Dagster's run monitoring and the sensors end them first")


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


def _publish(week: str, kind: str, echo, tags: dict | None = None) -> tuple[object, list]:
    """A publish run of ``week`` (``kind`` reprocess or release: no network), submitted and followed as a week is;
    its run (None when the daemon launched none) and the lines of its failed steps."""
    from dagster import DagsterEventType

    from fleet import records
    from fleet.defs import daemon, requests
    from fleet.defs.claim import hold_week
    from fleet.defs.instance import get_instance
    from fleet.defs.report import step_error

    s = settings()
    with hold_week(s.home, week):
        check_data_remote()
        instance = get_instance(s)
        precheck_week(instance, week, echo)
        with daemon.serving(s, instance, echo) as serving:
            request = requests.submit(instance, week, kind=kind, tags=tags)
            chain = follow(instance, serving, week, request, echo)
    run = chain[-1] if chain else None
    failed = [] if run is None else [
        f"FAILED {rec.event_log_entry.dagster_event.step_key}: "
        f"{step_error(rec.event_log_entry.dagster_event.step_failure_data.error).splitlines()[0]}"
        for rec in records.events(instance, run.run_id, (DagsterEventType.STEP_FAILURE,))]
    return run, failed


def reprocess_week(week: str, echo=click.echo) -> int:
    """Post-process the stored raw rows again and commit the result; no network."""
    from fleet.storage import store as keys
    from fleet.transform.postprocess import consolidated

    consolidated(host_store(), week)  # one line when the week has no consolidated rows (of this layout)
    run, failed = _publish(week, "reprocess", echo)
    rec = host_store().read_json(week, keys.commit_key("processed"))
    if run is not None and run.status.value == "SUCCESS" and rec:
        echo(f"commit processed {rec['status']:<10} {rec['sha']}")
        return EXIT_OK
    for line in failed:
        echo(line, err=True)
    echo("fleet: reprocessing failed" + (f" (run {run.run_id})" if run is not None else ""), err=True)
    return EXIT_NOTHING


def release_week(week: str, sources: tuple[str, ...], note: str, echo=click.echo) -> int:
    """Commit the rows the quality gate held out of ``week``: a publish run tagged ``fleet/release`` (as the UI
    can launch one) consolidates and commits the week again with them; no network."""
    from fleet.quality import gate
    from fleet.storage import store as keys

    gate.check_held(host_store(), week, list(sources))  # one line naming a source that is not held, before any run
    run, failed = _publish(week, "release", echo, tags={gate.RELEASE_TAG: ",".join(sources),
                                                         gate.RELEASE_NOTE_TAG: note})
    for stage in ("raw", "processed"):
        rec = host_store().read_json(week, keys.commit_key(stage)) or {}
        echo(f"commit {stage:<9} {rec.get('status', '-'):<10} {rec.get('sha')}")
    if run is None or run.status.value != "SUCCESS":
        for line in failed:
            echo(line, err=True)
        echo("fleet: the release run failed" + (f" (run {run.run_id})" if run is not None else ""), err=True)
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
