"""A domain that answers HTTP 429 gets half its concurrency for the rest of the week and the next; each clean week
after that (requests, no 429) gives back one step, until it is whole again.

Kept per domain in ``FLEET_HOME/politeness/backoff/<host>.json``: which weeks saw requests, and which a 429. The
level a week starts with follows from the weeks before it alone (a backfill of an old week does not move today's),
and the week's own 429 adds one step from that moment on: concurrency ``max(1, N >> level)``.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

MAX_LEVEL = 6


def start_level(weeks: dict, week: str) -> int:
    """The level ``week`` starts at, from the recorded weeks before it (``{week: {"429": bool}}``)."""
    level = 0
    for w in sorted(k for k in weeks if k < week):
        level = min(MAX_LEVEL, level + 1) if weeks[w].get("429") else max(0, level - 1)
    return level


def level(weeks: dict, week: str) -> int:
    """The level in force during ``week``: its start, and one step more once it has seen a 429."""
    return min(MAX_LEVEL, start_level(weeks, week) + (1 if (weeks.get(week) or {}).get("429") else 0))


def concurrency(n: int, lvl: int) -> int:
    return max(1, int(n) >> lvl)


class Backoff:
    """An attempt's view of the domains' 429 history (``root``: FLEET_HOME/politeness/backoff), for ``week``."""

    def __init__(self, root: Path | str, week: str):
        self.root, self.week = Path(root), str(week)
        self._marked: set[tuple[str, bool]] = set()  # (host, a 429) this attempt has written already

    def _path(self, host: str) -> Path:
        return self.root / (host.lower().replace("/", "_").replace(":", "_") + ".json")

    def weeks(self, host: str) -> dict:
        try:
            data = json.loads(self._path(host).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def level(self, host: str) -> int:
        return level(self.weeks(host), self.week) if self.week else 0

    def mark(self, host: str, got_429: bool) -> None:
        """Record that ``host`` saw requests this week (and a 429), once per attempt and kind."""
        if not self.week or (host, got_429) in self._marked:
            return
        self._marked.add((host, got_429))
        path = self._path(host)
        with contextlib.suppress(OSError):  # a folder this user may not write: the page is not failed for it
            self.root.mkdir(parents=True, exist_ok=True)
            with open(path.with_suffix(".lock"), "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                weeks = self.weeks(host)
                rec = weeks.setdefault(self.week, {"429": False})
                rec["429"] = bool(rec.get("429")) or got_429
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(weeks))
                os.replace(tmp, path)
