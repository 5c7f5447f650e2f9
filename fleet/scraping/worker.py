"""A source attempt: the scraper runs in a fresh browser context, and its worker process is killed as a whole at
the hard timeout.

:func:`scrape` runs one attempt in a browser it is given. A warm worker (fleet/scraping/pool.py) calls it for
one source after another with the same browser. A worker of its own (``own_process``, ``FLEET_WORKERS=fresh``)
is forked by the runner, or started as ``python -m fleet.scraping.worker SPEC.json``, and runs :func:`run`:
it opens the shared Chromium (``spec["shared_endpoint"]``) or starts Playwright and a Chromium of its own, and
scrapes once.
Rows are streamed to a spool file, so a timeout keeps what was collected, and on failure the attempt keeps a
screenshot and the page HTML.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import faulthandler
import json
import logging
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from fleet.config import CHROMIUM_ARGS
from fleet.errors import NavigationError
from fleet.scraping import wsclient
from fleet.scraping.contract import ScrapeContext
from fleet.scraping.discovery import Source, load_module
from fleet.scraping.procs import private_tmp
from fleet.scraping.retry import RetryPolicy
from fleet.storage.frames import add_unique, encode_row, validate_row

# How long a TargetClosedError waits for the browser's own word (its "disconnected" event, the page's "crash")
# before it counts as the scraper's: the events can reach this process just after the failed call's error.
GONE_EVENT_WAIT_S = 2.0


def _die_with_parent() -> None:
    """If the step process dies (SIGKILL, OOM), take this worker down too rather than orphan it."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


async def _stop_loading(page, log, timeout_s: float) -> None:
    """Stop the page's pending navigation and loads, as the browser's stop button would (DevTools'
    ``Page.stopLoading``). A page waiting on a navigation that never answers (a hung site) answers neither
    ``page.content()`` nor ``page.screenshot()`` until it is stopped; then both show the document it still has.
    A page that has finished loading is left as it was."""
    try:
        cdp = await asyncio.wait_for(page.context.new_cdp_session(page), timeout_s)
        try:
            await asyncio.wait_for(cdp.send("Page.stopLoading"), timeout_s)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cdp.detach(), timeout_s)
    except Exception as exc:  # evidence is best effort: try the captures anyway
        log.warning("could not stop the page's loading before saving evidence: %s", _first_line(exc))


async def _capture(page, evidence_dir: Path, log, budget_s: float) -> dict:
    """The page's HTML and a full-page screenshot, taken side by side, each within ``budget_s`` (what is left
    before the hard kill, at most 8 s: on a loaded machine a busy browser can take seconds for either)."""
    out = {}
    if page is None or page.is_closed():
        return out
    evidence_dir.mkdir(parents=True, exist_ok=True)
    budget_s = max(0.5, min(8.0, budget_s))
    started = time.monotonic()
    await _stop_loading(page, log, budget_s / 4)
    budget_s = max(0.5, budget_s - (time.monotonic() - started))
    html, shot = evidence_dir / "page.html", evidence_dir / "screenshot.png"

    async def save_html():
        html.write_text(await asyncio.wait_for(page.content(), budget_s), encoding="utf-8")
        return "html", str(html)

    async def save_screenshot():
        # A full-page capture of a long page can take seconds when one shared browser renders many pages on
        # a loaded machine; the visible part is still worth having.
        try:
            await page.screenshot(path=str(shot), full_page=True, timeout=budget_s * 600)
        except Exception as exc:
            log.warning("full-page screenshot failed (%s); keeping the visible part", _first_line(exc))
            await page.screenshot(path=str(shot), timeout=budget_s * 400)
        return "screenshot", str(shot)

    for what, result in zip(("the page HTML", "a screenshot"),
                            await asyncio.gather(save_html(), save_screenshot(), return_exceptions=True)):
        if isinstance(result, BaseException):  # evidence is best effort; the failure itself is what matters
            log.warning("could not save %s: %s", what, _first_line(result))
        else:
            out[result[0]] = result[1]
    try:
        out["page_url"] = page.url
    except Exception:
        pass
    return out


def use_node_cache(spec: dict) -> None:
    if spec.get("node_cache"):
        # Playwright's driver is a Node.js process per worker; Node keeps its compiled code here between them
        # (NODE_COMPILE_CACHE, Node >= 22), which saves part of every driver start.
        os.environ.setdefault("NODE_COMPILE_CACHE", spec["node_cache"])


@contextlib.asynccontextmanager
async def open_browser(spec: dict):
    """The shared Chromium (``spec["shared_endpoint"]``, fleet/scraping/browser.py) or a Chromium of this worker's
    own, open for the ``async with`` block; it is closed (a shared one: disconnected) at its end."""
    async with contextlib.AsyncExitStack() as stack:
        if spec.get("shared_endpoint") and wsclient.available():
            # Playwright's browser server, on a WebSocket of this worker's own and no Node.js driver here
            # (fleet/scraping/wsclient.py): this connection sees only the contexts it creates, which close with it.
            browser = await wsclient.connect(spec["shared_endpoint"], timeout_s=60)
        else:
            from playwright.async_api import async_playwright

            use_node_cache(spec)
            pw = await stack.enter_async_context(async_playwright())
            if spec.get("shared_endpoint"):  # a Playwright without what wsclient needs: through a driver
                browser = await pw.chromium.connect(spec["shared_endpoint"], timeout=60_000)
            else:
                browser = await pw.chromium.launch(executable_path=spec["chromium"], headless=True,
                                                   args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 10)


async def run(spec: dict) -> dict:
    """One source attempt in a worker of its own: start a browser (or connect to the shared one), scrape, close."""
    opened = open_browser(spec)
    try:
        browser = await opened.__aenter__()
    except Exception as exc:
        return failure_result(spec, exc, "infra", "the browser did not start")
    try:
        return await scrape(browser, spec)
    finally:
        await opened.__aexit__(None, None, None)


async def scrape(browser, spec: dict) -> dict:
    """One source attempt in a fresh browser context of ``browser``; the context is closed before returning."""
    source = Source(name=spec["source"], module_path=Path(spec["module_path"]), class_name=spec["class_name"],
                    description="", schema=None, key=(), timeout_s=spec["timeout_s"])
    work = Path(spec["work_dir"])
    evidence_dir = Path(spec["evidence_dir"])
    spool_path = Path(spec["spool_path"])
    start = time.monotonic()
    deadline = start + spec["timeout_s"]
    log = logging.getLogger(f"fleet.scraper.{source.name}")
    result: dict = {"status": "failed", "category": "source", "rows": 0, "pages": 0}
    import datetime as dt

    ctx = ScrapeContext(source=source.name, week=dt.date.fromisoformat(spec["week"]), run_id=spec["run_id"],
                        deep=spec["deep"], state_dir=work, deadline=deadline,
                        retry=RetryPolicy(**spec.get("retry", {})), logger=log,
                        progress_path=Path(spec.get("progress_path") or work / "last_url.txt"),
                        step_pid=spec.get("step_pid"))
    gone = asyncio.Event()  # set when the browser or this source's renderer dies: no page will answer again

    def on_gone(*_):
        gone.set()

    # Soft deadline: leave a little time before the hard kill to save evidence of an async hang.
    grace = min(3.0, spec["timeout_s"] * 0.4)
    browser.on("disconnected", on_gone)
    # A scraper can reach the browser (page.context.browser) and close it: that is its bug, not a crash.
    closed_by_scraper = asyncio.Event()
    own_close = browser.close

    async def close(*args, **kwargs):
        closed_by_scraper.set()
        return await own_close(*args, **kwargs)

    browser.close = close
    # A browser that was already gone when this attempt began did not die under it (a warm worker can be handed
    # a source in the moment its browser dies): browser_died is for the runner, which moves the source off it.
    connected_at_start = browser.is_connected()
    try:
        context = None
        try:
            context = await browser.new_context()
            page = await context.new_page()
        except Exception as exc:  # no scraper code has run: the browser is gone, or will not give it a context
            died = await _browser_died(browser, gone, exc)  # its "disconnected" can come just after the error
            if context is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(context.close(), 5)
            return {**failure_result(spec, exc, "infra", "the browser crashed before the source's context opened"
                                     if died else "the browser did not open a context"),
                    "browser_died": died and connected_at_start}
        page.on("crash", on_gone)
        # The scraper's clock starts now: browser start-up is fleet's cost, with its own limit in the runner. The
        # import of its module is the source's: a module that hangs or raises at import is the source's failure.
        start = time.monotonic()
        ctx.deadline = start + spec["timeout_s"]
        ready = Path(spec["ready_path"])
        _dump_stacks_on_request(spec)
        ready.write_text(f"{os.getpid()}\n{IMPORTING} {source.module_path}\n")
        seen_keys: dict[tuple, dict] = {}
        count = 0
        imported = False

        async def consume():
            nonlocal count, imported
            try:
                cls = getattr(load_module(source.module_path), source.class_name)
                schema, key = dict(cls.schema), tuple(cls.key)
            except (Exception, SystemExit) as exc:
                raise ScraperImportError(f"source {source.name}: its module {source.module_path} did not import: "
                                         f"{type(exc).__name__}: {exc}") from exc
            imported = True
            ready.write_text(f"{os.getpid()}\n{SCRAPING}\n")  # read by the runner if it has to kill this process
            with open(spool_path, "a", encoding="utf-8") as spool:
                try:
                    async for row in cls().scrape(page, ctx):
                        clean = validate_row(source.name, schema, key, row, count)
                        add_unique(source.name, schema, key, seen_keys, clean)  # raises on a conflicting duplicate
                        spool.write(encode_row(clean) + "\n")
                        spool.flush()
                        count += 1
                except (SystemExit, KeyboardInterrupt) as exc:
                    # The scraper's own: a worker runs in a session of its own, so no Ctrl-C reaches it. Left to
                    # asyncio, it would end the worker itself, and the source fail as infra, retried, without evidence.
                    raise ScraperExit(f"source {source.name}: its scraper raised {type(exc).__name__}"
                                      f"{f'({exc})' if str(exc) else ''}; a scraper returns, or raises an exception, "
                                      f"but must not exit its worker") from None

        try:
            await _until_gone(consume(), gone, timeout=max(0.1, ctx.deadline - grace - time.monotonic()))
            result = {"status": "ok" if count else "empty", "category": None}
        except SoftDeadline:  # fleet's own deadline; a TimeoutError the scraper raised is its error, below
            log.warning("[run %s] [%s] soft deadline reached; saving evidence before the hard limit", spec["run_id"], source.name)
            result = {"status": "timeout", "category": "source",
                      "error": f"source {source.name}: timed out after {spec['timeout_s']:g}s (timeout_s)"}
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            infra = await _browser_died(browser, gone, exc) and not closed_by_scraper.is_set()
            if closed_by_scraper.is_set():
                text += " (the scraper closed the browser itself)"
            result = {"status": "failed", "category": "infra" if infra else "source",
                      "error": text if str(exc).startswith("source ") else f"source {source.name}: {text}",
                      "error_type": type(exc).__name__, "traceback": traceback.format_exc()}
            if isinstance(exc, NavigationError):
                result["url"] = exc.url
                if exc.status is not None:
                    result["http_status"] = exc.status
            if infra:
                result["error"] = f"source {source.name}: the browser crashed: {text}"
                # not only this source's renderer
                result["browser_died"] = connected_at_start and not browser.is_connected()
        if result["status"] not in ("ok", "empty"):
            hard_deadline = start + spec["timeout_s"]  # when the runner kills this process
            if imported:  # before that, the page is the blank one fleet opened
                result["evidence"] = await _capture(page, evidence_dir, log, hard_deadline - time.monotonic() - 0.7)
            (evidence_dir / "error.txt").parent.mkdir(parents=True, exist_ok=True)
            (evidence_dir / "error.txt").write_text(result.get("traceback") or result.get("error", ""))
        result.update(rows=count, pages=ctx.pages_visited, url=result.get("url") or ctx.last_url,
                      seconds=round(time.monotonic() - start, 3))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(context.close(), 10)
    finally:
        browser.close = own_close
        browser.remove_listener("disconnected", on_gone)
        _stop_dumping_stacks()
    return result


_stack_file = None


def _dump_stacks_on_request(spec: dict) -> None:
    """Until the attempt ends, SIGUSR1 writes every thread's Python stack to ``spec["stack_path"]``: the runner
    sends it just before it kills this worker at the hard limit (a scraper blocking its event loop leaves no
    other trace of where it was). faulthandler writes from its C signal handler, so a blocked loop is no obstacle."""
    global _stack_file
    if spec.get("stack_path"):
        _stop_dumping_stacks()
        # Between attempts (unregistered), a late SIGUSR1 is ignored instead of ending a warm worker.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        _stack_file = open(spec["stack_path"], "w")
        faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True)


def _stop_dumping_stacks() -> None:
    global _stack_file
    if _stack_file is not None:
        faulthandler.unregister(signal.SIGUSR1)
        _stack_file.close()
        _stack_file = None


class BrowserGone(Exception):
    pass


class ScraperExit(Exception):
    """The scraper called ``sys.exit`` or raised ``SystemExit`` or ``KeyboardInterrupt`` (a source failure)."""


class ScraperImportError(Exception):
    """The scraper's module raised at import (a source failure, named after the module)."""


# The phases a worker writes into its attempt's ready file, after its pid.
IMPORTING, SCRAPING = "importing", "scraping"


async def _browser_died(browser, gone: asyncio.Event, exc: BaseException) -> bool:
    """Whether the browser disconnected or this page's renderer crashed, from their events and
    ``browser.is_connected()``, never from an error's text: a scraper that closes its own page and then uses it
    gets the same "Target page, context or browser has been closed" as one whose browser died. The events may
    arrive just after the error, so a closed-target error waits up to ``GONE_EVENT_WAIT_S`` for them."""
    try:  # what Playwright raises for a call on a closed page, context or browser, whoever closed it
        from playwright._impl._errors import TargetClosedError
    except ImportError:  # another Playwright layout: wait on any of its errors
        from playwright.async_api import Error as TargetClosedError

    if not gone.is_set() and browser.is_connected() and isinstance(exc, TargetClosedError):
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(gone.wait(), GONE_EVENT_WAIT_S)
    return gone.is_set() or not browser.is_connected()


class SoftDeadline(Exception):
    """fleet's soft deadline stopped the scraper. Its own class: since Python 3.11 ``asyncio.TimeoutError`` is the
    builtin ``TimeoutError``, which a scraper's own expired ``asyncio.wait_for`` (or any library) raises too."""


async def _until_gone(work, gone: asyncio.Event, timeout: float):
    """Await ``work``; stop it at once if the browser dies (it would otherwise sit until its timeout, for a page
    that will never answer), or at ``timeout`` (``SoftDeadline``). An exception of ``work`` propagates as it is."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(gone.wait())
    try:
        done, _ = await asyncio.wait({task, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(task, 2)
    if watcher in done:
        raise BrowserGone("Browser closed: the browser or this page's renderer crashed")
    raise SoftDeadline()


def failure_result(spec: dict, exc: BaseException, category: str = "infra", what: str | None = None) -> dict:
    """The result of an attempt that failed outside the scraper's ``scrape``: ``category`` is the caller's
    decision (its module did not load: source; no browser, no context: infra). An exception that escaped
    :func:`scrape` or the worker itself (the default) is fleet's side failing: infra, re-executed at most N times."""
    return {"status": "failed", "category": category,
            "error": f"source {spec['source']}: {what + ': ' if what else ''}{type(exc).__name__}: {exc}",
            "error_type": type(exc).__name__, "traceback": traceback.format_exc(), "rows": 0, "pages": 0}


def write_result(spec: dict, result: dict) -> None:
    tmp = Path(spec["result_path"] + ".tmp")
    tmp.write_text(json.dumps(result, default=str))
    os.replace(tmp, spec["result_path"])


def main(argv: list[str], forked: bool = False) -> int:
    _die_with_parent()
    spec = json.loads(Path(argv[1]).read_text())
    if forked:  # drop the step process's handlers (Dagster's among them): this process logs to its stderr only
        for logger in list(logging.Logger.manager.loggerDict.values()):
            if isinstance(logger, logging.Logger):
                logger.handlers.clear()
                logger.propagate = True
                logger.disabled = False
                logger.setLevel(logging.NOTSET)
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
