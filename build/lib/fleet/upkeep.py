"""The periodic upkeep commands: `fleet gc` (the store's retention) and `fleet freshness` (the dead-man's switch on
the data repository), and `fleet debug` (a failed source's evidence and trace). Each prints its lines and returns
the exit code."""
from __future__ import annotations

import datetime as dt

import click

from fleet import config
from fleet.config import settings
from fleet.weeks import last_complete_week


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def gc(keep_weeks: int, dry_run: bool, echo=click.echo) -> int:
    """Remove (or with ``dry_run`` list) what fleet/policy/retention.py plans to free beyond ``keep_weeks``."""
    from fleet.policy import retention
    from fleet.storage.open import host_store

    store = host_store()
    removals = retention.plan(store, keep_weeks, last_complete_week())
    verb = "would remove" if dry_run else "removed"
    for r in removals:
        echo(f"{r.week}  {'kept' if r.kept_because else verb:<12} {r.key:<40} {mb(r.bytes):>10}"
             + (f"  ({r.kept_because})" if r.kept_because else ""))
    freed = sum(r.bytes for r in removals if not r.kept_because) if dry_run else retention.collect(store, removals)
    echo(f"{verb} {sum(1 for r in removals if not r.kept_because)} item(s), {mb(freed)}")
    return 0


def freshness(deadline: str | None, now: dt.datetime, echo=click.echo) -> int:
    """0 if the last week due by ``now`` has its raw commit in the data repository, else 1 (and alert once).
    ``deadline``: the --deadline option, else FLEET_FRESHNESS_DEADLINE, else Monday 12:00 UTC."""
    from fleet.policy import freshness as fresh
    from fleet.publish.datarepo import DataRepo

    s = settings()
    due = fresh.parse_deadline(deadline, "--deadline") if deadline is not None else config.freshness_deadline()
    return fresh.check(DataRepo.from_settings(s), s.home, now, due, start_week=s.start_week,
                       webhook=config.alert_webhook(), echo=echo)


# an attempt's evidence (fleet/engine/evidence.py, outcome.py): what it is in the outcome's ``evidence``, its file
EVIDENCE = (("screenshot", "screenshot.png"), ("html", "page.html"), ("error", "error.txt"), ("stack", "stack.txt"),
            ("trace", "trace.zip"))


def kept_evidence(store, week: str, source: str) -> tuple[str, dict, dict[str, str]] | None:
    """The latest attempt of ``source``'s week whose evidence is still there: (attempt, its outcome, what -> where,
    a path or an s3:// URL, in EVIDENCE's order); None when no attempt's is."""
    from pathlib import Path

    from fleet.storage import store as keys

    attempts = keys.outcomes(store, week, source)
    folder = store.local_dir(week, keys.evidence_key(source))
    for attempt in reversed(attempts):
        out = store.read_json(week, keys.outcome_key(source, attempt)) or {}
        named = out.get("evidence") or {}
        found = {}
        for what, file in EVIDENCE:
            where = named.get(what)
            if not where and what == "error" and attempt == attempts[-1] and not store.url.startswith("s3://"):
                # a local store's outcome does not name its error.txt; the folder is the latest attempt's, as each
                # attempt empties it first (outcome.clear_evidence)
                where = str(folder / file)
            if isinstance(where, str) and (where.startswith("s3://") or Path(where).is_file()):
                found[what] = where
        if found:
            return attempt, out, found
    return None


def evidence_folder(found: dict[str, str]) -> str:
    """The folder (or s3:// prefix) that holds an attempt's evidence files, ending in a slash."""
    return next(iter(found.values())).rsplit("/", 1)[0] + "/"


def debug(source: str, week: str, echo=click.echo) -> int:
    """List ``source``'s latest kept evidence of ``week`` (screenshot, page HTML, error, stacks, Playwright trace),
    each a local file: from a remote store fetched to ``FLEET_HOME/debug/<week>/<source>/`` first. Print the
    command that opens the trace in Playwright's trace viewer (offline: the viewer is in the installed playwright
    package), and open it when a display is there. 0: listed; 1: nothing is kept for that week."""
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    from fleet.storage import store as keys
    from fleet.storage.open import host_store

    store = host_store()
    if not keys.outcomes(store, week, source):
        echo(f"{source}: nothing stored for week {week} (`fleet status --week {week}` lists what ran)")
        return 1
    kept = kept_evidence(store, week, source)
    if kept is None:
        echo(f"{source}: no evidence and no trace kept for week {week}: a screenshot, the page, the error and a "
             f"trace are kept when an attempt fails, is blocked or its rows are held out (FLEET_TRACE=always keeps "
             f"every attempt's trace; FLEET_TRACE=off records none)")
        return 1
    attempt, out, found = kept
    first = (out.get("error") or "").strip().splitlines()
    echo(f"{source} week {week}, attempt {attempt}: {out.get('status')}"
         + (f" ({out.get('category')}): {first[0]}" if first else ""))
    local = {}
    for what, where in found.items():
        local[what] = Path(where)
        if where.startswith("s3://"):
            name = Path(where.rsplit("/", 1)[-1])
            local[what] = settings().home / "debug" / week / source / f"{name.stem}-{attempt}{name.suffix}"
            local[what].parent.mkdir(parents=True, exist_ok=True)
            local[what].write_bytes(store.read_location(where))
        echo(f"  {what:<10} {local[what]}" + (f" (from {where})" if str(local[what]) != where else ""))
    if "trace" not in found:
        echo("no trace kept for that attempt (FLEET_TRACE=off records none)")
        return 0
    viewer = [sys.executable, "-m", "playwright", "show-trace"]
    echo("open the trace in Playwright's trace viewer (offline):")
    echo(f"  {shlex.join([*viewer, str(local['trace'])])}")
    if not config.has_display():
        echo("  no display here (neither DISPLAY nor WAYLAND_DISPLAY is set): add --host 127.0.0.1 --port 9323 and "
             "open the URL it prints in a browser")
        return 0
    # served and opened in the desktop's own browser: the viewer's window needs a Playwright-downloaded Chromium,
    # which fleet never installs (it drives the system's)
    served = [*viewer, "--host", "127.0.0.1", "--port", "0", str(local["trace"])]
    echo(f"opening it (Ctrl-C ends the viewer): {shlex.join(served)}")
    try:
        code = subprocess.run(served).returncode
    except KeyboardInterrupt:
        return 0
    if code:
        echo(f"fleet: the trace viewer ended with exit {code}; the command above opens it")
        return 1
    return 0
