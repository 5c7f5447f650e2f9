"""fleet's scrape slots: the cap on sources scraping at once (FLEET_MAX_PARALLEL), across runs, held by a source's step
around its scrape only: from just before its browser host lease (or attempt process) until its outcome is stored.

Dagster's scrapers pool and the multiprocess executor admit more steps than the cap (fleet/defs/instance.py
``pool_limit``), so the next steps' launch and start-up, and the finished steps' event drain, overlap the other
sources' scraping instead of holding a slot of the cap. The slots are politeness's per-domain slots
(fleet/scraping/politeness.py) on a name no domain has:

- on one machine, ``cap`` lock files under ``FLEET_HOME/slots`` (``flock``: the kernel frees a slot whose step
  process died, SIGKILL included);
- once fleet scales out (FLEET_EXECUTOR=celery), the broker's Redis: a slot is a member of a sorted set scored by
  its lease's end, renewed every ``LEASE_S / 3`` by the holding step, so a dead step's slot is free within
  ``LEASE_S``. Without that Redis the cap cannot hold across hosts: a step waits for it, saying so once, and after
  ``DOWN_S`` fails as infra (re-executed within the crash budget).

A step waiting for a slot says so in its log (who is scraping, how many wait), and `fleet status` lists the sources
scraping and waiting now (:func:`now`). The source's hard limit starts only once it has its slot and its browser.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from fleet.errors import FleetError, without_credentials
from fleet.scraping.politeness import ACQUIRE, LEASE_S, _host_file, _host_key, try_slot

NAME = "fleet scrape"  # a space: no domain's name
POLL_S = 0.05
SHARED_POLL_S = 0.1
DOWN_S = 120.0  # the longest a step waits for an unreachable shared Redis before it fails as infra


class SlotError(FleetError):
    """The shared slots cannot be reached (infra)."""


def _who(source: str, run_id: str) -> dict:
    return {"source": source, "run": run_id, "host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}


def _names(recs: list[dict]) -> str:
    return ", ".join(sorted(str(r.get("source", "?")) for r in recs)) or "-"


@contextlib.contextmanager
def scrape_slot(cap: int, root: Path, shared: str, source: str, run_id: str, say=None):
    """Hold one of the ``cap`` scrape slots for the ``with`` block; yields the seconds waited for it. ``root``: this
    host's slot files; ``shared``: the Redis URL that holds them for every host, or "". ``say``: where the wait is
    logged (once, when it begins)."""
    say = say or (lambda line: None)
    who = _who(source, run_id)
    started = time.monotonic()
    if shared:
        with _shared(cap, shared, who, say, lambda r: _all_taken(cap, *_shared_state(r))):
            yield round(time.monotonic() - started, 3)
        return
    root = Path(root)
    fh = try_slot(root, NAME, cap)
    if fh is None:
        with _waiting(root, who):
            scraping, waiting = _local_state(root)
            say(f"waiting for a scrape slot: all {cap} are scraping ({_names(scraping)}); "
                f"{max(len(waiting) - 1, 0)} other source(s) waiting (FLEET_MAX_PARALLEL={cap})")
            while (fh := try_slot(root, NAME, cap)) is None:
                time.sleep(POLL_S)
    try:
        fh.seek(0)
        fh.truncate(0)
        fh.write(json.dumps(who))
        fh.flush()
        yield round(time.monotonic() - started, 3)
    finally:
        fh.close()


@contextlib.contextmanager
def source_lease(root: Path, shared: str, week: str, source: str, run_id: str, say=None):
    """One execution of ``source``'s ``week`` at a time, on every host: held by a step from its look for the week's
    stored rows to its stored outcome (fleet/engine/runner.py). Dagster and Celery can execute a step twice at once:
    a Celery message redelivered after a broker restart, a rerun of a step whose worker was taken for gone but still
    scrapes. The second waits here, saying for whom, and then finds the first one's rows stored and reuses them:
    the source is scraped once. A lock file under ``root/sources`` on one machine (the kernel frees it when its
    process dies), else a lease in the Redis at ``shared``, renewed while held and free within ``LEASE_S`` of its
    holder's death."""
    say = say or (lambda line: None)
    who, name = _who(source, run_id), f"fleet source {week} {source}"

    def line(holders: list[dict]) -> str:
        h = holders[0] if holders else {}
        return (f"another execution of {source} for week {week} is under way (run {h.get('run', '?')}, host "
                f"{h.get('host', '?')}, pid {h.get('pid', '?')}): waiting for it to end, then using what it stored")

    if shared:
        with _shared(1, shared, who, say, lambda r: line(_shared_state(r, name)[0]), name=name,
                     holds="one execution of a source's week at a time"):
            yield
        return
    path = _host_file(Path(root) / "sources", name, ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    said = False
    while True:
        fh = open(path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            if not said:
                said = True
                say(line([h for h in [_held(path)] if h]))
            time.sleep(POLL_S)
            continue
        try:  # the file its holder removed as it let go is no lock: take the one at the path now
            if os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        fh.close()
    try:
        fh.truncate(0)
        fh.write(json.dumps(who))
        fh.flush()
        yield
    finally:
        path.unlink(missing_ok=True)  # before the lock goes: a week's lease leaves no file behind
        fh.close()


@contextlib.contextmanager
def _waiting(root: Path, who: dict):
    """A flocked ``*.wait`` file under ``root/waiting`` while this step waits: what `fleet status` counts. It is
    locked and written under a name status does not read, then renamed into place, so status never sees it unlocked
    (which it takes for a step that died waiting, and removes)."""
    name = f"{who['pid']}.{uuid.uuid4().hex[:8]}"
    path, draft = root / "waiting" / f"{name}.wait", root / "waiting" / f".{name}.draft"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(draft, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(json.dumps(who))
        fh.flush()
        os.replace(draft, path)
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


def _held(path: Path) -> dict | None:
    """The holder of a lock file (what it wrote), or None when no live process holds it."""
    try:
        fh = open(path, "r")
    except OSError:
        return None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return json.loads(fh.read() or "{}")
            except ValueError:
                return {}
        fcntl.flock(fh, fcntl.LOCK_UN)
        return None


def _local_state(root: Path) -> tuple[list[dict], list[dict]]:
    slots = sorted(root.glob(_host_file(root, NAME, ".slot").name + "*"))
    scraping = [h for h in map(_held, slots) if h is not None]
    waiting = []
    for path in sorted((root / "waiting").glob("*.wait")) if (root / "waiting").is_dir() else ():
        h = _held(path)
        if h is None:  # its step died waiting
            path.unlink(missing_ok=True)
        else:
            waiting.append(h)
    return scraping, waiting


# -- every host's Redis ---------------------------------------------------------------------------------------------

def _client(shared: str):
    import redis

    return redis.Redis.from_url(shared, socket_connect_timeout=3, socket_timeout=5)


def _keys(name: str = NAME) -> tuple[str, str, str]:
    key = _host_key(name)
    return f"{key}:slots", f"{key}:who", f"{key}:waiting"


def _all_taken(cap: int, scraping: list[dict], queued: list[dict]) -> str:
    return (f"waiting for a scrape slot: all {cap} are scraping ({_names(scraping)}); "
            f"{max(len(queued) - 1, 0)} other source(s) waiting, on every host (FLEET_MAX_PARALLEL={cap})")


@contextlib.contextmanager
def _shared(cap: int, shared: str, who: dict, say, wait_line, name: str = NAME,
            holds: str = "the cap on sources scraping at once"):
    """Hold one of the ``cap`` leases of ``name`` in Redis at ``shared`` for the ``with`` block, renewed while
    it runs; ``say(wait_line(client))``, once, when the block has to wait for one."""
    from redis.exceptions import RedisError

    r, (slots, names, waiting) = _client(shared), _keys(name)
    acquire = r.register_script(ACQUIRE)
    token, said, said_down, down_since, listed = uuid.uuid4().hex, False, False, None, 0.0
    try:
        while True:
            try:
                if acquire(keys=[slots], args=[token, cap, LEASE_S]):
                    r.hset(names, token, json.dumps(who))
                    r.zrem(waiting, token)
                    break
                down_since = None
                if time.monotonic() - listed > LEASE_S / 3:  # seen waiting by `fleet status` while the lease runs
                    listed = time.monotonic()
                    r.zadd(waiting, {token: _redis_now(r) + LEASE_S})
                    r.hset(names, token, json.dumps(who))
                    r.expire(names, 86400)
                    r.expire(waiting, 86400)
                if not said:
                    said = True
                    say(wait_line(r))
            except (RedisError, OSError) as exc:
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since > DOWN_S:
                    raise SlotError(f"fleet's scrape slots at {without_credentials(shared)} could not be reached for "
                                    f"{DOWN_S:g}s ({type(exc).__name__}: {exc}); {holds} cannot hold across hosts "
                                    "without them") from None
                if not said_down:
                    said_down = True
                    say(f"fleet's scrape slots at {without_credentials(shared)} cannot be reached "
                        f"({type(exc).__name__}: {exc}); waiting for them")
            time.sleep(SHARED_POLL_S)
    except BaseException:
        with contextlib.suppress(Exception):
            r.zrem(waiting, token)
            r.hdel(names, token)
        raise
    stop = threading.Event()

    def renew():
        while not stop.wait(LEASE_S / 3):
            with contextlib.suppress(Exception):
                acquire(keys=[slots], args=[token, cap, LEASE_S])

    renewing = threading.Thread(target=renew, daemon=True, name="fleet-scrape-slot")
    renewing.start()
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            r.zrem(slots, token)
            r.hdel(names, token)
        renewing.join(timeout=1)


def _redis_now(r) -> float:
    sec, usec = r.time()
    return sec + usec / 1e6


def _shared_state(r, name: str = NAME) -> tuple[list[dict], list[dict]]:
    slots, names, waiting = _keys(name)
    now = _redis_now(r)
    live = [t.decode() if isinstance(t, bytes) else t for t in r.zrangebyscore(slots, now, "+inf")]
    queued = [t.decode() if isinstance(t, bytes) else t for t in r.zrangebyscore(waiting, now, "+inf")]
    found = dict(zip(live + queued, r.hmget(names, live + queued))) if live or queued else {}

    def rec(t):
        try:
            return json.loads(found.get(t) or "{}")
        except ValueError:
            return {}
    return [rec(t) for t in live], [rec(t) for t in queued]


def now(root: Path, shared: str) -> tuple[list[dict], list[dict]]:
    """The sources holding a scrape slot now and those waiting for one (each: source, run, host, pid, since)."""
    if shared:
        return _shared_state(_client(shared))
    return _local_state(Path(root))
