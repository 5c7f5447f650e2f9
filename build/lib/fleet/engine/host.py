"""A browser host: one process with its own Chromium, serving the sources steps hand it, one at a time.

Started by fleet/engine/pool.py as ``python -m fleet.engine.host DIR ID CHROMIUM IDLE_S MAX_SOURCES
NODE_CACHE``. It stays for the next source only if this one finished cleanly (ok or empty, browser connected,
nothing left running), and leaves after MAX_SOURCES sources or IDLE_S seconds with nothing to do.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path

from fleet import config
from fleet.engine import attempt, pool
from fleet.scraping.discovery import module_name_for
from fleet.engine.pool import CONNECT_TIMEOUT_S, DONE, GREETING, tmp_root
from fleet.engine.procs import descendants, group_and_descendants, kill_pids, private_tmp, sweep_tmp, unix_address


def _retire_if_unclaimed(directory: Path, wid: str) -> bool:
    """Idle for long enough: leave, unless a step has just locked this host to use it."""
    if not (directory / f"{wid}.lock").exists():
        return True
    fd = pool.try_lock(directory, wid)
    if fd is None:
        return False
    pool.remove(directory, wid)
    os.close(fd)
    return True


def _abort(directory: Path, wid: str) -> None:
    """The step this source runs for is gone: so is the source, with this host, its driver and browser."""
    pool.remove(directory, wid)
    kill_pids(descendants(os.getpid()))
    os._exit(1)


def _playwright_task(task: asyncio.Task) -> bool:
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and f"{os.sep}playwright{os.sep}" in code.co_filename


def _left_behind(tasks_before: set, threads_before: set,
                 processes_before: dict[int, int]) -> tuple[list[str], dict[int, int]]:
    """Tasks, threads and processes a scraper started and did not finish: a reason not to reuse this process.
    The tasks are cancelled and the processes killed. The processes are this host's group and descendants
    (``procs.group_and_descendants``, pid -> process group) that were not there before the source: a scraper's
    children are in the group, or in a session of their own if it started them so (``start_new_session``), and
    are descendants either way. A new process in a group that was there before, other than the host's, is
    not the scraper's: the host's browser starts renderers in Chromium's group. Also returns what it found:
    when nothing was left behind, that is the next source's ``processes_before``."""
    current = asyncio.current_task()
    me = os.getpid()
    found = group_and_descendants(me)
    groups_before = set(processes_before.values()) - {me}
    processes = [pid for pid, group in found.items()
                 if pid != me and pid not in processes_before and (group == me or group not in groups_before)]
    names = {pid: _command(pid) for pid in processes}
    kill_pids(processes)
    tasks = [t for t in asyncio.all_tasks() if t is not current and t not in tasks_before and not t.done()
             and not _playwright_task(t)]
    for t in tasks:
        t.cancel()
    threads = [t for t in threading.enumerate()
               if t not in threads_before and not t.name.startswith("asyncio_") and t.is_alive()]
    return ([f"task {t.get_name()}" for t in tasks] + [f"thread {t.name}" for t in threads]
            + [f"process {pid} ({names[pid]}, now killed)" for pid in processes]), found


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120] or "?"
    except OSError:
        return "?"


async def _serve_one(conn: socket.socket, browser: attempt.OwnBrowser, served: int, cap: int, directory: Path,
                     wid: str, group: dict[int, int] | None = None) -> tuple[bool, dict[int, int] | None]:
    """One source on one connection: whether this host may take another, and its process group and
    descendants after this source (None if not known). ``group`` is that of the source before, if this host
    served one: a host is reused only when its source left no process behind, so that is unchanged since,
    and one scan of /proc per source does."""
    loop = asyncio.get_running_loop()
    conn.setblocking(True)
    conn.settimeout(CONNECT_TIMEOUT_S)
    try:
        conn.sendall(f"{GREETING} {os.getpid()} {served}\n".encode())
        with conn.makefile("r", encoding="utf-8") as reader:
            request = reader.readline().strip()
    except OSError:
        request = ""
    if not request:  # the step went away before asking for anything
        conn.close()
        return True, group
    conn.settimeout(None)
    out = conn.makefile("w", buffering=1, encoding="utf-8", errors="replace")
    request = json.loads(request)
    spec = json.loads(Path(request["spec"]).read_text())
    # The step's world, not the one of whichever step started this browser host.
    config.replace_env(request["env"])
    with contextlib.suppress(OSError):
        os.chdir(request["cwd"])
    sys.modules.pop(module_name_for(Path(spec["module_path"])), None)  # its code as it is now
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = out
    logging.basicConfig(level=logging.INFO, stream=out, format="%(message)s", force=True)

    def lifeline():
        try:
            data = conn.recv(1, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            _abort(directory, wid)

    tasks_before, threads_before = set(asyncio.all_tasks()), set(threading.enumerate())
    processes_before = group if group is not None else group_and_descendants(os.getpid())
    loop.add_reader(conn.fileno(), lifeline)
    stays = False
    try:
        try:
            result = await attempt.scrape(browser, spec)
        except Exception as exc:  # the module did not load, or the browser would not open a context
            result = attempt.failure_result(spec, exc)
        finally:
            loop.remove_reader(conn.fileno())
        attempt.write_result(spec, result)
        await asyncio.sleep(0)
        left, group = _left_behind(tasks_before, threads_before, processes_before)
        lost = browser.lost()  # a zygote or network service gone: the next source's pages would fail
        stays = (result.get("status") in ("ok", "empty") and browser.is_connected() and not left and not lost
                 and served + 1 < cap)
        if left:
            print(f"browser host {os.getpid()}: the scraper left {', '.join(left)} running; this browser host will not "
                  f"be reused", file=out)
        if lost:
            print(f"browser host {os.getpid()}: its browser lost {', '.join(lost)}; this browser host will not be "
                  f"reused", file=out)
        out.write(f"\n{DONE} {'reuse' if stays else 'retire'}\n")
        out.flush()
    finally:
        sys.stdout, sys.stderr = saved
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s", force=True)
        for closeable in (out, conn):
            with contextlib.suppress(OSError):
                closeable.close()
    return stays, group


async def _serve(directory: Path, wid: str, chromium: str, idle_s: float, cap: int, node_cache: str) -> None:
    loop = asyncio.get_running_loop()
    async with attempt.open_browser(chromium, node_cache) as browser:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = directory / f".{wid}.sock"
        tmp.unlink(missing_ok=True)
        with unix_address(tmp) as address:
            listener.bind(address)
        os.chmod(tmp, 0o600)  # only this user's steps may hand it work
        listener.listen(4)
        os.replace(tmp, directory / f"{wid}.sock")  # appears only once the browser is up
        listener.setblocking(False)
        served, idle_since, group = 0, time.monotonic(), None
        try:
            while browser.is_connected():
                try:
                    conn, _ = await asyncio.wait_for(loop.sock_accept(listener), timeout=1.0)
                except asyncio.TimeoutError:
                    if time.monotonic() - idle_since >= idle_s and _retire_if_unclaimed(directory, wid):
                        break
                    continue
                stays, group = await _serve_one(conn, browser, served, cap, directory, wid, group)
                if not stays:
                    break
                served += 1
                idle_since = time.monotonic()
        finally:
            listener.close()
            (directory / f"{wid}.sock").unlink(missing_ok=True)


def serve(directory: Path, wid: str, chromium: str, idle_s: float, cap: int, node_cache: str) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s", force=True)
    private_tmp(tmp_root(directory))  # before the driver starts: its browser's profile goes there
    try:
        asyncio.run(_serve(directory, wid, chromium, idle_s, cap, node_cache))
    finally:
        sweep_tmp(tmp_root(directory), killed=(os.getpid(),))  # its own: the browser is closed or gone
        (directory / f"{wid}.sock").unlink(missing_ok=True)
        (directory / f"{wid}.pid").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 7:
        sys.exit("usage: python -m fleet.engine.host DIR ID CHROMIUM IDLE_S MAX_SOURCES NODE_CACHE")
    sys.exit(serve(Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]))
