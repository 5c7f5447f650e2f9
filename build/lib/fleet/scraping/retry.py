"""Bounded retries with growing, jittered waits, for errors that look temporary only."""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import random
import time
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({429, 502, 503, 504})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` calls in all (at least 1: no retry); waits of ``base_wait_s`` * 2**(n-1), at most ``max_wait_s``,
    plus up to ``jitter`` of each at random. A bad setting is a ``ValueError`` naming it."""

    attempts: int = 3  # the run config's retry_attempts
    base_wait_s: float = 0.5
    max_wait_s: float = 10.0
    jitter: float = 0.25  # fraction of the wait added at random

    def __post_init__(self):
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"retry policy: attempts (retry_attempts) must be a whole number >= 1, "
                             f"got {self.attempts!r}")
        for setting in ("base_wait_s", "max_wait_s", "jitter"):
            value = getattr(self, setting)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"retry policy: {setting} must be a finite number >= 0, got {value!r}")

    def wait(self, attempt: int) -> float:
        """Wait before retry number ``attempt`` (1-based): base * 2**(attempt-1), capped, plus jitter."""
        w = min(self.max_wait_s, self.base_wait_s * (2 ** min(attempt - 1, 64)))  # 2**1024 would not be a float
        return w + random.uniform(0, w * self.jitter)


def is_transient(exc: BaseException) -> bool:
    """Temporary-looking: refused/reset connection, DNS, navigation timeout, HTTP 429/502/503/504."""
    flag = getattr(exc, "transient", None)
    if flag is not None:
        return bool(flag)
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return status in TRANSIENT_STATUS
    if isinstance(exc, (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError, TimeoutError, asyncio.TimeoutError)):
        return True
    import socket

    return isinstance(exc, socket.gaierror)


def _retry_wait(policy: RetryPolicy, attempt: int, exc: BaseException, transient, log, what: str,
                time_left: Callable[[], float] | None = None) -> float | None:
    """The wait before the next attempt, or None when ``exc`` must be raised (not transient, or attempts used up,
    or the wait the server asked for (``exc.retry_after``, from Retry-After) is more than ``time_left()``)."""
    if attempt >= policy.attempts or not transient(exc):
        return None
    wait = getattr(exc, "retry_after", None)
    if wait is None:
        wait = policy.wait(attempt)
    elif time_left is not None and wait > time_left():
        return None
    if log is not None:
        log.warning("%s failed transiently (%s); retry %d/%d in %.2fs", what, exc, attempt, policy.attempts - 1, wait)
    return wait


async def retry_async(fn: Callable[[], Awaitable[T]], *, policy: RetryPolicy | None = None, log=None,
                      what: str = "call", transient: Callable[[BaseException], bool] = is_transient,
                      time_left: Callable[[], float] | None = None) -> T:
    """Await ``fn()``; on a transient error retry up to ``policy.attempts`` in all. Anything else raises at once.
    An error carrying ``retry_after`` (seconds) waits that long instead, if it fits in ``time_left()``."""
    policy = policy or RetryPolicy()
    for attempt in itertools.count(1):  # ends: _retry_wait is None from attempt policy.attempts (>= 1) on
        try:
            return await fn()
        except Exception as exc:
            wait = _retry_wait(policy, attempt, exc, transient, log, what, time_left)
            if wait is None:
                raise
            await asyncio.sleep(wait)


def retry_sync(fn: Callable[[], T], *, policy: RetryPolicy | None = None, log=None, what: str = "call",
               transient: Callable[[BaseException], bool] = is_transient) -> T:
    """The blocking twin of :func:`retry_async`."""
    policy = policy or RetryPolicy()
    for attempt in itertools.count(1):
        try:
            return fn()
        except Exception as exc:
            wait = _retry_wait(policy, attempt, exc, transient, log, what)
            if wait is None:
                raise
            time.sleep(wait)
