"""The attempt process: the scraper runs in a fresh browser context of the process's own Chromium, and the process
is killed as a whole at the hard timeout. :func:`scrape` runs one attempt in the browser it is given: a browser host
(host.py) calls it source after source; a process of its own (``python -m fleet.engine.attempt SPEC.json``) runs
:func:`run` once. Rows are streamed to a spool file, so a timeout keeps what was collected; a failure keeps a
screenshot, the page's HTML, its error and its Playwright trace (evidence.py)."""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from fleet import config
from fleet.errors import BlockedError, NavigationError
from fleet.scraping.contract import ScrapeContext
from fleet.scraping.discovery import Source, load_module
from fleet.scraping.politeness import Politeness
from fleet.scraping.polite_route import PoliteRoute
from fleet.engine import failure
from fleet.engine.chromium import GONE_EVENT_WAIT_S, OwnBrowser, open_browser
from fleet.engine.evidence import capture, dump_stacks_on_request, start_trace, stop_dumping_stacks, stop_trace
from fleet.engine.procs import private_tmp
from fleet.scraping.retry import RetryPolicy
from fleet.storage import provenance
from fleet.storage.frames import add_unique, encode_row, validate_row
from fleet.storage.faults import disk_full


def _die_with_parent() -> None:
    """If the step process dies (SIGKILL, OOM), take this process down too rather than orphan it."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


async def run(spec: dict) -> dict:
    """One attempt in a process of its own: start Playwright and a browser, scrape, close."""
    opened = open_browser(spec["chromium"], spec.get("node_cache"))
    try:
        browser = await opened.__aenter__()
    except Exception as exc:
        return failure_result(spec, exc, "infra", "the browser did not start")
    try:
        return await scrape(browser, spec)
    finally:
        await opened.__aexit__(None, None, None)


async def scrape(own: OwnBrowser, spec: dict) -> dict:
    """One source attempt in a fresh browser context of ``own``'s browser; the context is closed before returning."""
    source = Source(name=spec["source"], module_path=Path(spec["module_path"]), class_name=spec["class_name"],
                    description="", schema=None, key=(), timeout_s=spec["timeout_s"])
    reserve_result(spec)
    work = Path(spec["work_dir"])
    evidence_dir = Path(spec["evidence_dir"])
    spool_path = Path(spec["spool_path"])
    start = time.monotonic()
    deadline = start + spec["timeout_s"]
    log = logging.getLogger(f"fleet.scraper.{source.name}")
    result: dict = {"status": "failed", "category": "source", "rows": 0, "pages": 0}
    doctor = False  # whether the source's own locator or selector failed (`fleet doctor` repairs those)
    import datetime as dt

    ctx = ScrapeContext(source=source.name, week=dt.date.fromisoformat(spec["week"]), run_id=spec["run_id"],
                        deep=spec["deep"], state_dir=work, deadline=deadline,
                        retry=RetryPolicy(**spec.get("retry", {})), logger=log,
                        progress_path=Path(spec.get("progress_path") or work / "last_url.txt"),
                        step_pid=spec.get("step_pid"),
                        block_markers=tuple(spec.get("block_markers") or ()),
                        politeness=Politeness(**spec["politeness"], source=source.name)
                        if spec.get("politeness") else None)
    browser = own.browser
    gone = asyncio.Event()  # set when the browser or this source's renderer dies: no page will answer again

    def on_gone(*_):
        gone.set()

    # Soft deadline: leave a little time before the hard kill to save evidence of an async hang.
    grace = min(3.0, spec["timeout_s"] * 0.4)
    browser.on("disconnected", on_gone)
    try:
        context = None
        missing: list[str] = []  # what a replay asked for that its HAR does not hold
        try:
            lost = own.watch()  # between sources, or as this one's page opened: fleet's side, not the source's
            context = await open_context(browser, spec, missing, ctx.politeness)
            tracing = await start_trace(context, spec, log)  # never raises: the attempt goes on without a trace
            page = await context.new_page()
            lost += own.watch()
            if lost:
                raise BrowserGone(f"the browser lost {', '.join(lost)}")
        except Exception as exc:  # no scraper code has run: the browser is gone, or will not give it a context
            died = await _browser_died(browser, gone, exc)  # its "disconnected" can come just after the error
            if context is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(context.close(), 5)
            return failure_result(spec, exc, "infra", "the browser crashed before the source's context opened"
                                  if died or isinstance(exc, BrowserGone) else "the browser did not open a context")
        page.on("crash", on_gone)
        fetched: list = [None]
        page.on("framenavigated", lambda frame: frame == page.main_frame and fetched.__setitem__(0, provenance.now()))
        # The scraper's clock starts now: browser start-up is fleet's cost, with its own limit in the runner. The
        # import of its module is the source's: a module that hangs or raises at import is the source's failure.
        start = time.monotonic()
        ctx.deadline = start + spec["timeout_s"]
        ready = Path(spec["ready_path"])
        dump_stacks_on_request(spec)
        ready.write_text(f"{os.getpid()}\n{IMPORTING} {source.module_path}\n")
        seen_keys: dict[tuple, dict] = {}
        count = 0
        imported = False
        first_rows = spec.get("first_rows")
        config.export(**(spec.get("env") or {}))  # a fixture's own settings (its demo site's URL), before the import
        from fleet.quality.structure import Snapshots, take as snapshot  # the regions its rows come from (#46)
        shots = Snapshots(source.module_path, spec.get("structure_path"))

        async def consume():
            nonlocal count, imported
            try:
                cls = getattr(load_module(source.module_path), source.class_name)
                schema, key = dict(cls.schema), tuple(cls.key)
                ctx.block_markers += tuple(m.lower() for m in getattr(cls, "block_markers", ()) or ())
                ctx.politeness.declare(getattr(cls, "polite_concurrency", None), getattr(cls, "polite_interval_s", None))
            except (Exception, SystemExit) as exc:
                raise ScraperImportError(f"source {source.name}: its module {source.module_path} did not import: "
                                         f"{type(exc).__name__}: {exc}") from exc
            imported = True
            ready.write_text(f"{os.getpid()}\n{SCRAPING}\n")  # read by the runner if it has to kill this process
            rev = provenance.revision(source.module_path)
            with open(spool_path, "a", encoding="utf-8") as spool:
                try:
                    async for row in cls().scrape(page, ctx):
                        clean = validate_row(source.name, schema, key, row, count)
                        add_unique(source.name, schema, key, seen_keys, clean)  # raises on a conflicting duplicate
                        # a row's page: the last navigation of the page's main frame (ctx.goto, a click), if any
                        stamp = {provenance.FETCHED_AT: fetched[0] or provenance.now(), provenance.SCRAPER_REV: rev}
                        try:
                            spool.write(encode_row({**clean, **stamp}) + "\n")
                            spool.flush()
                        except OSError as exc:  # fleet's own write, not the scraper's: the disk under FLEET_HOME
                            why = disk_full(exc, spool_path) or f"cannot write its rows to {spool_path}: {exc}"
                            raise SpoolWriteError(f"source {source.name}: {why}") from exc
                        count += 1
                        await snapshot(shots, page, fetched[0])  # once a page; bounded, never fails the attempt
                        if first_rows and count >= first_rows:  # a canary: the first page's first rows are enough
                            break
                    ctx.rows_stored()  # the scrape ended: the last page's rows are all in the spool
                    shots.save()
                except (SystemExit, KeyboardInterrupt) as exc:
                    # The scraper's own (no Ctrl-C reaches a process in a session of its own). Left to asyncio, it
                    # would end the process, and the source fail as infra, retried, without evidence.
                    raise ScraperExit(f"source {source.name}: its scraper raised {type(exc).__name__}"
                                      f"{f'({exc})' if str(exc) else ''}; a scraper returns, or raises an exception, "
                                      f"but must not exit its attempt process") from None

        try:
            await _until_gone(consume(), gone, timeout=max(0.1, ctx.deadline - grace - time.monotonic()),
                              route=ctx.politeness.route if ctx.politeness else None)
            result = {"status": "ok" if count else "empty", "category": None}
        except SoftDeadline:  # fleet's own deadline; a TimeoutError the scraper raised is its error, below
            log.warning("[run %s] [%s] soft deadline reached; saving evidence before the hard limit",
                        spec["run_id"], source.name)
            result = {"status": "timeout", "category": "source",
                      "error": f"source {source.name}: timed out after {spec['timeout_s']:g}s (timeout_s)"}
            lost = own.lost()  # a page that waited on a renderer no zygote would start
            if lost:
                result = {"status": "failed", "category": "infra", "error": f"source {source.name}: the browser "
                          f"lost {', '.join(lost)} (killed or crashed): {result['error']}"}
        except Exception as exc:
            text = failure.describe(exc)  # one line: the call, its locator, what went wrong
            doctor = failure.names_selector(text)
            # Observed, never read from the error's text: a process of the browser gone (a zygote or the network
            # service, which Chromium outlives), or its "disconnected", or the page's "crash"
            lost = own.lost()
            died = bool(lost) or await _browser_died(browser, gone, exc)
            if not died:  # a helper killed as the error came: seen gone after the wait for the browser's word
                lost = own.lost()
                died = bool(lost)
            crashed = gone.is_set() or not browser.is_connected()  # rather than only lost a helper
            # fleet closes the browser only between sources: a clean close now was the scraper's
            closed_by_scraper = died and not browser.is_connected() and await own.closed_on_request()
            infra = died and not closed_by_scraper
            if closed_by_scraper:
                text += " (the scraper closed the browser itself)"
            # a site that turned fleet away is neither the scraper's bug nor a crash (fleet/policy/taxonomy.py)
            infra = infra or isinstance(exc, SpoolWriteError)
            category = "infra" if infra else "blocked" if isinstance(exc, BlockedError) else "source"
            doctor = doctor and category == "source"
            result = {"status": "failed", "category": category,
                      "error": str(exc) if isinstance(exc, SpoolWriteError)
                      else text if str(exc).startswith("source ") else f"source {source.name}: {text}",
                      "error_type": type(exc).__name__, "traceback": traceback.format_exc()}
            if isinstance(exc, NavigationError):
                result["url"] = exc.url
                if exc.status is not None:
                    result["http_status"] = exc.status
            if infra and not isinstance(exc, SpoolWriteError):
                how = f"lost {', '.join(lost)} (killed or crashed)" if lost and not crashed else "crashed"
                result["error"] = f"source {source.name}: the browser {how}: {text}"
        if missing:  # the replay lacked what the page needs: that, not the scraper's error it led to, is the cause
            more = f" (and {len(set(missing)) - 1} more)" if len(set(missing)) > 1 else ""
            result = {**result, "status": "failed", "category": "source", "missing": sorted(set(missing)),
                      "traceback": None, "error": f"source {source.name}: not in the fixture: {missing[0]}{more}; "
                               f"re-record with `fleet record {source.name}`"}
        failed = result["status"] not in ("ok", "empty")
        if failed and imported:  # before that, the page is the blank one fleet opened
            hard_deadline = start + spec["timeout_s"]  # when the runner kills this process
            result["evidence"] = await capture(page, evidence_dir, log, hard_deadline - time.monotonic() - 0.7)
        if tracing:  # after the screenshot and page: within what is left before the hard kill
            trace = await stop_trace(context, spec, failed, log, start + spec["timeout_s"] - time.monotonic() - 1.5)
            if trace:
                result["evidence"] = {**(result.get("evidence") or {}), "trace": trace}
        evidence = result.get("evidence") or {}
        result["url"] = result.get("url") or evidence.get("page_url") or ctx.last_url  # where it failed
        if result["status"] == "failed" and not missing:
            result["error"] = failure.one_line(result["error"], source=source.name, week=spec["week"],
                                               url=result["url"], trace="trace" in evidence, doctor=doctor)
        if failed:
            with contextlib.suppress(OSError):  # a full disk: the result below still says why
                evidence_dir.mkdir(parents=True, exist_ok=True)
                (evidence_dir / "error.txt").write_text(f"{result.get('error', '')}\nURL: {result['url'] or 'none'}"
                                                        f"\n\n{result.get('traceback') or ''}")
        result.update(rows=count, pages=ctx.pages_visited,
                      seconds=round(time.monotonic() - start, 3),
                      domains=ctx.politeness.summary() if ctx.politeness else {})  # robots.txt, 429s: politeness.py
        with contextlib.suppress(Exception):
            await asyncio.wait_for(context.close(), 10)
        if ctx.politeness and ctx.politeness.route:  # the slots its requests still held
            await ctx.politeness.route.close()
    finally:
        browser.remove_listener("disconnected", on_gone)
        stop_dumping_stacks()
    return result


# Requests a page needs to make sense; anything else a replayed HAR lacks (images, fonts, analytics, cache busters
# no recording can match) is aborted quietly.
NEEDED = ("document", "xhr", "fetch")


async def open_context(browser, spec: dict, missing: list[str], politeness=None):
    """The attempt's browser context. Its network is the live one, the live one recorded into ``record_har``
    (Playwright's HAR, written as the context closes), or ``replay_har`` replayed offline: a request the HAR lacks
    is aborted, and one of the ``NEEDED`` kinds added to ``missing``. ``politeness`` holds for every request of it
    (polite_route.py). Service workers are blocked when anything routes: routes do not see their requests."""
    if not (spec.get("record_har") or spec.get("replay_har") or politeness):
        return await browser.new_context()
    options = {"record_har_path": spec["record_har"], "record_har_mode": "full"} if spec.get("record_har") else {}
    context = await browser.new_context(service_workers="block", **options)
    if politeness:  # the oldest route: a replay's HAR answers first, and reaches no site
        await PoliteRoute(politeness).install(context)
    if spec.get("replay_har"):
        async def not_in_fixture(route):
            if route.request.resource_type in NEEDED:
                missing.append(f"{route.request.method} {route.request.url}")
            await route.abort()

        # routes run newest first: the HAR answers what it holds and falls back to this for the rest
        await context.route("**/*", not_in_fixture)
        await context.route_from_har(spec["replay_har"], not_found="fallback")
    return context


class BrowserGone(Exception):
    pass


class ScraperExit(Exception):
    """The scraper called ``sys.exit`` or raised ``SystemExit`` or ``KeyboardInterrupt`` (a source failure)."""


class SpoolWriteError(Exception):
    """fleet could not write a row the scraper yielded into the spool (the disk is full): infra, re-executed."""


class ScraperImportError(Exception):
    """The scraper's module raised at import (a source failure, named after the module)."""


# The phases the process writes into its attempt's ready file, after its pid.
IMPORTING, SCRAPING = "importing", "scraping"


async def _browser_died(browser, gone: asyncio.Event, exc: BaseException) -> bool:
    """Whether the browser disconnected or this page's renderer crashed, from their events and
    ``browser.is_connected()``, never from an error's text: a scraper that closes its own page and then uses it
    gets the same "Target page, context or browser has been closed" as one whose browser died. The events may
    arrive just after the error, so a Playwright error other than its timeout (a call on a closed target raises
    one) waits up to ``GONE_EVENT_WAIT_S`` for them."""
    waits = any(isinstance(e, PlaywrightError) and not isinstance(e, PlaywrightTimeoutError) for e in _chain(exc))
    if not gone.is_set() and browser.is_connected() and waits:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(gone.wait(), GONE_EVENT_WAIT_S)
    return gone.is_set() or not browser.is_connected()


def _chain(exc: BaseException | None):
    """``exc`` and the exceptions it was raised from or during: ``ctx.goto`` raises a NavigationError from
    Playwright's (a renderer killed mid-navigation fails it with ``net::ERR_ABORTED`` before the "crash")."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


class SoftDeadline(Exception):
    """fleet's soft deadline stopped the scraper. Its own class: since Python 3.11 ``asyncio.TimeoutError`` is the
    builtin ``TimeoutError``, which a scraper's own expired ``asyncio.wait_for`` (or any library) raises too."""


async def _until_gone(work, gone: asyncio.Event, timeout: float, route=None):
    """Await ``work``; stop it at once if the browser dies (it would otherwise sit until its timeout, for a page
    that will never answer), or ``route`` refused a request (the source is blocked, whatever the scraper makes of
    its click's error), or at ``timeout`` (``SoftDeadline``). An exception of ``work`` propagates as it is."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(gone.wait())
    refused = asyncio.ensure_future(route.refused.wait() if route else asyncio.Event().wait())
    try:
        done, _ = await asyncio.wait({task, watcher, refused}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        refused.cancel()
    if task in done and not (route and route.refusal):
        return task.result()
    if route and route.refusal:
        task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 2)
        raise route.refusal
    task.cancel()
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(task, 2)
    if watcher in done:
        raise BrowserGone("Browser closed: the browser or this page's renderer crashed")
    raise SoftDeadline()


def failure_result(spec: dict, exc: BaseException, category: str = "infra", what: str | None = None) -> dict:
    """The result of an attempt that failed outside the scraper's ``scrape``, in ``category``: an exception that
    escaped :func:`scrape` or the process itself (the default) is fleet's side failing: infra, re-executed."""
    return {"status": "failed", "category": category,
            "error": f"source {spec['source']}: {what + ': ' if what else ''}{type(exc).__name__}: {exc}",
            "error_type": type(exc).__name__, "traceback": traceback.format_exc(), "rows": 0, "pages": 0}


RESULT_ROOM = 1 << 16


def reserve_result(spec: dict) -> None:
    """Room on disk for the attempt's result, taken while there is some: a disk full later still hears why."""
    with contextlib.suppress(OSError), open(spec["result_path"] + ".tmp", "wb") as fh:
        fh.write(b" " * RESULT_ROOM)


def write_result(spec: dict, result: dict) -> None:
    tmp = Path(spec["result_path"] + ".tmp")
    data = json.dumps(result, default=str).encode()
    if len(data) > RESULT_ROOM:  # what says why fits the room; the traceback is in the evidence too
        data = json.dumps({**result, "traceback": None}, default=str).encode()
    with open(tmp, "r+b" if tmp.exists() else "wb") as fh:  # over the reserved bytes: no new block on a full disk
        fh.write(data)
        fh.truncate(len(data))
    os.replace(tmp, spec["result_path"])


def main(argv: list[str]) -> int:
    _die_with_parent()
    spec = json.loads(Path(argv[1]).read_text())
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s", force=True)
    if spec.get("tmp_root"):  # the browser's profile goes there (procs.private_tmp); the runner clears it
        private_tmp(Path(spec["tmp_root"]))
    try:
        result = asyncio.run(run(spec))
    except BaseException as exc:  # Playwright's driver did not start, or fleet's own code failed: infra
        result = failure_result(spec, exc)
    write_result(spec, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
