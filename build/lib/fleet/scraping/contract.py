"""The public scraper contract: a ``Scraper`` subclass per source, and the ``ScrapeContext`` it is handed."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import os
import re
import time
from pathlib import Path
from typing import Any, AsyncIterator, ClassVar, Mapping

import polars as pl

from fleet.config import DEFAULT_MARKERS, parse_markers
from fleet.errors import BlockedError, FleetError, NavigationError, ScraperDefinitionError
from fleet.scraping import blocked as bot
from fleet.scraping.politeness import Politeness
from fleet.scraping.retry import RetryPolicy, retry_async
from fleet.storage.provenance import PREFIX as RESERVED_PREFIX, is_fleet_column

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# A source's name is also a Dagster tag value (``fleet/source``), which holds at most 63 characters; a longer one
# used to stop the whole code location from loading, so no source of the week ran.
NAME_MAX = 63
# Seconds of a source's time a Retry-After wait must leave, for the page and its rows after it.
RETRY_AFTER_RESERVE_S = 5.0


def valid_name(name) -> bool:
    return isinstance(name, str) and len(name) <= NAME_MAX and NAME_RE.match(name) is not None


def valid_owner(owner) -> bool:  # as Dagster's asset owners: an email, or a team name prefixed with "team:"
    return isinstance(owner, str) and bool(re.fullmatch(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,7}"
                                                         r"|team:[A-Za-z0-9][A-Za-z0-9_.-]*", owner))


class Scraper:
    """Base class of a source. Subclass it in a module under ``scrapers/``.

    A subclass is a source when it sets ``name`` in its own class body. One that does not (it may inherit
    one), or that sets ``abstract = True`` in its own body, is a base class for sources: it is never run or
    validated as a source itself, and ``abstract`` is not inherited by its subclasses.

    Class attributes:
      name       slug ``[a-z][a-z0-9_]*``; the asset is ``raw/<name>``
      schema     column name -> polars dtype
      key        natural key columns; rows are unique by it
      timeout_s  hard limit for one run of this source, in seconds
      own_browser  run each attempt in a Chromium no other source used before (a new browser host, as own_process)
                   instead of a fresh context in a browser host's browser
      own_process  run each attempt in a new attempt process instead of a browser host that other sources used
                   before (see fleet/engine/pool.py): for a scraper that changes process-wide state
      abstract   True: a base class, not a source (read from the class's own body only)
      quarantine_after  weeks in a row failed as ``source`` after which the weekly run skips it (fleet/lifecycle/quarantine.py)
      carry_forward, carry_forward_weeks  a failed week contributes its last good week's rows, at most this many
                 weeks in a row (fleet/lifecycle/carry.py)
      block_markers  extra case-insensitive substrings of a page's HTML that mean a captcha or bot-check page
                 (on top of FLEET_BLOCK_MARKERS): ``ctx.goto`` then fails the source as ``blocked``
      polite_concurrency, polite_interval_s  this scraper's limits for the domains it visits (at most N
                 requests at once, at least T seconds between them: fleet/scraping/polite_route.py), stricter than FLEET_DOMAIN_*; they bind
                 every source of this host that visits those domains after it
      obey_robots, obey_robots_reason  every request of the page obeys the site's robots.txt (fleet/scraping/robots.py) unless
                 ``obey_robots = False``, which needs a reason (recorded in the source's metadata)
      optional   columns that may legitimately be null in any share of rows (a discount, a field only a deep run
                 fills): the coverage check never judges their fill. Every other column must be filled in at least
                 5% of rows from the first week (fleet/quality/baseline.py); key columns cannot be optional
      owner      who answers for the source: an email or ``team:NAME`` (Dagster's owners); its alerts go to the
                 owner's route in FLEET_ALERT_ROUTES (fleet/quality/alerts.py), else the default one
    The class docstring becomes the asset's description in the UI.
    """

    name: ClassVar[str]
    schema: ClassVar[Mapping[str, Any]]
    key: ClassVar[tuple[str, ...]] = ()
    timeout_s: ClassVar[float] = 600
    own_browser: ClassVar[bool] = False
    own_process: ClassVar[bool] = False
    abstract: ClassVar[bool] = False
    quarantine_after: ClassVar[int] = 3
    carry_forward: ClassVar[bool] = False
    carry_forward_weeks: ClassVar[int] = 2
    block_markers: ClassVar[tuple[str, ...]] = ()
    polite_concurrency: ClassVar[int | None] = None
    polite_interval_s: ClassVar[float | None] = None
    obey_robots: ClassVar[bool] = True
    obey_robots_reason: ClassVar[str] = ""
    owner: ClassVar[str | None] = None
    optional: ClassVar[tuple[str, ...]] = ()
    # Volume check thresholds (#8), overridable per scraper.
    volume_warn_ratio: ClassVar[float] = 0.5
    volume_error_ratio: ClassVar[float] = 0.1

    async def scrape(self, page, ctx: "ScrapeContext") -> AsyncIterator[dict]:
        raise NotImplementedError(f"{type(self).__name__}.scrape is not implemented")
        yield {}  # pragma: no cover  (makes this an async generator)

    @classmethod
    def validate_class(cls) -> None:
        """Raise ``ScraperDefinitionError`` naming the class and what is wrong."""
        label = f"{cls.__module__}.{cls.__qualname__}"
        name = getattr(cls, "name", None)
        if not valid_name(name):
            raise ScraperDefinitionError(
                f"scraper {label}: name must be a slug matching [a-z][a-z0-9_]* of at most {NAME_MAX} characters, "
                f"got {name!r}" + (f" ({len(name)} characters)" if isinstance(name, str) and len(name) > NAME_MAX else "")
            )
        schema = getattr(cls, "schema", None)
        if not isinstance(schema, Mapping) or not schema:
            raise ScraperDefinitionError(f"scraper {name!r} ({label}): schema must be a non-empty dict of column -> polars dtype")
        for col, dtype in schema.items():
            if not isinstance(col, str) or not col:
                raise ScraperDefinitionError(f"scraper {name!r}: schema column names must be strings, got {col!r}")
            if is_fleet_column(col):
                raise ScraperDefinitionError(f"scraper {name!r}: column {col!r} is reserved: names starting with "
                                             f"{RESERVED_PREFIX!r} are fleet's own columns (provenance, source)")
            try:
                ok = isinstance(dtype, pl.DataType) or (isinstance(dtype, type) and issubclass(dtype, pl.DataType))
            except TypeError:
                ok = False
            if not ok:
                raise ScraperDefinitionError(f"scraper {name!r}: column {col!r} has dtype {dtype!r}, which is not a polars dtype")
        key = getattr(cls, "key", ())
        if isinstance(key, str) or not isinstance(key, (tuple, list)) or not key:
            raise ScraperDefinitionError(f"scraper {name!r}: key must be a non-empty tuple of column names, got {key!r}")
        missing = [k for k in key if k not in schema]
        if missing:
            raise ScraperDefinitionError(f"scraper {name!r}: key columns {missing} are not in the schema")
        optional = getattr(cls, "optional", ())
        if isinstance(optional, str) or not isinstance(optional, (tuple, list)):
            raise ScraperDefinitionError(f"scraper {name!r}: optional must be a tuple of column names, got {optional!r}")
        unknown = [c for c in optional if c not in schema]
        if unknown:
            raise ScraperDefinitionError(f"scraper {name!r}: optional columns {unknown} are not in the schema")
        if set(optional) & set(key):
            raise ScraperDefinitionError(f"scraper {name!r}: key columns {sorted(set(optional) & set(key))} cannot be "
                                         f"optional: a row's key is never null")
        check_seconds(name, "timeout_s", getattr(cls, "timeout_s", None))
        for count in ("quarantine_after", "carry_forward_weeks"):
            value = getattr(cls, count)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ScraperDefinitionError(f"scraper {name!r}: {count} must be a whole number of weeks, at least 1, "
                                             f"got {value!r}")
        for flag in ("own_browser", "own_process", "carry_forward"):
            if not isinstance(getattr(cls, flag, False), bool):
                raise ScraperDefinitionError(f"scraper {name!r}: {flag} must be True or False, got {getattr(cls, flag)!r}")
        if getattr(cls, "block_markers", ()):
            try:
                parse_markers(list(cls.block_markers) if isinstance(cls.block_markers, (list, tuple)) else
                                  cls.block_markers, f"scraper {name!r}: block_markers")
            except FleetError as exc:
                raise ScraperDefinitionError(str(exc)) from None
        n, t = getattr(cls, "polite_concurrency", None), getattr(cls, "polite_interval_s", None)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ScraperDefinitionError(f"scraper {name!r}: polite_concurrency must be a whole number >= 1, got {n!r}")
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < math.inf):
            raise ScraperDefinitionError(f"scraper {name!r}: polite_interval_s must be a number of seconds >= 0, got {t!r}")
        obey, why = getattr(cls, "obey_robots", True), getattr(cls, "obey_robots_reason", "")
        if not isinstance(obey, bool) or not obey and not (isinstance(why, str) and why.strip()):
            raise ScraperDefinitionError(f"scraper {name!r}: obey_robots must be True, or False with a reason in "
                                         f"obey_robots_reason, got obey_robots={obey!r}, obey_robots_reason={why!r}")
        owner = getattr(cls, "owner", None)
        if owner is not None and not valid_owner(owner):
            raise ScraperDefinitionError(f"scraper {name!r}: owner must be an email address or a team name "
                                         f"prefixed with 'team:' (team:data), got {owner!r}")
        import inspect

        if not inspect.isasyncgenfunction(cls.scrape) or cls.scrape is Scraper.scrape:
            raise ScraperDefinitionError(f"scraper {name!r}: scrape must be an async generator method (async def ... yield)")

    @classmethod
    def description(cls) -> str:
        import inspect

        return inspect.getdoc(cls) or f"Raw rows of source {cls.name}."


def check_seconds(source: str, setting: str, value: Any) -> float:
    """``value`` as a positive, finite number of seconds, or ``ScraperDefinitionError`` naming the source and the
    setting. A hard limit of NaN or infinity would never fire, and one of 0 or less would fire at once."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ScraperDefinitionError(f"scraper {source!r}: {setting} must be a positive, finite number of seconds, "
                                     f"got {value!r}")
    return float(value)


class _SourceAdapter(logging.LoggerAdapter):
    def process(self, msg, kwargs):
        return f"[run {self.extra['run_id']}] [{self.extra['source']}] {msg}", kwargs


class ScrapeContext:
    """What a scraper is handed besides its page. Created by fleet; scrapers never build one."""

    def __init__(
        self,
        *,
        source: str,
        week: dt.date,
        run_id: str,
        deep: bool = False,
        state_dir: Path | None = None,
        deadline: float | None = None,
        retry: RetryPolicy | None = None,
        logger: logging.Logger | None = None,
        progress_path: Path | None = None,
        step_pid: int | None = None,
        block_markers: tuple[str, ...] = DEFAULT_MARKERS,
        politeness: Politeness | None = None,
    ):
        self.source = source
        self.week = week
        self.run_id = run_id
        self.deep = deep
        self.deadline = deadline  # time.monotonic() value, or None
        # The Dagster step process this attempt runs for (not this process's parent: browser hosts are reused).
        # fleet's crash tests kill it to stand for a crash of the step's process; scrapers have no other use for it.
        self.step_pid = step_pid
        self.retry_policy = retry or RetryPolicy()
        self.block_markers = tuple(block_markers)
        self.politeness = politeness  # per domain, across the sources of this host; None: no limits
        self.log = _SourceAdapter(logger or logging.getLogger(f"fleet.scraper.{source}"), {"run_id": run_id, "source": source})
        self.pages_visited = 0
        self.last_url: str | None = None
        self._state_dir = state_dir
        self._progress_path = progress_path
        self._checkpoint_path = state_dir / "checkpoint.json" if state_dir else None
        self._seen_path = state_dir / "seen.txt" if state_dir else None
        self.checkpoint: dict = _load_json(self._checkpoint_path)
        self._seen: set[str] = set(_load_lines(self._seen_path))
        self._pending: list[str] = []  # fetched, and persisted as seen once their rows are stored

    # --- navigation -----------------------------------------------------
    async def goto(self, page, url: str, *, timeout_ms: float = 30_000, wait_until: str = "load"):
        """Navigate ``page`` to ``url``. Retries transient failures (a 429 or 503 after its Retry-After, when that
        fits in the time left); raises ``NavigationError`` on an HTTP error, ``BlockedError`` on a 403, a 429
        that does not clear, or a page carrying one of ``block_markers`` (a captcha or bot check)."""
        self.rows_stored()
        self.last_url = url
        if self._progress_path:
            # Read by fleet if this process has to be killed: the URL it was stuck on.
            self._progress_path.write_text(url)

        # robots.txt, the domain's bounds and its 429s are the context's route's (polite_route.py), for this
        # navigation and its page's own; here a disallowed URL is refused before the browser, and the slot is
        # taken before page.goto, so that waiting for the domain is not part of the page's timeout
        route = self.politeness.route if self.politeness else None
        if self.politeness and (route is None or not route.guards(page)):
            raise NavigationError(f"source {self.source}: ctx.goto({url}): this page is not of the browser context "
                                  f"fleet opened for the source, where robots.txt and the domain's bounds hold; use "
                                  f"the page fleet hands to scrape() (or a page of its context)", url=url)

        async def once():
            if self.politeness:  # robots.txt: a disallowed URL is not requested (BlockedError)
                await self.politeness.allowed(url)
            try:
                async with route.ahead(url) if route else contextlib.nullcontext():
                    response = await page.goto(url, timeout=timeout_ms, wait_until=wait_until)
            except Exception as exc:  # playwright.Error / TimeoutError
                if route:  # a redirect or a request of the page refused: the rule, not ERR_BLOCKED_BY_CLIENT
                    route.raise_refusal()
                raise _navigation_error_from(exc, url) from exc
            if route:
                route.raise_refusal()
            if response is not None and response.status == 403:
                raise BlockedError(f"source {self.source}: blocked: HTTP 403 for {url}", url=url, status=403)
            if response is not None and response.status >= 400:
                status = response.status
                raise NavigationError(
                    f"source {self.source}: HTTP {status} for {url}", url=url, status=status,
                    transient=status in (429, 502, 503, 504),
                    retry_after=bot.retry_after_s(response.headers.get("retry-after")) if status in (429, 503) else None,
                )
            marker = await bot.find_marker(page, self.block_markers)
            if marker:
                raise BlockedError(f"source {self.source}: blocked: a captcha or bot-check page at {url} "
                                   f"(marker {marker!r})", url=url, status=response.status if response else None)
            return response

        try:
            response = await retry_async(once, policy=self.retry_policy, log=self.log, what=f"goto {url}",
                                         time_left=lambda: self.time_left() - RETRY_AFTER_RESERVE_S)
        except NavigationError as exc:
            if exc.status != 429 or isinstance(exc, BlockedError):
                raise
            wait = exc.retry_after
            why = (f"; Retry-After {wait:g}s does not fit in the {self.time_left():.0f}s left" if wait is not None
                   and wait > self.time_left() - RETRY_AFTER_RESERVE_S else f" after {self.retry_policy.attempts} attempts")
            raise BlockedError(f"source {self.source}: blocked: HTTP 429 for {url}{why}", url=url, status=429) from exc
        self.pages_visited += 1
        self._record(url)
        return response

    async def retry(self, fn, *args, what: str = "call", **kwargs):
        """Run ``await fn(*args, **kwargs)`` with this source's retry policy (transient errors only)."""
        return await retry_async(lambda: fn(*args, **kwargs), policy=self.retry_policy, log=self.log, what=what)

    # --- resumability ---------------------------------------------------
    def seen(self, url: str) -> bool:
        """True if ``url`` was fetched for this source and week: in this attempt, or in an earlier one that moved on
        from it (its next ``ctx.goto``, or the end of its scrape), so every row it yielded from that page is stored.
        A page an attempt died on (mid-navigation, before or while yielding its rows) is not seen by the next."""
        return url in self._seen

    def _record(self, url: str) -> None:
        self._seen.add(url)
        self._pending.append(url)

    def rows_stored(self) -> None:
        """Called by fleet when every row yielded so far is in the spool: the pages fetched so far count as seen
        for a re-execution. (``goto`` calls it too: the scraper asks for its next page only after fleet has
        stored the rows it yielded from the last.)"""
        if self._pending and self._seen_path:
            with open(self._seen_path, "a", encoding="utf-8") as fh:
                fh.write("".join(u + "\n" for u in self._pending))
        self._pending.clear()

    def save_checkpoint(self) -> None:
        """Persist ``ctx.checkpoint`` atomically; a re-execution of this week starts from it."""
        if self._checkpoint_path:
            tmp = self._checkpoint_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.checkpoint, default=str))
            os.replace(tmp, self._checkpoint_path)

    def time_left(self) -> float:
        """Seconds before the hard timeout (inf when there is none)."""
        if self.deadline is None:
            return float("inf")
        return max(0.0, self.deadline - time.monotonic())


def _navigation_error_from(exc: Exception, url: str) -> NavigationError:
    text = str(exc)
    transient_markers = (
        "ERR_CONNECTION_REFUSED", "ERR_CONNECTION_RESET", "ERR_CONNECTION_CLOSED", "ERR_NAME_NOT_RESOLVED",
        "ERR_NAME_RESOLUTION_FAILED", "ERR_TIMED_OUT", "ERR_EMPTY_RESPONSE", "ERR_NETWORK_CHANGED",
        "ERR_INTERNET_DISCONNECTED", "ERR_CONNECTION_TIMED_OUT", "ERR_ADDRESS_UNREACHABLE",
    )
    is_timeout = type(exc).__name__ == "TimeoutError" or "Timeout" in text.split("\n", 1)[0]
    transient = is_timeout or any(m in text for m in transient_markers)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return NavigationError(f"navigation to {url} failed: {first}", url=url, transient=transient)


def _load_json(path: Path | None) -> dict:
    if path and path.exists():
        try:
            return json.loads(path.read_text())
        except (ValueError, OSError):
            return {}
    return {}


def _load_lines(path: Path | None) -> list[str]:
    if path and path.exists():
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line]
    return []
