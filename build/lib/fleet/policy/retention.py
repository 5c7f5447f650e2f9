"""Retention (``fleet gc``): evidence, work folders and spooled rows of weeks older than the newest N are removed
from the artifact store; a week's work (its spooled rows) only once its raw commit has landed. The data
repository is never touched."""
from __future__ import annotations

import dataclasses
import datetime as dt
import re

from fleet.errors import FleetError
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore

LANDED = ("committed", "up_to_date")
FOLDERS = ("evidence", "work")  # evidence/<source>, work/<source>: spools, checkpoints, seen URLs, attempt files
_WEEK = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclasses.dataclass
class Removal:
    week: str
    key: str
    bytes: int
    kept_because: str | None = None  # set when the key is kept


def committed(store: ArtifactStore, week: str) -> bool:
    rec = store.read_json(week, keys.commit_key("raw")) or {}
    return rec.get("status") in LANDED or bool(rec.get("last_landed"))


def plan(store: ArtifactStore, keep_weeks: int, last_week: dt.date) -> list[Removal]:
    """What ``fleet gc --keep-weeks keep_weeks`` removes (and keeps, with why), for weeks up to ``last_week``."""
    if isinstance(keep_weeks, bool) or not isinstance(keep_weeks, int) or keep_weeks < 0:
        raise FleetError(f"--keep-weeks must be a whole number of weeks, 0 or more, got {keep_weeks!r}")
    oldest_kept = (last_week - dt.timedelta(weeks=keep_weeks - 1)).isoformat() if keep_weeks else None
    out = []
    for week in store.weeks():
        if not _WEEK.match(week) or (oldest_kept is not None and week >= oldest_kept) or week > last_week.isoformat():
            continue
        landed = committed(store, week)
        for folder in FOLDERS:
            for key in store.list(week, folder):
                why = None if landed or folder == "evidence" else "its raw commit has not landed"
                out.append(Removal(week, key, store.size(week, key), why))
    return out


def collect(store: ArtifactStore, removals: list[Removal]) -> int:
    return sum(store.remove(r.week, r.key) for r in removals if r.kept_because is None)
