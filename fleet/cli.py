"""``fleet``: run a week, the demo, the UI, status, re-commit from stored artifacts, and a scraper's life cycle (new,
test, record, smoke, canary, unquarantine, doctor). Each command parses its options, calls one function of the layer that
does the work, and exits with what it returns; the week driver is fleet/defs/week.py."""
from __future__ import annotations

import atexit
import datetime as dt
import gc
import sys

import click

from fleet import upkeep
from fleet.config import settings
from fleet.defs import report, week as driver
from fleet.defs.report import EXIT_NOTHING
from fleet.lifecycle import commands as lifecycle
from fleet.errors import FleetError
from fleet.weeks import check_week_in_partitions, last_complete_week, utc_now, week_key


# Registered at import, so it runs after the exit handlers of what a command starts (last in, first out): what
# a command leaves in memory (Dagster, polars, the definitions, the runs' records: hundreds of thousands of
# objects) goes with the process anyway, and the interpreter's own garbage collections of it at exit took
# 0.6-0.9 s of a core per command. Frozen, they are skipped. Nothing of fleet's waits for them: its files are
# written by atomic renames and its records by committed transactions before a command returns, and stdout and
# stderr are flushed by the interpreter after this.
atexit.register(gc.freeze)


def _week_option(f):
    return click.option("--week", "week", default=None,
                        help="Monday (2026-11-16) or ISO week (2026-W47); default: the last complete week.")(f)


def resolve_week(week: str | None, option: str = "--week") -> str:
    """The partition key of ``week`` (default: the last complete week, in UTC); a week the partitions do not hold
    (before FLEET_START_WEEK, or after the week in progress) is a FleetError, which the command group prints."""
    try:
        w = week_key(week) if week is not None else last_complete_week().isoformat()
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    return check_week_in_partitions(w, settings().start_week)


class _Group(click.Group):
    """Every command's ``FleetError`` (a bad setting, an unknown week or source) is one line on stderr and exit
    code 2, not a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except FleetError as exc:
            click.echo(f"fleet: error: {exc}", err=True)
            sys.exit(EXIT_NOTHING)

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        """A usage error (an unknown option, a missing argument, a bad value) in the same one line, and exit code
        2, instead of click's block of usage and "Try --help"; `fleet` alone still prints the help."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except getattr(click.exceptions, "NoArgsIsHelpError", ()) as exc:  # click 8.2+: a bare group's help
            click.echo(exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "fleet"
            message = " ".join(exc.format_message().split()).rstrip(".")
            click.echo(f"fleet: error: {where}: {message[:1].lower()}{message[1:]} (see `{where} --help`)", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"fleet: error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_Group)
@click.version_option(version=None, package_name="fleet", prog_name="fleet", message="%(prog)s %(version)s")
def main():
    """fleet: weekly Playwright scrapers as a Dagster asset graph, committed to a Git-LFS data repository."""
    from fleet.config import check_names
    from fleet.secrets import hide_git_token

    check_names()  # a mistyped FLEET_* name is refused before any command reads a setting
    hide_git_token()  # before any child starts: only the step that commits reads the token (fleet/secrets.py)


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
    f = click.option("-v", "--verbose", is_flag=True, help="Show Dagster's own log lines (step events) too.")(f)
    f = click.option("--force", is_flag=True, help="Allow scraping a week older than the last complete week.")(f)
    f = click.option("--refresh", is_flag=True, help="Scrape again even where this week's raw artifact is stored.")(f)
    f = click.option("--deep", multiple=True, metavar="NAME", help="Turn on NAME's expensive phase.")(f)
    f = click.option("--source", "sources", multiple=True, metavar="NAME", help="Only these sources.")(f)
    return _week_option(f)


@main.command()
@_run_options
def run(week, sources, deep, refresh, force, verbose):
    """Run the weekly pipeline for one week."""
    w = resolve_week(week)
    _check_run_options(sources, deep)
    sys.exit(driver.run(w, sources, deep, refresh, force, verbose))


@main.command()
@_run_options
def demo(week, sources, deep, refresh, force, verbose):
    """Start the bundled demo sites on 127.0.0.1 and run the demo scrapers against them."""
    w = resolve_week(week)
    _check_run_options(sources, deep)
    sys.exit(driver.run(w, sources, deep, refresh, force, verbose, demo=True))


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
    sys.exit(driver.backfill(first, last, force))


@main.command()
@_week_option
def reprocess(week):
    """Re-run post-processing on a week's stored raw rows (no network) and commit the result."""
    sys.exit(driver.reprocess_week(resolve_week(week)))


@main.command()
@click.argument("sources", nargs=-1, required=True, metavar="SOURCE...")
@_week_option
@click.option("--note", default="", help="Why the held rows may be committed (goes into the commit message).")
def release(sources, week, note):
    """Commit the rows of SOURCE that the quality gate held out of a week's commit (no network)."""
    _check_run_options(sources, ())
    sys.exit(driver.release_week(resolve_week(week), sources, note))


@main.command()
@click.argument("source")
def history(source):
    """One source over the stored weeks: status, category, rows, seconds, error."""
    from fleet.scraping.contract import valid_name

    if not valid_name(source):
        raise click.BadParameter(f"{source!r} is not a source name (lowercase letters, digits and _)",
                                 param_hint="SOURCE")
    sys.exit(report.history(source))


@main.command()
@_week_option
def status(week):
    """Per source: status, category, rows, seconds, attempts and error for one week."""
    sys.exit(report.status(resolve_week(week)))


@main.command()
@click.argument("name")
def unquarantine(name):
    """Lift NAME's quarantine: the next weekly run scrapes it again."""
    sys.exit(lifecycle.unquarantine(name))


@main.command()
@_week_option
@click.option("--stage", type=click.Choice(["raw", "processed"]), default=None, help="Only this stage (default: both that are stored).")
@click.option("--drop", "drop", multiple=True, metavar="NAME",
              help="Remove this source's files from the week's folder on the branch (repeatable).")
def commit(week, stage, drop):
    """Re-run only the commit of a week, from its stored artifacts."""
    sys.exit(driver.commit_week(resolve_week(week), stage, drop))


@main.command()
@click.argument("source")
@click.option("--week", default=None, help="The week (default: the newest the data repository holds SOURCE for).")
@click.option("--stage", type=click.Choice(["raw", "processed"]), default="raw", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]), default="table",
              show_default=True, help="parquet writes to --output (or standard output when it is not a terminal).")
@click.option("--output", "-o", default=None, type=click.Path(dir_okay=False), help="Write here instead of printing.")
def show(source, week, stage, fmt, output):
    """Print or export SOURCE's committed rows of a week, as the data repository holds them."""
    from fleet.publish import read

    sys.exit(read.show(source, resolve_week(week) if week else None, stage, fmt, output))


@main.command()
@click.option("--keep-weeks", "keep_weeks", required=True, type=int, help="Weeks to keep, up to the last complete one.")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
def gc(keep_weeks, dry_run):
    """Remove evidence, work folders and spooled rows older than N weeks (never uncommitted rows, never the data repository)."""
    sys.exit(upkeep.gc(keep_weeks, dry_run))


@main.command()
@click.option("--deadline", default=None, metavar="'DAY HH:MM'",
              help="When a week's raw commit is due, in UTC, in the week after it (default: FLEET_FRESHNESS_DEADLINE, "
                   "else 'mon 12:00').")
@click.option("--as-of", "as_of", default=None, metavar="TIME", help="Check as of this ISO 8601 time (default: now).")
def freshness(deadline, as_of):
    """Dead-man's switch: exit 0 if the last due week's raw commit is in the data repository, else 1 (and alert once)."""
    try:
        now = dt.datetime.fromisoformat(as_of) if as_of else utc_now()
    except ValueError:
        raise click.BadParameter(f"not an ISO 8601 time: {as_of!r}", param_hint="--as-of") from None
    sys.exit(upkeep.freshness(deadline, now if now.tzinfo else now.replace(tzinfo=dt.timezone.utc)))


@main.command()
@click.argument("source")
@_week_option
def debug(source, week):
    """List SOURCE's kept evidence of a week (screenshot, page, error, trace) and open its trace in Playwright's
    trace viewer, offline: the command is printed, and run when a display is there."""
    from fleet.scraping.contract import valid_name

    if not valid_name(source):
        raise click.BadParameter(f"{source!r} is not a source name (lowercase letters, digits and _)",
                                 param_hint="SOURCE")
    sys.exit(upkeep.debug(source, resolve_week(week)))


@main.command()
@click.option("--port", default=3000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--demo/--no-demo", default=None, help="Serve the demo sites too (default: when using the bundled scrapers).")
def ui(port, demo):
    """The Dagster UI (webserver and daemon) on workspace.yaml."""
    from fleet.defs.ui import serve

    sys.exit(serve(port, demo))


@main.command()
@click.option("--concurrency", default=None, type=click.IntRange(1, 256),
              help="Sources this worker scrapes at once (default: FLEET_WORKER_CONCURRENCY, 10).")
@click.option("--name", default=None, help="The worker's Celery node name (default: fleet-<pid>@<host>).")
def worker(concurrency, name):
    """A Celery worker that runs the scrape steps of FLEET_EXECUTOR=celery runs, with this host's settings."""
    from fleet.defs.worker import start_worker

    sys.exit(start_worker(concurrency, name))


@main.command("new")
@click.argument("name")
@click.argument("url")
def new_source(name, url):
    """Write NAME.py, a short scraper that opens URL, and its fixture recorded from URL, into FLEET_SCRAPERS_DIR
    (its first folder), where `fleet run` reads."""
    sys.exit(lifecycle.new_source(name, url))


@main.command("test")
@click.argument("names", nargs=-1)
@click.option("--allow-untested", is_flag=True, help="A source without a fixture is listed, but does not fail.")
def test_cmd(names, allow_untested):
    """Replay each source (or NAMES) offline from its recorded fixture and check its rows. Exit 0: all pass; 1:
    some failed, are broken (do not import or validate) or have no fixture; 2: usage error."""
    sys.exit(lifecycle.test(names, allow_untested))


@main.command()
@click.argument("name")
def record(name):
    """Record NAME's fixture again from the live site, update its expectation, and show the difference."""
    sys.exit(lifecycle.record(name))


@main.command()
@click.option("--changed-since", "ref", required=True, metavar="REF",
              help="Run the sources that the changes since this git commit touch.")
def smoke(ref):
    """Run, live and once each, exactly the sources a git diff touches; nothing is committed. Exit 0: all pass or
    none affected; 1: some failed; 2: usage error."""
    sys.exit(lifecycle.smoke(ref))


@main.command()
@click.argument("names", nargs=-1)
def canary(names):
    """One live page per source (or NAMES), through each scraper's first navigation and first rows; nothing is
    committed. A source that starts failing raises one alert. Exit 0: all pass; 1: some failed; 2: usage error."""
    sys.exit(lifecycle.canary(names))


@main.command()
@click.argument("name")
@click.option("--apply", is_flag=True, help="Write the proposal into the scraper's module, if it passed.")
def doctor(name, apply):
    """For NAME's locators that stopped matching, propose replacements from its last good week (its fixture, or
    failing that its stored rows) and test them against today's page. Exit 0: nothing broken, or a proposal passed;
    1: no replacement found; 2: usage."""
    sys.exit(lifecycle.doctor(name, apply))


if __name__ == "__main__":
    main()
