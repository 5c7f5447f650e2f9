"""An attempt's own Chromium: launched through Playwright under an exit recorder (so a close on request is told
from a crash), and its processes watched for the helpers every page depends on: its zygotes (which start every
renderer) and its network service. Chromium outlives the loss of either: it restarts a network service and goes
on without a zygote, so neither its "disconnected" nor a page's "crash" fires. What the page sees is its next
request or its next renderer failing (``net::ERR_ABORTED``, "Target crashed"), which a site can also cause: only
the process being gone tells the two apart."""
from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path

from playwright.async_api import async_playwright

from fleet import config
from fleet.config import CHROMIUM_ARGS, chromium_sandbox
from fleet.engine.procs import _start_time, descendants, group_members, stat_fields

# How long a Playwright error waits for the browser's own word (its "disconnected" event, the page's "crash", the
# exit status of a Chromium that ended) before it counts as the scraper's: they can come just after the error.
GONE_EVENT_WAIT_S = 2.0



# Chromium runs under this script, so that how it ended is known: Playwright's driver is its parent and reaps
# it, and a browser closed on request (exit status 0) and one that crashed or was killed both only
# "disconnect". A scraper can reach the browser (page.context.browser) and close it: that is its bug, not a crash.
EXIT_RECORDER = """#!/bin/sh
{chromium} "$@"
status=$?
echo "$status" > {exit_path}
exit "$status"
"""


class OwnBrowser:
    """The process's Chromium, launched through Playwright, and the file its exit status is written to."""

    def __init__(self, browser, exit_path: Path, launcher: Path | None = None):
        self.browser, self.exit_path, self.launcher = browser, exit_path, launcher
        self._group: int | None = None
        self._helpers: dict = {}  # its zygotes and network service when the current source started

    def is_connected(self) -> bool:
        return self.browser.is_connected()

    def watch(self) -> list[str]:
        """What the browser lost since the last call, then note the helpers it has now."""
        gone = self.lost()
        if self._group is None and self.launcher is not None:
            self._group = recorder_of(self.launcher)
        self._helpers = helpers(self._group)
        return gone

    def lost(self) -> list[str]:
        """The helpers noted by :meth:`watch` that are gone: a killed or crashed process of this browser."""
        return lost(self._helpers)

    async def closed_on_request(self) -> bool:
        """Whether Chromium, now gone, exited cleanly: something closed it with ``browser.close()``. Killed or
        crashed, it leaves another status, or none (its recorder was killed with it)."""
        deadline = time.monotonic() + GONE_EVENT_WAIT_S
        while not self.exit_path.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        try:
            return self.exit_path.read_text().strip() == "0"
        except OSError:
            return False


@contextlib.asynccontextmanager
async def open_browser(chromium: str, node_cache: str | None = None):
    """Playwright's driver and a Chromium of this process's own (an :class:`OwnBrowser`), for the ``async with``."""
    if node_cache:
        # Node keeps the driver's compiled code here between processes (Node >= 22): part of every driver start
        config.export(overwrite=False, NODE_COMPILE_CACHE=node_cache)
    folder = Path(tempfile.mkdtemp(prefix="fleet-browser-"))  # in the process's private TMPDIR
    try:
        recorder = folder / "chromium"
        recorder.write_text(EXIT_RECORDER.format(chromium=shlex.quote(chromium),
                                                 exit_path=shlex.quote(str(folder / "exit-status"))))
        recorder.chmod(0o700)
        async with async_playwright() as pw:
            # Chromium's own sandbox when fleet/engine/sandbox.py found it possible (never as root)
            browser = await pw.chromium.launch(executable_path=str(recorder), headless=True, args=list(CHROMIUM_ARGS),
                                               chromium_sandbox=chromium_sandbox())
            try:
                yield OwnBrowser(browser, folder / "exit-status", recorder)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(browser.close(), 10)
    finally:
        shutil.rmtree(folder, ignore_errors=True)



# what a helper's command line says (Chromium writes its switches into its title), and what it is called
HELPERS = ((b"--type=zygote", "zygote"), (b"--utility-sub-type=network.mojom.NetworkService", "network service"))


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def recorder_of(launcher: Path) -> int | None:
    """The exit recorder running the Chromium that ``launcher`` (its script, EXIT_RECORDER) started, among this
    process's descendants. Playwright starts it in a process group of its own, which holds the browser and all
    its helpers."""
    wanted = os.fsencode(str(launcher))
    for pid in descendants(os.getpid()):
        argv = _cmdline(pid).split(b"\0")
        if len(argv) > 1 and argv[1] == wanted:
            return pid
    return None


def helpers(group: int | None) -> dict[int, tuple[str, str | None]]:
    """The zygotes and network service in Chromium's process group ``group``: pid -> (what it is, its start
    time), the pair that names one process even after its pid is reused. A zygote's child keeps the zygote's
    title until it has become a renderer: a helper is the browser's child, never another helper's."""
    lines = {pid: _cmdline(pid) for pid in group_members(group)} if group else {}
    found = {}
    for pid, line in lines.items():
        parent = int((stat_fields(pid) or ["", "0"])[1])
        if b"--type=" in lines.get(parent, b"--type="):
            continue
        for marker, kind in HELPERS:
            if marker in line:
                found[pid] = (kind, _start_time(pid))
    return found


PF_EXITING = 0x4  # proc(5), field 9 (flags): the kernel's PF_EXITING, set as a process begins to exit


def lost(before: dict[int, tuple[str, str | None]]) -> list[str]:
    """Those of ``before`` (a :func:`helpers`) that are gone now: exiting, exited, a zombie, or their pid another
    process. A killed helper closes its sockets while it exits, before it is a zombie: the page's error can come
    in between, and the helper is gone by then (its ``PF_EXITING`` flag, set before the sockets close)."""
    def gone(pid, started):
        fields = stat_fields(pid)
        return (fields is None or fields[0] in ("Z", "X") or bool(int(fields[6]) & PF_EXITING)
                or _start_time(pid) != started)

    return [f"its {kind} (pid {pid})" for pid, (kind, started) in sorted(before.items()) if gone(pid, started)]
