"""The periodic upkeep commands: `fleet gc` (the store's retention) and `fleet freshness` (the dead-man's switch on
the data repository). Each prints its lines and returns the exit code."""
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
