"""Politeness per domain, across every source that reaches a domain: at most N requests in flight at once and at
least T seconds between their starts (which requests, and the browser context's route that holds them:
fleet/scraping/polite_route.py).

Where the bounds are kept:

- on one machine (the default), in lock files under ``FLEET_HOME/politeness`` (``flock``: a lock dies with its
  process, so a killed attempt process never holds a slot);
- once fleet scales out (``FLEET_EXECUTOR=celery``), in the broker's Redis, so they hold across hosts: a slot is
  a member of a sorted set scored by its lease's end, renewed while its request runs, so a killed attempt process's slot
  is free within ``LEASE_S``; the spacing is the time of the last start. Both are judged by Redis's own clock
  (``TIME`` in a script), never by the hosts'. When that Redis cannot be reached (a restart), a request is
  bounded on its own host meanwhile, and says so once, rather than failing the source.

On top of those bounds, per domain: robots.txt (fleet/scraping/robots.py: a disallowed URL is not requested, a
Crawl-delay is the least interval), and a domain that answered 429 gets half its concurrency for the rest of the
week and the next (fleet/scraping/backoff.py), its 429 history kept where the bounds are: this host's files, or the
shared Redis, where a 429 one host saw halves every host's concurrency (while it cannot be reached, this host's
files). Each attempt sums up, per domain, what it asked and was answered (:meth:`Politeness.summary`): in the
source's outcome, its asset's metadata and `fleet status`.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import re
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from fleet.errors import without_credentials
from fleet.scraping.backoff import Backoff, concurrency as backed_off
from fleet.scraping.robots import Robots

POLL_S = 0.02
SHARED_POLL_S = 0.1  # a round trip to Redis per poll: slower than a lock file's
LEASE_S = 30.0
# A declaration a scraper made binds the other sources of the domain for this long (about one run of a week).
DECLARATION_TTL_S = 24 * 3600
log = logging.getLogger("fleet.politeness")

# KEYS[1]: the domain's slots (token -> lease end). ARGV: token, N, lease. 1 when the token holds a slot (taken or
# renewed), else 0.
ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('EXPIRE', KEYS[1], 86400)
  return 1
end
return 0
"""
# KEYS[1]: the domain's last start. ARGV: T. Claims now and returns "0" when T has passed since the last start,
# else the seconds left, as a string (a Lua number would come back as an integer).
SPACE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local wait = tonumber(redis.call('GET', KEYS[1]) or '0') + tonumber(ARGV[1]) - now
if wait <= 0 then
  redis.call('SET', KEYS[1], string.format('%.6f', now), 'EX', 86400)
  return '0'
end
return string.format('%.6f', wait)
"""


async def _nothing() -> None:
    pass


def _safe(host: str) -> str:
    """``host`` as a file name or key part: lower case, anything but letters, digits, dots and dashes as ``_``."""
    return re.sub(r"[^a-z0-9.-]", "_", host.lower())


def _host_file(root: Path, host: str, suffix: str) -> Path:
    return root / (_safe(host) + suffix)


def _host_key(host: str) -> str:
    return "fleet:politeness:" + _safe(host)


def try_slot(root: Path, host: str, n: int):
    """One of the ``n`` slot files of ``host`` under ``root``, open and flocked without waiting (closing it frees
    the slot; so does its process's death), or None when all ``n`` are held. fleet's scrape slots
    (fleet/engine/slot.py) are this mechanism too."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        fh = open(_host_file(root, host, f".slot{i}"), "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fh
        except BlockingIOError:
            fh.close()
    return None


def _strictest(n: int, t: float, records, own: tuple[int | None, float | None]) -> tuple[int, float]:
    now = time.time()
    for rec in records:
        if isinstance(rec, dict) and now - rec.get("at", 0) < DECLARATION_TTL_S:
            n = min(n, rec.get("concurrency") or n)
            t = max(t, rec.get("interval_s") or t)
    own_n, own_t = own
    return min(n, own_n or n), max(t, own_t or 0.0)


class Politeness:
    """One attempt's view: fleet's defaults (FLEET_DOMAIN_CONCURRENCY, FLEET_DOMAIN_INTERVAL_S), made stricter by
    the scraper's own ``polite_concurrency`` / ``polite_interval_s`` and by those other sources declared for the
    same domain. ``shared``: the Redis URL that holds the bounds for every host, or "" for this host's files."""

    def __init__(self, root: Path | str, concurrency: int, interval_s: float, source: str = "", shared: str = "",
                 week: str = "", obey_robots: bool = True, robots_reason: str = ""):
        self.root = Path(root)
        self.robots = Robots(self.root / "robots", week) if week and obey_robots else None
        self.robots_note = "obeyed" if self.robots else f"not obeyed: {robots_reason or 'no week'}"
        self.backoff = Backoff(self.root / "backoff", week, key=lambda host: _host_key(host) + ":backoff")
        self.floor: dict[str, float] = {}  # per host: robots.txt's least interval
        self.stats: dict[str, dict] = {}
        self.concurrency, self.interval_s = int(concurrency), float(interval_s)
        self.own: tuple[int | None, float | None] = (None, None)
        self.source = source
        self.shared = shared
        self._recorded: set[str] = set()  # hosts this attempt has written its declaration for
        self._redis = None
        self._said_down = False
        self.route = None  # the browser context's route that holds these bounds (polite_route.py), once installed

    def declare(self, concurrency: int | None, interval_s: float | None) -> None:
        self.own = (concurrency, interval_s)

    def _stats(self, host: str) -> dict:
        return self.stats.setdefault(host, {"requests": 0, "http_429": 0, "retry_after_waits": 0, "retry_after_s": 0.0,
                                            "concurrency": None, "interval_s": None, "robots": self.robots_note})

    async def allowed(self, url: str) -> None:
        """Raise ``BlockedError`` when robots.txt disallows ``url`` (unless the scraper does not obey it); keep its
        Crawl-delay as the domain's least interval."""
        host = urlsplit(url).hostname
        if host and self.robots is not None:
            self._stats(host)
            delay = await self.robots.check(url, self.source)
            self.floor[host] = max(self.floor.get(host, 0.0), delay)
            if delay:
                self.stats[host]["crawl_delay_s"] = self.floor[host]

    async def note(self, url: str, status: int, retry_after: float | None) -> None:
        """A response's status: a 429 halves the domain's concurrency (fleet/scraping/backoff.py)."""
        host = urlsplit(url).hostname
        if not host:
            return
        st = self._stats(host)
        if status == 429:
            st["http_429"] += 1
        if status in (429, 503) and retry_after is not None:
            st["retry_after_waits"] += 1
            st["retry_after_s"] = round(st["retry_after_s"] + retry_after, 3)
        await self._history(self.backoff.mark, host, status == 429)

    async def backoff_level(self, host: str) -> int:
        """The domain's 429 backoff level this week, from where its history is kept (see :meth:`note`)."""
        return await self._history(self.backoff.level, host)

    async def _history(self, op, host: str, *args):
        """``op`` (``Backoff.mark`` or ``.level``) on the shared Redis when the bounds are shared, else, or while it
        cannot be reached, on this host's files."""
        if self.shared:
            from redis.exceptions import RedisError

            try:
                return await op(host, *args, self._client())
            except (RedisError, OSError) as exc:
                self._say_down(exc)
        return await op(host, *args)

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    def summary(self) -> dict:
        """Per domain this attempt reached: requests, 429s, Retry-After waits, the bounds used, robots.txt."""
        return {h: dict(st) for h, st in self.stats.items()}

    async def _bounds(self, host: str, n: int, t: float, redis=None) -> tuple[int, float]:
        """``n`` and ``t`` with the domain's 429 backoff (from ``redis`` when given) and robots.txt's Crawl-delay."""
        level = await self.backoff.level(host, redis)
        n, t = backed_off(n, level), max(t, self.floor.get(host, 0.0))
        st = self._stats(host)
        st["concurrency"] = n if st["concurrency"] is None else min(st["concurrency"], n)
        st["interval_s"] = t
        if level:
            st["backoff_level"] = level
        return n, t

    @contextlib.asynccontextmanager
    async def request(self, url: str):
        """Hold a slot of ``url``'s domain, spaced from the last request to it, for the ``async with`` block."""
        release = await self.hold(url)
        try:
            yield
        finally:
            await release()

    async def hold(self, url: str):
        """Take a slot of ``url``'s domain, spaced from the last request to it, and count the request; returns the
        coroutine function that frees the slot (a request routed in the browser ends in another callback than the
        one that took its slot: fleet/scraping/polite_route.py)."""
        host = urlsplit(url).hostname
        if not host:  # about:blank, data: URLs: no site to be polite to
            return _nothing
        release = None
        self._stats(host)["requests"] += 1
        if self.shared:
            from redis.exceptions import RedisError

            try:
                release = await self._acquire_shared(host)
            except (RedisError, OSError) as exc:
                self._say_down(exc)
        if release is None:
            release = await self._acquire_local(host)
        return release

    def _say_down(self, exc: BaseException) -> None:
        if not self._said_down:
            self._said_down = True
            log.warning("[%s] politeness: the shared bounds at %s cannot be reached (%s: %s); bounding this "
                        "host's requests alone until it is back", self.source, without_credentials(self.shared),
                        type(exc).__name__, exc)

    # -- this host's files --------------------------------------------------------------------------------------

    def limits(self, host: str) -> tuple[int, float]:
        try:
            records = json.loads(_host_file(self.root, host, ".declared.json").read_text())
        except (OSError, ValueError):
            records = {}
        return _strictest(self.concurrency, self.interval_s, records.values() if isinstance(records, dict) else (),
                          self.own)

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
            records[self.source] = self._declaration()
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(records))
            os.replace(tmp, path)

    def _declaration(self) -> dict:
        return {"concurrency": self.own[0], "interval_s": self.own[1], "at": time.time()}

    @contextlib.contextmanager
    def _locked(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield fh
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    async def _acquire_local(self, host: str):
        self._record(host)
        n, t = await self._bounds(host, *self.limits(host))
        slot = await self._slot(host, n)
        try:
            await self._spaced(host, t)
        except BaseException:
            slot.close()
            raise

        async def release():
            slot.close()
        return release

    async def _slot(self, host: str, n: int):
        """An open, flocked slot file: one of the ``n`` of ``host`` (the caller closes it to free the slot)."""
        while (fh := try_slot(self.root, host, n)) is None:
            await asyncio.sleep(POLL_S)
        return fh

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

    # -- every host's Redis -------------------------------------------------------------------------------------

    def _client(self):
        if self._redis is None:
            import redis.asyncio

            self._redis = redis.asyncio.Redis.from_url(self.shared, socket_connect_timeout=3, socket_timeout=5)
            self._scripts = (self._redis.register_script(ACQUIRE), self._redis.register_script(SPACE))
        return self._redis

    async def _acquire_shared(self, host: str):
        r, key = self._client(), _host_key(host)
        acquire, space = self._scripts
        if self.own != (None, None) and host not in self._recorded:
            await r.hset(f"{key}:declared", self.source, json.dumps(self._declaration()))
            await r.expire(f"{key}:declared", int(DECLARATION_TTL_S))
            self._recorded.add(host)
        declared = await r.hgetall(f"{key}:declared")
        records = []
        for raw in declared.values():
            with contextlib.suppress(ValueError):
                records.append(json.loads(raw))
        n, t = await self._bounds(host, *_strictest(self.concurrency, self.interval_s, records, self.own), r)
        token, slots = uuid.uuid4().hex, f"{key}:slots"
        while not await acquire(keys=[slots], args=[token, n, LEASE_S]):
            await asyncio.sleep(SHARED_POLL_S)

        async def renew():
            while True:
                await asyncio.sleep(LEASE_S / 3)
                with contextlib.suppress(Exception):
                    await acquire(keys=[slots], args=[token, n, LEASE_S])

        renewing = asyncio.ensure_future(renew())

        async def release():
            renewing.cancel()
            with contextlib.suppress(Exception):
                await r.zrem(slots, token)
        try:
            if t > 0:
                while (wait := float(await space(keys=[f"{key}:last"], args=[t]))) > 0:
                    await asyncio.sleep(min(wait, 1.0))
        except BaseException:
            await release()
            raise
        return release

