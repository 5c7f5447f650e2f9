"""Evidence of a failed attempt, taken in its attempt process: the page's HTML and screenshot, its Playwright trace
(``trace.zip``), and the Python stacks of the process's threads when the runner is about to kill it at its hard
limit."""
from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
import signal
import time
from pathlib import Path


def first_line(exc: BaseException) -> str:
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
        log.warning("could not stop the page's loading before saving evidence: %s", first_line(exc))


async def capture(page, evidence_dir: Path, log, budget_s: float) -> dict:
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
        # A full-page capture of a long page can take seconds on a loaded machine; the visible part is still
        # worth having.
        try:
            await page.screenshot(path=str(shot), full_page=True, timeout=budget_s * 600)
        except Exception as exc:
            log.warning("full-page screenshot failed (%s); keeping the visible part", first_line(exc))
            await page.screenshot(path=str(shot), timeout=budget_s * 400)
        return "screenshot", str(shot)

    for what, result in zip(("the page HTML", "a screenshot"),
                            await asyncio.gather(save_html(), save_screenshot(), return_exceptions=True)):
        if isinstance(result, BaseException):  # evidence is best effort; the failure itself is what matters
            log.warning("could not save %s: %s", what, first_line(result))
        else:
            out[result[0]] = result[1]
    try:
        out["page_url"] = page.url
    except Exception:
        pass
    return out


TRACE = "trace.zip"  # the attempt's Playwright trace, in its evidence folder: `fleet debug SOURCE --week W` opens it


async def start_trace(context, spec: dict, log) -> bool:
    """Record the attempt's Playwright trace (screenshots, DOM snapshots, network, the scraper's actions and their
    call log) unless ``FLEET_TRACE=off``. A trace that cannot start is logged; the attempt goes on without it."""
    if spec.get("trace", "failed") == "off":
        return False
    try:
        await asyncio.wait_for(context.tracing.start(screenshots=True, snapshots=True, sources=False), 10)
        return True
    except Exception as exc:
        log.warning("could not start the attempt's trace: %s", first_line(exc))
        return False


async def stop_trace(context, spec: dict, failed: bool, log, budget_s: float) -> str | None:
    """End the trace. Kept (its path returned) when the attempt failed or was blocked, in the evidence folder; on
    success too under ``FLEET_TRACE=always``, else written to ``pending_trace`` in the work folder for the quality
    gate to keep if it holds the rows out (outcome.settle_trace). Never raises: a trace that cannot be written is
    logged, and no half-written file is left under its name."""
    keep = failed or spec.get("trace") == "always"
    pending = spec.get("pending_trace")
    target = Path(spec["evidence_dir"]) / TRACE if keep else Path(pending) if pending else None
    part = target.with_name(f".{target.name}.part") if target else None
    if part is not None and budget_s < 1.0:  # the hard kill is near: a zip cut short would be worth nothing
        log.warning("no time left before the hard limit to save the attempt's trace")
        return None
    try:
        if part is None:
            await asyncio.wait_for(context.tracing.stop(), max(0.5, budget_s))
            return None
        part.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.wait_for(context.tracing.stop(path=str(part)), max(0.5, min(20.0, budget_s)))
        os.replace(part, target)
        return str(target) if keep else None
    except Exception as exc:
        log.warning("could not save the attempt's trace: %s", first_line(exc))
        if part is not None:
            with contextlib.suppress(OSError):
                part.unlink()
        return None


_stack_file = None


def dump_stacks_on_request(spec: dict) -> None:
    """Until the attempt ends, SIGUSR1 writes every thread's Python stack to ``spec["stack_path"]``: the runner
    sends it just before it kills this attempt process at the hard limit (a scraper blocking its event loop leaves no
    other trace of where it was). faulthandler writes from its C signal handler, so a blocked loop is no obstacle."""
    global _stack_file
    if spec.get("stack_path"):
        stop_dumping_stacks()
        # Between attempts (unregistered), a late SIGUSR1 is ignored instead of ending a browser host.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        _stack_file = open(spec["stack_path"], "w")
        faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True)


def stop_dumping_stacks() -> None:
    global _stack_file
    if _stack_file is not None:
        faulthandler.unregister(signal.SIGUSR1)
        _stack_file.close()
        _stack_file = None
