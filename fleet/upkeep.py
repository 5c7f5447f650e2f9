"""The periodic upkeep commands: `fleet gc` (the store's retention) and `fleet freshness` (the dead-man's switch on
the data repository), and `fleet debug` (a failed source's trace). Each prints its lines and returns the exit code."""
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


def debug(source: str, week: str, echo=click.echo) -> int:
    """Print the command that opens ``source``'s latest kept Playwright trace of ``week`` in Playwright's trace
    viewer, offline (the viewer is in the installed playwright package). A trace in a remote store is fetched to
    ``FLEET_HOME/debug/<week>/<source>/`` first. 0: printed; 1: no trace is kept for that week."""
    import shlex
    import sys
    from pathlib import Path

    from fleet.storage import store as keys
    from fleet.storage.open import host_store

    store = host_store()
    attempts = keys.outcomes(store, week, source)
    if not attempts:
        echo(f"{source}: nothing stored for week {week} (`fleet status --week {week}` lists what ran)")
        return 1
    for attempt in reversed(attempts):
        out = store.read_json(week, keys.outcome_key(source, attempt)) or {}
        where = (out.get("evidence") or {}).get("trace")
        if where and (where.startswith("s3://") or Path(where).is_file()):
            break
    else:
        echo(f"{source}: no trace kept for week {week}: a trace is kept when an attempt fails, is blocked or its rows "
             f"are held out (FLEET_TRACE=always keeps every attempt's; FLEET_TRACE=off records none)")
        return 1
    local = Path(where)
    if where.startswith("s3://"):
        local = settings().home / "debug" / week / source / f"trace-{attempt}.zip"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(store.read_location(where))
    first = (out.get("error") or "").strip().splitlines()
    echo(f"{source} week {week}, attempt {attempt}: {out.get('status')}"
         + (f" ({out.get('category')}): {first[0]}" if first else ""))
    echo(f"trace: {local}" + (f" (from {where})" if local != Path(where) else ""))
    echo("open it in Playwright's trace viewer (offline):")
    echo(f"  {shlex.join([sys.executable, '-m', 'playwright', 'show-trace', str(local)])}")
    echo("  on a machine without a display, add --host 127.0.0.1 --port 9323 and open the URL it prints")
    return 0
