"""``fleet``: run a week, the demo, the UI, status, re-commit from stored artifacts, and a scraper's life cycle (new,
test, record, smoke, canary, unquarantine). Thin: calls into the layers."""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import sys

import click
from pathlib import Path

from fleet.config import PROJECT_ROOT, chromium_path, scraper_dirs, settings
from fleet.errors import FleetError, without_credentials
from fleet.weeks import check_week_in_partitions, last_complete_week, parse_week, week_key

EXIT_OK, EXIT_PARTIAL, EXIT_NOTHING = 0, 1, 2


def _week_option(f):
    return click.option("--week", "week", default=None,
                        help="Monday (2026-11-16) or ISO week (2026-W47); default: the last complete week.")(f)


def resolve_week(week: str | None, option: str = "--week") -> str:
    """The partition key of ``week`` (default: the last complete week); a week the partitions do not hold (before
    FLEET_START_WEEK, or after the week in progress) is a FleetError, which the command group prints."""
    try:
        w = week_key(week) if week is not None else last_complete_week(dt.date.today()).isoformat()
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    return check_week_in_partitions(w, settings().start_week)


def say_sandbox(home: Path, echo=click.echo) -> None:
    """One line at start when the browser sandbox is off (fleet/engine/sandbox.py), and why."""
    from fleet.engine import sandbox

    home.mkdir(parents=True, exist_ok=True)  # the steps judge the sandbox with FLEET_HOME there: so does this
    line = sandbox.describe(sandbox.current(home, scraper_dirs()))
    if line and line not in _said:  # once per command, also when a backfill runs many weeks
        _said.add(line)
        echo(line, err=True)


_said: set[str] = set()


def run_week(week: str, sources: tuple[str, ...] = (), deep: tuple[str, ...] = (), refresh: bool = False,
             force: bool = False, echo=click.echo, verbose: bool = False) -> int:
    """Drive one week through the same jobs the schedule and UI use, and the same follow-up policy as the sensors
    (fleet/policy/followup.py), here in-process instead of from the daemon. ``force`` tags the runs
    ``fleet/force=true``: the raw assets then scrape a past week from today's web (fleet/policy/pastweek.py)."""
    from dagster import AssetKey, execute_job, reconstructable

    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    from fleet.lifecycle.progress import Progress
    from fleet.policy import taxonomy as tx
    from fleet.policy.followup import drive
    from fleet.policy.pastweek import FORCE_TAG
    from fleet.publish import check_remote
    from fleet.storage.open import check_store

    s = settings()
    # Refused before the week is scraped: a bad FLEET_DATA_BRANCH or FLEET_DATA_PREFIX, a FLEET_DATA_REMOTE that is a
    # file or a folder of something else, no Chromium (each worker would fail as infra, the source named but not
    # the cause).
    check_remote(d.defs.resources["data_repo"].data_repo())
    check_store(d.defs.resources["artifacts"].store())  # a bucket that does not exist, an endpoint that does not answer
    chromium_path()
    scraper_dirs()  # FLEET_SCRAPERS_DIR names folders that exist
    if not os.environ.get("FLEET_SCRAPERS_DIR", "").strip() and not os.environ.get("FLEET_DEMO_URL", "").strip():
        raise FleetError("no FLEET_SCRAPERS_DIR is set, and the bundled demo scrapers need the demo sites: "
                         "use `fleet demo`, or point FLEET_SCRAPERS_DIR at your scrapers")
    if s.executor == "celery":
        from fleet.defs.celery import check_broker, check_workers

        check_broker(s)
        instance = get_instance(s)
        check_workers(s)  # else every step would wait in the queue for a worker
    else:
        warm_forkserver()
        instance = get_instance(s)
    names = sorted(k.path[-1] for k in d.defs.resolve_all_asset_keys() if k.path[0] == "raw")
    unknown = [n for n in (*sources, *deep) if n not in names]
    if unknown:
        raise FleetError(f"unknown source(s): {', '.join(unknown)}; known: {', '.join(names)}")
    ops = {f"{tx.RAW_PREFIX}{n}": {"config": {"deep": n in deep, "refresh": refresh}} for n in (sources or names)
           if n in deep or refresh}
    logging_cfg = {"loggers": {"console": {"config": {"log_level": "DEBUG" if verbose else "INFO"}}}}
    base_tags = {**cli_run_tags(week), **({FORCE_TAG: "true"} if force else {})}
    selection = [AssetKey(["raw", n]) for n in sources] if sources else None
    store = _store()

    def launch(request, action):
        job = d.scrape_week_job if action.kind == "rerun" else d.publish_week_job
        result = execute_job(reconstructable(job), instance, run_config={**(request.run_config or {}), **logging_cfg},
                             tags={**base_tags, **request.tags}, asset_selection=request.asset_selection)
        return instance.get_run_by_id(result.run_id)

    say_sandbox(s.home, echo)  # after every refusal: a bad setting is the one line a refused run prints
    reap_orphaned_runs(instance, week, echo)
    where = f"on the workers of {without_credentials(s.celery_broker)}" if s.executor == "celery" else "on this machine"
    echo(f"fleet: scraping week {week} ({len(sources or names)} sources, at most {s.max_parallel} at once, {where})")
    with Progress(instance, store, week, len(sources or names), echo,
                  live=echo is click.echo and sys.stdout.isatty() and not verbose):
        result = execute_job(reconstructable(d.scrape_week_job), instance, run_config={"ops": ops, **logging_cfg},
                             tags={**base_tags, tx.TAG_KIND: "scrape"}, asset_selection=selection)
        run = instance.get_run_by_id(result.run_id)
        superseded(run)
        follow_ups = drive(instance, run, s.crash_reruns, store, launch, echo)
    publish_run = next((r for r in follow_ups if r.tags.get(tx.TAG_KIND) == "publish"), None)
    return report(instance, week, names, publish_run, echo, selected=list(sources or names),
                  run_ids=[run.run_id, *(r.run_id for r in follow_ups)])


def cli_run_tags(week: str) -> dict:
    """The tags of a run this process executes: its week, its driver, and this process as its run worker from
    the start (fleet/defs/runworker.py), so a run left behind by a killed `fleet run` is known for dead even if
    it died before its executor started."""
    import json

    from fleet.defs.runworker import TAG, identity
    from fleet.policy import taxonomy as tx

    return {tx.PARTITION_TAG: week, tx.TAG_DRIVER: "cli", TAG: json.dumps(identity(), sort_keys=True)}


def superseded(run) -> None:
    """Raise the FleetError of a run that stopped because an older run of its week was going (one run per
    week, fleet/defs/claim.py): nothing was done, and the CLI says why."""
    from fleet.policy import taxonomy as tx

    if tx.TAG_SUPERSEDED in run.tags:
        raise FleetError(run.tags[tx.TAG_SUPERSEDED])


def warm_forkserver() -> None:
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
            click.echo(f"fleet: forkserver not started ahead of the run ({type(exc).__name__}: {exc})", err=True)

    threading.Thread(target=start, name="fleet-forkserver-warmup", daemon=True).start()


def _store():
    from fleet.storage.open import open_store

    s = settings()
    return open_store(s.store_url, s.artifact_cache)


def reap_orphaned_runs(instance, week: str, echo) -> None:
    """Runs of this week left "in progress" by a `fleet run` that was killed: their run worker, recorded on the
    run (fleet/defs/runworker.py), was a process on this machine that is gone. Mark them failed with the reason,
    so they never hold the week (fleet/defs/claim.py). A run on another host is the run monitoring's to judge."""
    from dagster import DagsterRunStatus, RunsFilter

    from fleet.defs.runworker import worker_health
    from fleet.policy import taxonomy as tx
    from fleet.policy.followup import reap_dead_run

    stuck = [run for run in instance.get_runs(RunsFilter(tags={tx.PARTITION_TAG: week, tx.TAG_DRIVER: "cli"},
                                                         statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING,
                                                                   DagsterRunStatus.NOT_STARTED]))
             if worker_health(run).status == "FAILED"]
    for run in stuck:
        echo(f"fleet: run {run.run_id} for week {week} was left in progress by a process that is gone; marking it failed")
        reap_dead_run(instance, run, "the fleet run process died (kill -9 or reboot)")
        instance.add_run_tags(run.run_id, {"fleet/abandoned": "the fleet run process died (kill -9 or reboot)"})


def reprocess_week(week: str, echo=click.echo) -> int:
    """Post-process the stored raw rows again and commit the result; no network."""
    from dagster import AssetKey, execute_job, reconstructable

    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    from fleet.policy import taxonomy as tx
    from fleet.storage import store as keys

    s = settings()
    if not _store().exists(week, keys.CONSOLIDATED_KEY):
        raise FleetError(f"week {week} has no stored raw rows to reprocess; run it first")
    instance = get_instance(s)
    reap_orphaned_runs(instance, week, echo)
    result = execute_job(reconstructable(d.publish_week_job), instance,
                         run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}},
                         tags={**cli_run_tags(week), tx.TAG_KIND: "reprocess"},
                         asset_selection=[AssetKey("post_processed"), AssetKey("processed_commit")])
    superseded(instance.get_run_by_id(result.run_id))
    rec = _store().read_json(week, keys.commit_key("processed"))
    if result.success and rec:
        echo(f"commit processed {rec['status']:<10} {rec['sha']}")
        return EXIT_OK
    echo("fleet: reprocessing failed; see the log above", err=True)
    return EXIT_NOTHING


def release_week(week: str, sources: tuple[str, ...], note: str, echo=click.echo) -> int:
    """Commit the rows the quality gate held out of ``week``: a publish run tagged ``fleet/release`` (as the UI
    can launch one) consolidates and commits the week again with them; no network."""
    from dagster import execute_job, reconstructable

    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    from fleet.policy import taxonomy as tx
    from fleet.quality import gate
    from fleet.storage import store as keys

    s = settings()
    gate.check_held(_store(), week, list(sources))  # one line naming a source that is not held, before any run
    instance = get_instance(s)
    reap_orphaned_runs(instance, week, echo)
    result = execute_job(reconstructable(d.publish_week_job), instance,
                         run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}},
                         tags={**cli_run_tags(week), tx.TAG_KIND: "release",
                               gate.RELEASE_TAG: ",".join(sources), gate.RELEASE_NOTE_TAG: note})
    superseded(instance.get_run_by_id(result.run_id))
    for stage in ("raw", "processed"):
        rec = _store().read_json(week, keys.commit_key(stage)) or {}
        echo(f"commit {stage:<9} {rec.get('status', '-'):<10} {rec.get('sha')}")
    if not result.success:
        echo("fleet: the release run failed; see the log above", err=True)
        return EXIT_NOTHING
    return EXIT_OK


def report(instance, week: str, names: list[str], publish_run, echo, selected: list[str],
           run_ids: list[str]) -> int:
    from dagster import DagsterEventType

    from fleet.policy.status import week_status
    from fleet.storage import store as keys

    store = _store()
    rows = week_status(instance, store, week, names)
    print_status(rows, echo)
    steps_ok = set()
    failures = {}
    if publish_run is not None:
        for rec in instance.all_logs(publish_run.run_id, of_type={DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE}):
            ev = rec.dagster_event
            if ev.event_type == DagsterEventType.STEP_SUCCESS:
                steps_ok.add(ev.step_key)
            else:
                failures[ev.step_key] = _step_error(ev.step_failure_data.error)
    for stage in ("raw", "processed"):
        rec = store.read_json(week, keys.commit_key(stage))
        if f"{stage}_commit" in steps_ok and rec:
            echo(f"commit {stage:<9} {rec['status']:<10} {rec['sha']}")
    print_alerts(week, echo, run_ids=run_ids)
    held = (store.read_json(week, keys.CONSOLIDATED_META_KEY) or {}).get("held") or {}
    for name, why in sorted(held.items()):
        echo(f"HELD {name}: {why['rows']} rows kept out of the commit by the quality gate ({'; '.join(why['checks'])}); "
             f"`fleet release {name} --week {week}` commits them", err=True)
    for step, msg in failures.items():
        echo(f"FAILED {step}: {msg.splitlines()[0] if msg else ''}", err=True)
    if "raw_commit" not in steps_ok:
        if publish_run is None:
            echo("nothing was committed: no publish run happened", err=True)
        return EXIT_NOTHING
    if "processed_commit" not in steps_ok:
        echo("the raw rows were committed, but post-processing or its commit failed (see above); "
             "rerun with `fleet reprocess` or `fleet commit --stage processed`", err=True)
        return EXIT_PARTIAL
    return EXIT_OK if all(r.status == "ok" and r.source not in held for r in rows if r.source in selected) else EXIT_PARTIAL


def _step_error(error) -> str:
    """What a failed step says: the error its own code raised, not Dagster's wrapper around it ("Error occurred
    while executing op ..."), whose cause it is."""
    if error is None:
        return "failed"
    while error.cause is not None and error.cls_name == "DagsterExecutionStepExecutionError":
        error = error.cause
    return error.message.strip()


def print_alerts(week: str, echo, run_ids: list[str] | None = None) -> None:
    """The week's alerts that the runs ``run_ids`` delivered (each alert is delivered once, by the run that first
    found its problem), as the alert log records them; all of the week's if ``run_ids`` is None."""
    from fleet.quality import alerts as alerting

    mine = alerting.logged(settings().home, week=week, run_ids=run_ids)
    if mine:
        echo(f"alerts for week {week} ({len(mine)}):")
        for a in mine:
            echo(f"  {a['severity']:<5} {a.get('source') or 'week':<20} {a['check']:<12} {a['message'].splitlines()[0][:160]}")


def print_status(rows, echo=click.echo) -> None:
    # as wide as the longest name (up to NAME_MAX, 63), at least 20 as it always was
    w = max([20, *(len(r.source) for r in rows)])
    echo(f"{'source':<{w}} {'status':<11} {'category':<8} {'rows':>6} {'seconds':>8} {'attempts':>8}  {'host':<16}  detail")
    for r in rows:
        detail = r.note or ""
        if r.error:
            detail = (detail + "; " if detail else "") + r.error.strip().splitlines()[0][:140]
        echo(f"{r.source:<{w}} {r.status:<11} {(r.category or '-'):<8} {r.rows:>6} {r.seconds:>8.1f} {r.attempts:>8}  "
             f"{(r.host or '-'):<16}  {detail}")


class _Group(click.Group):
    """Every command's ``FleetError`` (a bad setting, an unknown week or source) is one line on stderr and exit
    code 2, not a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except FleetError as exc:
            click.echo(f"fleet: error: {exc}", err=True)
            sys.exit(EXIT_NOTHING)


@click.group(cls=_Group)
def main():
    """fleet: weekly Playwright scrapers as a Dagster asset graph, committed to a Git-LFS data repository."""


def _check_run_options(sources: tuple[str, ...], deep: tuple[str, ...]) -> None:
    from fleet.scraping.contract import NAME_MAX, valid_name

    for option, names in (("--source", sources), ("--deep", deep)):
        bad = [n for n in names if not valid_name(n)]
        if bad:
            raise click.BadParameter(f"{', '.join(map(repr, bad))}: a source's name matches [a-z][a-z0-9_]*, "
                                     f"at most {NAME_MAX} characters", param_hint=option)
    left_out = [n for n in deep if sources and n not in sources]
    if left_out:
        raise click.BadParameter(f"{', '.join(left_out)} not among --source {' '.join(sources)}; its deep phase "
                                 "would not run", param_hint="--deep")


def _run_options(f):
    f = click.option("-v", "--verbose", is_flag=True, help="Show Dagster's DEBUG lines (step events) too.")(f)
    f = click.option("--force", is_flag=True, help="Allow scraping a week older than the last complete week.")(f)
    f = click.option("--refresh", is_flag=True, help="Scrape again even where this week's raw artifact is stored.")(f)
    f = click.option("--deep", multiple=True, metavar="NAME", help="Turn on NAME's expensive phase.")(f)
    f = click.option("--source", "sources", multiple=True, metavar="NAME", help="Only these sources.")(f)
    return _week_option(f)


def past_week_refusal(week: str, sources: tuple[str, ...] = (), deep: tuple[str, ...] = (),
                      refresh: bool = False) -> str | None:
    """Why running ``week`` must not go ahead without --force, or None: the raw assets' past-week rule
    (fleet/policy/pastweek.py), which refuses such sources inside the run anyway, checked up front for the
    selected sources so the command stops with one line before it starts anything."""
    from fleet.policy import pastweek
    from fleet.scraping.discovery import discover

    now = dt.datetime.now(dt.timezone.utc)
    if not pastweek.is_past(week, now):
        return None
    names = list(sources) or sorted(src.name for src in discover(scraper_dirs()))
    return pastweek.refusal(week, names, store=_store(), as_of=now, deep=deep, refresh=refresh,
                            how_to_force="Use --force to scrape anyway")


def refuse_past_week(week: str, force: bool, sources: tuple[str, ...] = (), deep: tuple[str, ...] = (),
                     refresh: bool = False) -> None:
    why = None if force else _exit_on_error(past_week_refusal, week, sources, deep, refresh)
    if why:
        click.echo(f"fleet: error: {why}", err=True)
        sys.exit(EXIT_NOTHING)


def _exit_on_error(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except FleetError as exc:
        click.echo(f"fleet: error: {exc}", err=True)
        sys.exit(EXIT_NOTHING)


@main.command()
@_run_options
def run(week, sources, deep, refresh, force, verbose):
    """Run the weekly pipeline for one week."""
    w = resolve_week(week)
    _check_run_options(sources, deep)
    refuse_past_week(w, force, sources, deep, refresh)
    sys.exit(_exit_on_error(run_week, w, sources, deep, refresh, force, verbose=verbose))


@main.command()
@_run_options
def demo(week, sources, deep, refresh, force, verbose):
    """Start the bundled demo sites on 127.0.0.1 and run the demo scrapers against them."""
    from fleet.demo.sites import DemoSites

    w = resolve_week(week)
    _check_run_options(sources, deep)
    refuse_past_week(w, force, sources, deep, refresh)
    with DemoSites() as sites:
        os.environ["FLEET_DEMO_URL"] = sites.url
        click.echo(f"fleet: demo sites at {sites.url}")
        code = _exit_on_error(run_week, w, sources, deep, refresh, force, verbose=verbose)
    sys.exit(code)


@main.command()
@click.option("--from", "start", required=True, help="First week (Monday or ISO week).")
@click.option("--to", "end", required=True, help="Last week, inclusive.")
@click.option("--force", is_flag=True, help="Allow scraping weeks older than the last complete week.")
def backfill(start, end, force):
    """Re-run weeks. A week older than the last complete one runs only from its stored raw rows, without the
    network, unless --force."""
    first, last = resolve_week(start, "--from"), resolve_week(end, "--to")
    if last < first:
        raise click.BadParameter("--to is before --from")
    worst = EXIT_OK
    week = parse_week(first)
    while week <= parse_week(last):
        w = week.isoformat()
        why = None if force else _exit_on_error(past_week_refusal, w)
        if why:
            click.echo(f"fleet: {why}", err=True)
            worst = max(worst, EXIT_NOTHING)
        else:
            worst = max(worst, _exit_on_error(run_week, w, force=force))
        week += dt.timedelta(days=7)
    sys.exit(worst)


@main.command()
@_week_option
def reprocess(week):
    """Re-run post-processing on a week's stored raw rows (no network) and commit the result."""
    sys.exit(_exit_on_error(reprocess_week, resolve_week(week)))


@main.command()
@click.argument("sources", nargs=-1, required=True, metavar="SOURCE...")
@_week_option
@click.option("--note", default="", help="Why the held rows may be committed (goes into the commit message).")
def release(sources, week, note):
    """Commit the rows of SOURCE that the quality gate held out of a week's commit (no network)."""
    _check_run_options(sources, ())
    sys.exit(_exit_on_error(release_week, resolve_week(week), sources, note))


@main.command()
@click.argument("source")
def history(source):
    """One source over the stored weeks: status, category, rows, seconds, error."""
    from fleet.scraping.contract import valid_name
    from fleet.storage import store as keys

    if not valid_name(source):
        raise click.BadParameter(f"{source!r} is not a source name (lowercase letters, digits and _)",
                                 param_hint="SOURCE")
    store = _store()
    click.echo(f"{'week':<11} {'status':<8} {'category':<8} {'rows':>6} {'seconds':>8}  detail")
    found = False
    for w in store.weeks():
        rec = keys.read_outcome(store, w, source)
        if not rec:
            continue
        found = True
        detail = (rec.get("error") or "").strip().splitlines()[0][:120] if rec.get("error") else ""
        click.echo(f"{w:<11} {rec['status']:<8} {(rec.get('category') or '-'):<8} {int(rec.get('rows') or 0):>6} "
                   f"{float(rec.get('seconds') or 0):>8.1f}  {detail}")
    if not found:
        click.echo(f"fleet: no stored weeks for source {source!r}", err=True)
        sys.exit(EXIT_NOTHING)


@main.command()
@_week_option
def status(week):
    """Per source: status, category, rows, seconds, attempts and error for one week."""
    from fleet.defs import definitions as d
    from fleet.defs.assets import SOURCE_CHECKS
    from fleet.defs.instance import get_instance
    from fleet.policy.status import failed_checks, week_status
    from fleet.publish.week import describe
    from fleet.storage import store as keys

    w = resolve_week(week)
    names = sorted(k.path[-1] for k in d.defs.resolve_all_asset_keys() if k.path[0] == "raw")
    store = _store()
    click.echo(f"week {w}")
    instance = get_instance(settings())
    print_status(week_status(instance, store, w, names))
    failed = failed_checks(instance, w, names, SOURCE_CHECKS)  # what the UI shows, not only what was evaluated
    click.echo(f"checks: {len(failed)} failed" + (":" if failed else ""))
    for c in failed:
        click.echo(f"  {c.severity:<5} {c.source:<20} {c.check:<10} {(c.message.splitlines() or [''])[0][:140]}")
    for stage in ("raw", "processed"):
        rec = store.read_json(w, keys.commit_key(stage))
        lfs = f"  (added {_mb(rec['lfs_bytes'])} of LFS storage)" if (rec or {}).get("lfs_bytes") else ""
        click.echo(f"commit {stage:<9} {describe(rec)}{lfs}")
    held = {folder: store.size(w, folder) for folder in ("raw", "evidence", "work")}
    click.echo(f"store: week {w} holds " + ", ".join(f"{k} {_mb(v)}" for k, v in held.items())
               + f"; all weeks {_mb(sum(store.size(x, '.') for x in store.weeks()))}")
    print_lifecycle(store, w)


def print_lifecycle(store, week: str, echo=click.echo) -> None:
    """The sources carried forward into ``week``, and those in quarantine now."""
    from fleet.lifecycle import quarantine
    from fleet.scraping.discovery import discover
    from fleet.storage import store as keys

    for name, c in sorted(((store.read_json(week, keys.CONSOLIDATED_META_KEY) or {}).get("carried") or {}).items()):
        echo(f"carried forward {name}: {c['rows']} rows of week {c['from']} (stale_since {c['from']}); this week {c['status']}")
    for q in quarantine.current(store, discover(scraper_dirs())):
        echo(f"quarantined {q.source}: {q.describe()}")


@main.command()
@click.argument("name")
def unquarantine(name):
    """Lift NAME's quarantine: the next weekly run scrapes it again."""
    from fleet.lifecycle import quarantine
    from fleet.lifecycle.replay import select

    (source,), _ = select(scraper_dirs(), (name,))
    store = _store()
    q = quarantine.state(store, name, source.quarantine_after)
    if q is None:
        click.echo(f"fleet: source {name} is not quarantined")
        return
    quarantine.lift(store, name, by="fleet unquarantine")
    click.echo(f"fleet: lifted the quarantine of {name} (failed weeks {', '.join(q.weeks)}); the next run scrapes it")


@main.command()
@_week_option
@click.option("--stage", type=click.Choice(["raw", "processed"]), default=None, help="Only this stage (default: both that are stored).")
def commit(week, stage):
    """Re-run only the commit of a week, from its stored artifacts."""
    from fleet.defs import definitions as d
    from fleet.publish.week import STAGE_FILES, commit_stage

    w = resolve_week(week)
    store = _store()
    stages = [stage] if stage else [st for st, (key, _) in STAGE_FILES.items() if store.exists(w, key)]
    if not stages:
        click.echo(f"fleet: error: week {w} has no stored artifacts to commit", err=True)
        sys.exit(EXIT_NOTHING)
    for st in stages:
        res = _exit_on_error(commit_stage, d.defs.resources["data_repo"].data_repo(), store, w, st, run_id="cli-commit")
        click.echo(f"commit {st:<9} {res.status:<10} {res.sha}")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@main.command()
@click.option("--keep-weeks", "keep_weeks", required=True, type=int, help="Weeks to keep, up to the last complete one.")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
def gc(keep_weeks, dry_run):
    """Remove evidence, work folders and spooled rows older than N weeks (never uncommitted rows, never the data repository)."""
    from fleet.policy import retention

    store = _store()
    removals = retention.plan(store, keep_weeks, last_complete_week(dt.date.today()))
    verb = "would remove" if dry_run else "removed"
    for r in removals:
        click.echo(f"{r.week}  {'kept' if r.kept_because else verb:<12} {r.key:<40} {_mb(r.bytes):>10}"
                   + (f"  ({r.kept_because})" if r.kept_because else ""))
    freed = sum(r.bytes for r in removals if not r.kept_because) if dry_run else retention.collect(store, removals)
    click.echo(f"{verb} {sum(1 for r in removals if not r.kept_because)} item(s), {_mb(freed)}")


@main.command()
@click.option("--deadline", default=None, metavar="'DAY HH:MM'",
              help="When a week's raw commit is due, in UTC, in the week after it (default: FLEET_FRESHNESS_DEADLINE, "
                   "else 'mon 12:00').")
@click.option("--as-of", "as_of", default=None, metavar="TIME", help="Check as of this ISO 8601 time (default: now).")
def freshness(deadline, as_of):
    """Dead-man's switch: exit 0 if the last due week's raw commit is in the data repository, else 1 (and alert once)."""
    from fleet.policy import freshness as fresh
    from fleet.publish.datarepo import DataRepo

    s = settings()
    due = fresh.parse_deadline(deadline, "--deadline") if deadline is not None else fresh.parse_deadline(
        os.environ.get(fresh.SETTING))
    try:
        now = dt.datetime.fromisoformat(as_of) if as_of else dt.datetime.now(dt.timezone.utc)
    except ValueError:
        raise click.BadParameter(f"not an ISO 8601 time: {as_of!r}", param_hint="--as-of") from None
    now = now if now.tzinfo else now.replace(tzinfo=dt.timezone.utc)
    sys.exit(fresh.check(DataRepo.from_settings(s), s.home, now, due, start_week=s.start_week,
                         webhook=os.environ.get("FLEET_ALERT_WEBHOOK", "").strip() or None, echo=click.echo))


@main.command()
@click.option("--port", default=3000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--demo/--no-demo", default=None, help="Serve the demo sites too (default: when using the bundled scrapers).")
def ui(port, demo):
    """The Dagster UI (webserver and daemon) on workspace.yaml."""
    import subprocess

    from dagster import DagsterInstance

    from fleet.defs.instance import check_instance, ensure_home

    from fleet.storage.open import check_store

    s = settings()
    ensure_home(s)
    with DagsterInstance.get() as instance:  # what the webserver and daemon will load: refused now, not later
        check_instance(s, instance)
    check_store(_store())
    if s.executor == "celery":  # the runs it launches queue their steps there; workers may start later
        from fleet.defs.celery import check_broker

        check_broker(s)
    say_sandbox(s.home)  # the runs it launches scrape on this host under the multiprocess executor
    # `dagster dev` runs in the checkout; its code server and runs must use this home, as this process does
    os.environ["FLEET_HOME"] = str(s.home)
    use_demo = demo if demo is not None else not os.environ.get("FLEET_SCRAPERS_DIR")
    stack = contextlib.ExitStack()
    if use_demo:
        from fleet.demo.sites import DemoSites

        sites = stack.enter_context(DemoSites())
        os.environ["FLEET_DEMO_URL"] = sites.url
        click.echo(f"fleet: demo sites at {sites.url}")
    with stack:
        cmd = [sys.executable, "-m", "dagster", "dev", "-w", str(PROJECT_ROOT / "workspace.yaml"), "-p", str(port)]
        dev = subprocess.Popen(cmd, cwd=PROJECT_ROOT)
        # `kill` of this process alone (not its group, as Ctrl-C is) must not leave `dagster dev`, its webserver
        # and its daemon running: it gets the signal too, and stops them as it does on Ctrl-C.
        previous = {sig: signal.signal(sig, lambda signum, _frame: dev.send_signal(signum))
                    for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            while True:
                try:
                    code = dev.wait()
                    break
                except KeyboardInterrupt:  # Ctrl-C reached `dagster dev` as well; wait for it to stop
                    continue
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        sys.exit(code)


@main.command()
@click.option("--concurrency", default=None, type=click.IntRange(1, 256),
              help="Sources this worker scrapes at once (default: FLEET_WORKER_CONCURRENCY, 10).")
@click.option("--name", default=None, help="The worker's Celery node name (default: fleet-<host>-<pid>).")
def worker(concurrency, name):
    """A Celery worker that runs the scrape steps of FLEET_EXECUTOR=celery runs, with this host's settings."""
    from fleet.defs import celery

    def start():
        s = settings()
        if s.executor != "celery":
            raise FleetError("fleet worker serves FLEET_EXECUTOR=celery runs: set FLEET_EXECUTOR=celery and "
                             "FLEET_CELERY_BROKER on this host and on the one that runs the weeks")
        chromium_path()
        scraper_dirs()
        from fleet.storage.open import check_store

        check_store(_store())  # the steps' rows, checkpoints and evidence go there
        celery.check_broker(s)
        from fleet.defs.instance import get_instance

        # the instance the steps report to: refused now if Postgres cannot be reached. Its run settings (the pool
        # limit, the run queue) are the business of the host that runs the weeks, not of a worker
        get_instance(s, check=False)
        say_sandbox(s.home)  # this host's browsers: sandboxed, or the one line that says why not
        node = celery.worker_name(name)
        os.environ["FLEET_WORKER_NAME"] = node  # each step's metadata names the host and worker that ran it
        import fleet.defs.definitions  # noqa: F401  the pool's processes fork with the definitions in memory

        click.echo(f"fleet: worker {node} on {without_credentials(s.celery_broker)}, "
                   f"{concurrency or s.worker_concurrency} at once")
        code = celery.supervise(lambda: celery.worker_main(s, concurrency or s.worker_concurrency, node),
                                f"the celery worker {node}", lambda line: click.echo(line, err=True))
        sys.exit(code)

    _exit_on_error(start)


@main.command("new")
@click.argument("name")
@click.argument("url")
def new_source(name, url):
    """Write scrapers/NAME.py, a short scraper that opens URL, and its fixture recorded from URL."""
    from fleet.lifecycle.scaffold import new

    module, har, expect = new(name, url, scraper_dirs())
    click.echo(f"fleet: wrote {module} and {har} ({expect['rows']} row(s)); edit the scraper, then "
               f"`fleet record {name}` and `fleet test {name}`")


@main.command("test")
@click.argument("names", nargs=-1)
def test_cmd(names):
    """Replay each source (or NAMES) offline from its recorded fixture and check its rows. Exit 0: all pass; 1:
    some failed; 2: usage error."""
    from fleet.lifecycle.replay import print_table, test_sources

    chromium_path()
    rows = test_sources(scraper_dirs(), names)
    print_table(rows, click.echo)
    if not any(r.result != "skip" for r in rows):
        click.echo("fleet: no source has a fixture; nothing was tested")
    sys.exit(EXIT_PARTIAL if any(r.result == "fail" for r in rows) else EXIT_OK)


@main.command()
@click.argument("name")
def record(name):
    """Record NAME's fixture again from the live site, update its expectation, and show the difference."""
    from fleet.lifecycle.replay import demo_sites_if_bundled, record as record_fixture, select

    chromium_path()
    (source,), _ = select(scraper_dirs(), (name,))
    with demo_sites_if_bundled():
        old, new = record_fixture(source)
    if old is None:
        click.echo(f"fleet: recorded {name}: {new['rows']} rows (no earlier fixture)")
        return
    from fleet.lifecycle.fixtures import compare

    diff = compare(old, new)
    click.echo(f"fleet: recorded {name}: " + ("; ".join(diff) if diff else f"no change ({new['rows']} rows)"))


@main.command()
@click.option("--changed-since", "ref", required=True, metavar="REF",
              help="Run the sources that the changes since this git commit touch.")
def smoke(ref):
    """Run, live and once each, exactly the sources a git diff touches; nothing is committed. Exit 0: all pass or
    none affected; 1: some failed; 2: usage error."""
    from fleet.lifecycle import smoke as smoking
    from fleet.lifecycle.replay import demo_sites_if_bundled, print_table
    from fleet.scraping.discovery import discover

    chromium_path()
    dirs = scraper_dirs()
    with demo_sites_if_bundled():
        rows = smoking.smoke(discover(dirs), ref, dirs[0], _store(), click.echo)
    if rows is None:
        sys.exit(EXIT_OK)
    print_table(rows, click.echo)
    sys.exit(EXIT_PARTIAL if any(r.result == "fail" for r in rows) else EXIT_OK)


@main.command()
@click.argument("names", nargs=-1)
def canary(names):
    """One live page per source (or NAMES), through each scraper's first navigation and first rows; nothing is
    committed. A source that starts failing raises one alert. Exit 0: all pass; 1: some failed; 2: usage error."""
    from fleet.lifecycle.canary import check
    from fleet.lifecycle.replay import demo_sites_if_bundled, print_table, select

    chromium_path()
    s = settings()
    sources, _ = select(scraper_dirs(), names)
    with demo_sites_if_bundled():
        rows = check(sources, _store(), s.home)  # the webhook: FLEET_ALERT_WEBHOOK, as for every alert
    print_table(rows, click.echo)
    sys.exit(EXIT_PARTIAL if any(r.result == "fail" for r in rows) else EXIT_OK)


if __name__ == "__main__":
    main()
