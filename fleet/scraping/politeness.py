"""Politeness per domain, across every source that reaches a domain from this host: at most N navigations
(``ctx.goto``) in flight at once and at least T seconds between their starts. Shared through lock files under
``FLEET_HOME/politeness`` (``flock``: a lock dies with its process, so a killed worker never holds a slot)."""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

POLL_S = 0.02
# A declaration a scraper made binds the other sources of the domain for this long (about one run of a week).
DECLARATION_TTL_S = 24 * 3600


def _host_file(root: Path, host: str, suffix: str) -> Path:
    return root / (re.sub(r"[^a-z0-9.-]", "_", host.lower()) + suffix)


class Politeness:
    """One attempt's view: fleet's defaults (FLEET_DOMAIN_CONCURRENCY, FLEET_DOMAIN_INTERVAL_S), made stricter by
    the scraper's own ``polite_concurrency`` / ``polite_interval_s`` and by those other sources declared for the
    same domain."""

    def __init__(self, root: Path | str, concurrency: int, interval_s: float, source: str = ""):
        self.root = Path(root)
        self.concurrency, self.interval_s = int(concurrency), float(interval_s)
        self.own: tuple[int | None, float | None] = (None, None)
        self.source = source
        self._recorded: set[str] = set()  # hosts this attempt has written its declaration for

    def declare(self, concurrency: int | None, interval_s: float | None) -> None:
        self.own = (concurrency, interval_s)

    def limits(self, host: str) -> tuple[int, float]:
        n, t = self.concurrency, self.interval_s
        declared = _host_file(self.root, host, ".declared.json")
        try:
            records = json.loads(declared.read_text())
        except (OSError, ValueError):
            records = {}
        now = time.time()
        for rec in records.values() if isinstance(records, dict) else ():
            if now - rec.get("at", 0) < DECLARATION_TTL_S:
                n = min(n, rec.get("concurrency") or n)
                t = max(t, rec.get("interval_s") or t)
        own_n, own_t = self.own
        return min(n, own_n or n), max(t, own_t or 0.0)

    def _record(self, host: str) -> None:
        """Write this scraper's declaration for ``host`` where the other sources' attempts read it."""
        if self.own == (None, None) or host in self._recorded:
            return
        self._recorded.add(host)
        with self._locked(_host_file(self.root, host, ".declared.lock")):
            path = _host_file(self.root, host, ".declared.json")
            try:
                records = json.loads(path.read_text())
            except (OSError, ValueError):
                records = {}
            records[self.source] = {"concurrency": self.own[0], "interval_s": self.own[1], "at": time.time()}
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(records))
            os.replace(tmp, path)

    @contextlib.contextmanager
    def _locked(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield fh
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    async def _slot(self, host: str, n: int):
        """An open, flocked slot file: one of the ``n`` of ``host`` (the caller closes it to free the slot)."""
        self.root.mkdir(parents=True, exist_ok=True)
        while True:
            for i in range(n):
                fh = open(_host_file(self.root, host, f".slot{i}"), "a+")
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fh
                except BlockingIOError:
                    fh.close()
            await asyncio.sleep(POLL_S)

    async def _spaced(self, host: str, interval_s: float) -> None:
        """Wait until ``interval_s`` has passed since the last request to ``host`` started, and claim now."""
        if interval_s <= 0:
            return
        path = _host_file(self.root, host, ".last")
        while True:
            with self._locked(path) as fh:
                fh.seek(0)
                try:
                    last = float(fh.read().strip() or 0)
                except ValueError:
                    last = 0.0
                wait = last + interval_s - time.time()
                if wait <= 0:
                    fh.seek(0)
                    fh.truncate()
                    fh.write(repr(time.time()))
                    fh.flush()
                    return
            await asyncio.sleep(min(wait, 1.0))

    @contextlib.asynccontextmanager
    async def request(self, url: str):
        """Hold a slot of ``url``'s domain, spaced from the last request to it, for the ``async with`` block."""
        host = urlsplit(url).hostname
        if not host:  # about:blank, data: URLs: no site to be polite to
            yield
            return
        self._record(host)
        n, t = self.limits(host)
        slot = await self._slot(host, n)
        try:
            await self._spaced(host, t)
            yield
        finally:
            slot.close()
