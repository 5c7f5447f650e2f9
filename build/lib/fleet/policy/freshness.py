"""The dead-man's switch: has the last due week's raw commit landed in the data repository (not the Dagster
instance) by its deadline? Meant to run outside fleet's daemon (cron elsewhere, CI on the data repository)."""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from fleet.errors import FleetError

# GitPython and the data repository are imported where they are used. The deadline and its parser live with the
# clock (fleet/weeks.py), where config.py checks the setting before anything runs.
from fleet.weeks import Deadline, parse_deadline  # noqa: F401  (its callers find them here too)


def due_week(now: dt.datetime, deadline: Deadline) -> dt.date:
    """The newest week whose deadline has passed at ``now``."""
    week = now.date() - dt.timedelta(days=now.weekday() + 7)
    while deadline.of(week) > now:
        week -= dt.timedelta(days=7)
    return week


def committed_weeks(repo, cache: Path) -> list[str]:
    """The weeks with a raw commit on the remote branch (``<prefix><week>/raw/<source>.parquet``, or an older fleet's
    ``<prefix><week>/raw.parquet``), from a shallow fetch of
    its tip into ``cache``: trees only, no LFS object is read. A remote git cannot read is a FleetError."""
    import git

    from fleet.publish.remote import failure

    remote = repo.parsed()
    cache.mkdir(parents=True, exist_ok=True)
    runner = remote.command(cache)
    try:
        if not (cache / "HEAD").exists():
            runner.init("-q", "--bare", str(cache))
        out = runner.ls_remote(remote.url, f"refs/heads/{repo.branch}")
        if not out:
            return []
        runner.fetch("-q", "--depth=1", "--no-tags", remote.url, f"+refs/heads/{repo.branch}:refs/fleet/freshness")
        names = runner.ls_tree("-r", "--name-only", "refs/fleet/freshness", "--", repo.prefix)
    except git.CommandError as exc:
        raise FleetError(f"cannot read the data repository {repo.redactor()(remote.url)} branch {repo.branch}: "
                         f"{repo.redactor()(failure(exc))}") from None
    # a source's raw file (fleet/transform/layout.py), or an older fleet's one-file week
    pattern = re.compile(re.escape(repo.prefix) + r"(\d{4}-\d{2}-\d{2})/raw(?:/[^/]+)?\.parquet$")
    return sorted({m.group(1) for m in map(pattern.match, names.splitlines()) if m})


def check(repo, home: Path, now: dt.datetime, deadline: Deadline, *, start_week: str,
          webhook: str | None, echo) -> int:
    """0 when the due week's raw commit is in the data repository (or no week is due yet), else 1 with one alert
    per missed week (the alert ledger under ``home`` remembers the weeks already alerted)."""
    from fleet.quality import alerts as alerting

    week = due_week(now, deadline)
    if week.isoformat() < start_week:
        echo(f"fresh: no week is due yet (the first week, {start_week}, is due {deadline.of(dt.date.fromisoformat(start_week)):%Y-%m-%d %H:%M} UTC)")
        return 0
    due = deadline.of(week)
    try:
        weeks = committed_weeks(repo, home / "freshness" / "remote.git")
        problem = None if week.isoformat() in weeks else (
            f"no raw commit for week {week} in the data repository by its deadline {due:%Y-%m-%d %H:%M} UTC; "
            + (f"the last week committed is {weeks[-1]}" if weeks else "no week is committed"))
    except FleetError as exc:
        weeks, problem = [], f"week {week} is due by {due:%Y-%m-%d %H:%M} UTC, but {exc}"
    if problem is None:
        echo(f"fresh: week {week}'s raw commit is in the data repository (due {due:%Y-%m-%d %H:%M} UTC)")
        return 0
    alert = alerting.Alert(source=None, week=week.isoformat(), check="freshness", severity="ERROR", category=None,
                           message=problem, evidence={}, last_good_week=weeks[-1] if weeks else None)
    sent = alerting.deliver([alert], home, webhook=webhook or "")
    echo(f"STALE: {problem}" + ("" if sent else " (already alerted)"))
    return 1
