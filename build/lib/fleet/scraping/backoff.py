"""A domain that answers HTTP 429 gets half its concurrency for the rest of the week and the next; each clean week
after that (requests, no 429) gives back one step, until it is whole again.

Kept per domain: which weeks saw requests, and which a 429. On one machine, in
``FLEET_HOME/politeness/backoff/<host>.json``; once fleet scales out, in the broker's Redis with the other politeness
bounds (a hash ``fleet:politeness:<host>:backoff``, week -> "1" for a 429 else "0", kept ``KEEP_S``), so every
host's 429s halve every host's concurrency. Which one, its client and what happens when that Redis cannot be
reached are fleet/scraping/politeness.py's: a ``redis`` client passed here means the shared history. The
level a week starts with follows from the weeks before it alone (a backfill of an old week does not move today's),
and the week's own 429 adds one step from that moment on: concurrency ``max(1, N >> level)``.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Callable

MAX_LEVEL = 6
# The shared history of a domain no host has reached for this long is dropped (its level would be 0 by then unless
# it was at MAX_LEVEL with no clean week since).
KEEP_S = 26 * 7 * 24 * 3600


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
    """An attempt's view of the domains' 429 history (``root``: FLEET_HOME/politeness/backoff), for ``week``.
    ``redis`` (an asyncio client, fleet/scraping/politeness.py's) reads and writes the shared history instead, under
    ``key(host)``; its errors are the caller's to fall back from."""

    def __init__(self, root: Path | str, week: str, key: Callable[[str], str] | None = None):
        self.root, self.week, self._key = Path(root), str(week), key
        self._marked: set[tuple[str, bool, bool]] = set()  # (host, a 429, shared) this attempt has written already

    def _path(self, host: str) -> Path:
        return self.root / (host.lower().replace("/", "_").replace(":", "_") + ".json")

    async def weeks(self, host: str, redis=None) -> dict:
        if redis is not None:
            raw = await redis.hgetall(self._key(host))
            return {_text(w): {"429": _text(v) == "1"} for w, v in raw.items()}
        return self._read(host)

    def _read(self, host: str) -> dict:
        try:
            data = json.loads(self._path(host).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    async def level(self, host: str, redis=None) -> int:
        return level(await self.weeks(host, redis), self.week) if self.week else 0

    async def mark(self, host: str, got_429: bool, redis=None) -> None:
        """Record that ``host`` saw requests this week (and a 429), once per attempt and kind."""
        if not self.week or (host, got_429, redis is not None) in self._marked:
            return
        if redis is not None:
            key = self._key(host)
            async with redis.pipeline(transaction=True) as pipe:
                # a 429 is never undone: "1" overwrites, "0" only fills a week not yet recorded
                (pipe.hset if got_429 else pipe.hsetnx)(key, self.week, "1" if got_429 else "0")
                pipe.expire(key, KEEP_S)
                await pipe.execute()
            self._marked.add((host, got_429, True))
            return
        self._marked.add((host, got_429, False))
        path = self._path(host)
        with contextlib.suppress(OSError):  # a folder this user may not write: the page is not failed for it
            self.root.mkdir(parents=True, exist_ok=True)
            with open(path.with_suffix(".lock"), "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                weeks = self._read(host)
                rec = weeks.setdefault(self.week, {"429": False})
                rec["429"] = bool(rec.get("429")) or got_429
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(weeks))
                os.replace(tmp, path)


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
