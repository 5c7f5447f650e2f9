"""Run one source for one week in a worker process, with a hard timeout, and store its raw artifact.

This is the isolation boundary: whatever the scraper does (raise, hang in asyncio, block in C, crash the
browser), the caller gets an ``Outcome`` back within ``timeout_s`` plus a few seconds. The worker is a warm one
from the pool (fleet/scraping/pool.py), or, for ``own_process`` scrapers and ``FLEET_WORKERS=fresh``, one
forked for this attempt alone. Either way, at the limit it is killed with its browser.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from fleet.config import browser_startup_s, chromium_path, settings, worker_start
from fleet.errors import BadRowError, FleetError, ScraperDefinitionError
from fleet.scraping import browser as shared_browser
from fleet.scraping import pool
from fleet.scraping.contract import check_seconds
from fleet.scraping.discovery import Source
from fleet.scraping.procs import PolledProcess, alive, group_members, kill_pids, kill_tree, sweep_tmp
from fleet.scraping.retry import RetryPolicy
from fleet.scraping.slots import scrape_slot
from fleet.storage import store as keys
from fleet.storage.frames import build_frame, read_spool
from fleet.storage.store import ArtifactStore

# An attempt's output lines logged to the run (each one an event); the rest go to output-ATTEMPT.log by its rows.
MAX_LOG_LINES = 500
MAX_LINE_CHARS = 2000


@dataclasses.dataclass
class Outcome:
    source: str
    week: str
    status: str                 # ok | empty | partial | failed | timeout
    category: str | None        # None | source | infra
    rows: int = 0
    seconds: float = 0.0
    pages: int = 0
    error: str | None = None
    url: str | None = None
    evidence: dict = dataclasses.field(default_factory=dict)
    run_id: str | None = None
    attempt: str | None = None
    reused: bool = False
    deep: bool = False

    @property
    def succeeded(self) -> bool:
        return self.status in keys.USABLE_STATUSES

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def kill_worker(proc) -> None:
    """SIGKILL the worker with its browser and driver (:func:`fleet.scraping.procs.kill_tree`), and reap it."""
    kill_tree(proc.pid)
    proc.wait()


class ForkedWorker(PolledProcess):
    """A worker forked from this process, with the subset of ``subprocess.Popen`` the runner uses.

    A Dagster step process forks from a server that has already imported fleet, Playwright and the scraper
    modules (fleet/defs/warm.py). Forking it again starts the worker with all of that in memory. A fresh
    interpreter would cost about 0.6 CPU-s more per source. The child gets a session of its own, stdin and
    stdout on /dev/null, and stderr on a pipe back to this process. It runs :func:`fleet.scraping.worker.main`
    and leaves with ``os._exit``, so nothing of the step's state (database connections, Dagster's log
    handlers, atexit hooks) runs in the child.
    """

    def __init__(self, spec_path: Path):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 70
            try:
                os.close(read_fd)
                os.setsid()
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(write_fd, 2)
                os.close(null)
                os.close(write_fd)
                sys.stdin = open(0, closefd=False)
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", buffering=1, closefd=False)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
                    signal.signal(sig, signal.SIG_DFL)
                from fleet.scraping import worker
                code = worker.main(["fleet.scraping.worker", str(spec_path)], forked=True)
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(write_fd)
        self.pid = pid
        self.returncode: int | None = None
        self.stderr = os.fdopen(read_fd, "r", errors="replace")

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


# Threads a Dagster step process runs beside its main thread: the feeder of its event queue to the run
# process, and its termination watcher. A lock one of them holds at the moment of a fork stays held in the
# child, but the worker never touches their queue or event; the locks it does use (imports, logging) are
# reinitialised by CPython in a forked child.
FORK_SAFE_THREADS = frozenset({"QueueFeederThread", "termination-handler"})


def can_fork() -> bool:
    """Fork from the main thread when every other thread is a known one (above); otherwise (an unknown thread
    may hold any lock) start a fresh interpreter. ``FLEET_WORKER_START=spawn`` always does."""
    if worker_start() != "fork" or threading.current_thread() is not threading.main_thread():
        return False
    return all(t.name in FORK_SAFE_THREADS for t in threading.enumerate() if t is not threading.main_thread())


def start_worker(spec_path: Path):
    if can_fork():
        return ForkedWorker(spec_path)
    return subprocess.Popen([sys.executable, "-m", "fleet.scraping.worker", str(spec_path)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)


# In a source's work folder for the week: an attempt of it saw the shared browser die (fleet/scraping/browser.py).
SHARED_BROWSER_DIED = "shared-browser-died"


def merge_attempt_rows(source: Source, spool_dir: Path) -> list[dict]:
    """Rows of every attempt this week, oldest first; a later attempt's row replaces an earlier one with the same key."""
    merged: dict[tuple, dict] = {}
    for spool in sorted(spool_dir.glob("rows-*.jsonl"), key=lambda p: p.stat().st_mtime_ns):
        for row in read_spool(spool):
            merged[tuple(row.get(c) for c in source.key)] = row
    return list(merged.values())


def run_source(source: Source, week: str, *, store: ArtifactStore, run_id: str, deep: bool = False,
               timeout_s: float | None = None, retry: dict | None = None, refresh: bool = False,
               reexecution: bool = False, log=None) -> Outcome:
    """Scrape ``source`` for ``week`` (reusing a stored complete artifact unless ``refresh``), store and return its outcome.

    ``refresh`` also clears the source's work for the week (checkpoint, seen URLs, spooled rows), once: not on a
    ``reexecution``, the re-execution of a crashed attempt of the same request (Dagster's retry of the step, a
    rerun run), which resumes from what the crashed attempt left, as any re-execution does."""
    log_line = (log.info if log else (lambda *a: None))
    previous = keys.stored_complete(store, week, source.name, deep=deep)
    if not refresh and previous is not None:
        out = Outcome(**{**previous, "reused": True, "run_id": run_id})
        log_line(f"[run {run_id}] [{source.name}] week {week} already scraped ({out.rows} rows); reusing the stored artifact")
        return out

    work = store.workdir(week, keys.spool_key(source.name))
    if refresh and not reexecution:
        log_line(f"[run {run_id}] [{source.name}] refresh: clearing this week's checkpoint and spooled rows")
        for p in work.iterdir():
            p.unlink()
    clear_evidence(store.path(week, keys.evidence_key(source.name)))
    if source.broken:
        out = Outcome(source=source.name, week=week, status="failed", category="source", error=source.error,
                      run_id=run_id)
        store.write_json(week, keys.outcome_key(source.name), out.to_json())
        return out

    try:  # the run's own settings (RawConfig, from the UI or a schedule): refused before a worker is taken
        timeout = (check_seconds(source.name, "timeout_s (run config)", timeout_s) if timeout_s is not None
                   else float(source.timeout_s))
        RetryPolicy(**(retry or {}))
    except (ScraperDefinitionError, ValueError, TypeError) as exc:
        msg = str(exc) if isinstance(exc, ScraperDefinitionError) else f"source {source.name}: {exc}"
        out = Outcome(source=source.name, week=week, status="failed", category="source", error=msg, run_id=run_id)
        store.write_json(week, keys.outcome_key(source.name), out.to_json())
        return out

    s = settings()
    startup_limit = browser_startup_s()  # FLEET_BROWSER_STARTUP_S
    attempt = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    spec = {
        "source": source.name, "module_path": str(source.module_path), "class_name": source.class_name,
        "week": week, "run_id": run_id, "deep": deep, "timeout_s": timeout, "retry": retry or {},
        "chromium": chromium_path(), "work_dir": str(work),
        "spool_path": str(work / f"rows-{attempt}.jsonl"),
        "result_path": str(work / f"result-{attempt}.json"),
        "ready_path": str(work / f"ready-{attempt}"),
        "progress_path": str(work / f"last_url-{attempt}.txt"),
        "stack_path": str(work / f"stack-{attempt}.txt"),
        "evidence_dir": str(store.path(week, keys.evidence_key(source.name))),
        "node_cache": str(s.home / "cache" / "node"),
        "tmp_root": str(pool.tmp_root(s.home / "workers")),
        "step_pid": os.getpid(),
    }
    # A source whose attempt saw the shared browser die gets browsers of its own for the rest of the week: if it
    # killed that browser, it kills only its own from now on, so each other source loses one attempt at most.
    shared = not source.own_browser and s.browser == "shared" and not (work / SHARED_BROWSER_DIED).exists()
    warm = not source.own_process and s.workers == "warm"
    spec_path = work / f"spec-{attempt}.json"
    browser_dir = None
    start_error = None
    # Only the part that holds a worker and its browser counts against FLEET_MAX_PARALLEL: the step's start-up,
    # and its frame, checks and events after this, run outside it (fleet/scraping/slots.py).
    # An attempt that resumes a crashed one (its rows are spooled here) takes the next free slot before others.
    resuming = any(work.glob("rows-*.jsonl"))
    with scrape_slot(s.slots_dir, s.max_parallel, resuming=resuming) as waited:
        if waited >= 1:
            log_line(f"[run {run_id}] [{source.name}] waited {waited:.1f}s for a scrape slot "
                     f"(FLEET_MAX_PARALLEL={s.max_parallel})")
        if warm:
            spec_path.write_text(json.dumps(spec))
            started = time.monotonic()
            try:
                proc = pool.lease(s.home / "workers" / ("shared" if shared else "own"), chromium=spec["chromium"],
                                  browser_dir=s.browser_dir if shared else None, node_cache=spec["node_cache"],
                                  startup_limit=startup_limit)
            except pool.WorkerStartError as exc:
                proc, start_error = None, str(exc)
            else:
                try:
                    proc.start(spec_path, dict(os.environ), os.getcwd())  # a warm worker takes on this step's world
                except OSError as exc:
                    proc.release()
                    proc, start_error = None, f"warm worker {proc.pid} went away before it took the source ({exc})"
                else:
                    started = time.monotonic()
                    how = "a new warm worker" if proc.new else f"warm, its source no. {proc.served + 1}"
        else:
            if shared:
                browser_dir = s.browser_dir
                try:
                    spec["shared_endpoint"] = shared_browser.acquire(browser_dir, spec["chromium"])
                except FleetError as exc:  # a browser of its own is slower, not wrong
                    log_line(f"[run {run_id}] [{source.name}] no shared browser ({exc}); launching one for this source")
                    browser_dir, shared = None, False
            try:
                spec_path.write_text(json.dumps(spec))
                started = time.monotonic()
                proc = start_worker(spec_path)
            except BaseException:
                if browser_dir is not None:
                    shared_browser.release(browser_dir)
                raise
            how = "forked from the step" if isinstance(proc, ForkedWorker) else "new interpreter"
        if proc is None:
            result = {"status": "failed", "category": "infra", "error": f"source {source.name}: {start_error}"}
            log_line(f"[run {run_id}] [{source.name}] {result['error']}")
            return _finish(source, week, store, run_id, attempt, deep, work, result, 0.0)

        try:
            log_line(f"[run {run_id}] [{source.name}] worker {proc.pid} started "
                     f"({how}, {'context in the shared browser' if shared else 'browser of its own'}; "
                     f"limit {timeout:g}s)")
            watched = shared_browser.chromium_pid(s.browser_dir) if shared else None  # the one its worker is on

            output_path = work / f"output-{attempt}.log"

            def pump():
                # Each line becomes an event in the run's log (~1 ms each, and the worker waits on its pipe meanwhile):
                # a scraper printing 20,000 lines used up 18 s of its 20 s limit. Past MAX_LOG_LINES, or
                # MAX_LINE_CHARS, the attempt's output goes whole to a file next to its rows instead.
                shown, overflow = 0, None
                try:
                    for line in proc.stderr:
                        line = line.rstrip()
                        if not line:
                            continue
                        if shown >= MAX_LOG_LINES or len(line) > MAX_LINE_CHARS:
                            if overflow is None:
                                overflow = open(output_path, "a", encoding="utf-8", errors="replace")
                            overflow.write(line + "\n")
                            if shown >= MAX_LOG_LINES:
                                continue
                            line = (f"{line[:MAX_LINE_CHARS]} ... ({len(line) - MAX_LINE_CHARS} more characters "
                                    f"in {output_path})")
                        shown += 1
                        log_line(line if line.startswith("[run ") else f"[run {run_id}] [{source.name}] {line}")
                        if shown == MAX_LOG_LINES:
                            log_line(f"[run {run_id}] [{source.name}] {MAX_LOG_LINES} lines of output logged; the "
                                     f"rest of this attempt's output goes to {output_path}")
                finally:
                    if overflow is not None:
                        overflow.close()

            pump_thread = threading.Thread(target=pump, daemon=True)
            pump_thread.start()
            timed_out = startup_failed = False
            ready_path = Path(spec["ready_path"])
            ready_at = None
            try:
                # The limit runs from the moment the browser is up; start-up itself has its own, generous limit.
                while proc.poll() is None:
                    now = time.monotonic()
                    if ready_at is None and ready_path.exists():
                        ready_at = now
                    if ready_at is None and now - started > startup_limit:
                        startup_failed = True
                        break
                    if ready_at is not None and now - ready_at > timeout:
                        timed_out = True
                        dump_stack(proc, Path(spec["stack_path"]))  # what it is stuck in, before it is killed
                        break
                    # Until the worker is ready, look for its ready file every 50 ms; after that, nothing is left to
                    # watch but its end and the limit, so wait for whichever comes first (a lease's wait ends the
                    # moment its worker reports): a step made ~200 of these passes for a 10 s source, 20 ms of CPU.
                    wait_s = (READY_POLL_S if ready_at is None
                              else min(ready_at + timeout - now + 0.01, SUPERVISE_WAIT_S))
                    try:
                        proc.wait(timeout=max(wait_s, 0.01))
                    except subprocess.TimeoutExpired:
                        pass
            finally:
                if proc.poll() is None:
                    kill_worker(proc)
                # before the lease goes: a shared browser with no lease left may stop when idle, which is no crash
                watched_gone = watched is not None and not alive(watched)
                if browser_dir is not None:
                    shared_browser.release(browser_dir)
                    browser_dir = None  # given back: the finally below has nothing left to give
            # the clean-up below is fleet's, not the source's
            seconds = round(time.monotonic() - (ready_at or started), 3)
            if not isinstance(proc, pool.Lease):  # reaped by now; a killed one's browser profile is left behind
                left = group_members(proc.pid)  # its session's group: what a scraper started and left running
                if left:
                    kill_pids(left)
                    log_line(f"[run {run_id}] [{source.name}] the scraper left process(es) {', '.join(map(str, left))} "
                             f"running after its worker ended; killed")
                sweep_tmp(Path(spec["tmp_root"]), killed=(proc.pid,))
            pump_thread.join(timeout=2)
        finally:  # whatever went wrong on the way, the step gives back what it took: a host runs the next step
            if isinstance(proc, pool.Lease):
                proc.release()
            if browser_dir is not None:
                shared_browser.release(browser_dir)

    result_path = Path(spec["result_path"])
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    # The worker says so; or it did not finish cleanly and the browser it was on is gone (a worker that dies with
    # the browser it killed reports nothing).
    if shared and ((result or {}).get("browser_died") or (
            watched_gone and (result or {}).get("status") not in ("ok", "empty"))):
        (work / SHARED_BROWSER_DIED).write_text(f"{run_id} {attempt}\n")
        log_line(f"[run {run_id}] [{source.name}] the shared browser died under this attempt; this source gets a "
                 f"browser of its own for the rest of week {week}")
    if timed_out:
        from fleet.scraping.worker import IMPORTING  # the phase the worker wrote into its ready file

        phase = ready_path.read_text().splitlines()[1:2] if ready_path.exists() else []
        doing = (f"its module {source.module_path} did not finish importing"
                 if phase and phase[0].startswith(IMPORTING) else "timed out")
        result = {**(result or {}), "status": "timeout", "category": "source",
                  "error": f"source {source.name}: {doing} after {seconds:.1f}s (limit {timeout:g}s); "
                           + ("its worker was killed, and its contexts in the shared browser closed" if shared
                              else "its worker and browser were killed")}
    elif result and result.get("status") == "timeout":  # the worker stopped the scraper itself, before the limit
        result = {**result, "category": "source",
                  "error": f"source {source.name}: timed out at fleet's soft deadline after {seconds:.1f}s "
                           f"(limit {timeout:g}s, less a grace to save evidence); its worker stopped it"}
    elif startup_failed:
        result = {"status": "failed", "category": "infra",
                  "error": f"source {source.name}: the browser did not start within {startup_limit:g}s"}
    elif result is None:
        result = {"status": "failed", "category": "infra",
                  "error": f"source {source.name}: the scrape worker died without reporting ({_exit_reason(proc)})"}
    return _finish(source, week, store, run_id, attempt, deep, work, result, seconds)


def clear_evidence(evidence_dir: Path) -> None:
    """An attempt starts with no evidence: a screenshot, page or error of an earlier attempt of the week would
    look like this one's (an attempt killed at its limit cannot take a screenshot of its own)."""
    if evidence_dir.is_dir():
        for p in evidence_dir.iterdir():
            if p.is_file():
                p.unlink()


DUMP_WAIT_S = 1.0
READY_POLL_S = 0.05  # how often a step looks for its worker's ready file
SUPERVISE_WAIT_S = 1.0  # the longest a step's wait on a ready worker lasts before it looks at the clock again


def dump_stack(proc, stack_path: Path) -> None:
    """Ask a worker at its hard limit for the Python stacks of its threads (SIGUSR1: the worker registers
    faulthandler for it while its source runs, fleet/scraping/worker.py), and wait up to ``DUMP_WAIT_S`` for them.
    faulthandler writes from its signal handler, so this works while the scraper blocks its event loop."""
    try:
        os.kill(proc.pid, signal.SIGUSR1)
    except OSError:
        return
    deadline, size = time.monotonic() + DUMP_WAIT_S, -1
    while time.monotonic() < deadline and proc.poll() is None:
        now = stack_path.stat().st_size if stack_path.exists() else 0
        if now and now == size:  # written, and no longer growing
            return
        size = now
        time.sleep(0.05)


def _exit_reason(proc) -> str:
    if isinstance(proc, pool.Lease):
        return proc.exit_reason()
    code = proc.returncode
    return f"killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"


def _finish(source: Source, week: str, store: ArtifactStore, run_id: str, attempt: str, deep: bool, work: Path,
            result: dict, seconds: float) -> Outcome:
    """Turn an attempt's result into its outcome; keep its rows (merged with earlier attempts') as the raw artifact."""
    progress = work / f"last_url-{attempt}.txt"  # this attempt's: an earlier attempt's URL is not where it is
    last_url = progress.read_text() if progress.exists() else None
    out = Outcome(source=source.name, week=week, status=result["status"], category=result.get("category"),
                  pages=result.get("pages", 0), error=result.get("error"), url=result.get("url") or last_url,
                  evidence=result.get("evidence") or {}, seconds=seconds, run_id=run_id, attempt=attempt, deep=deep)
    stack = work / f"stack-{attempt}.txt"
    if out.status == "timeout":
        evidence_dir = store.path(week, keys.evidence_key(source.name))
        evidence_dir.mkdir(parents=True, exist_ok=True)
        text = out.error + f"\nlast URL: {out.url or 'unknown (no ctx.goto in this attempt)'}"
        dump = stack.read_text(errors="replace").strip() if stack.exists() else ""
        if dump:
            text += f"\n\nPython stacks of the worker at its limit (faulthandler):\n{dump}\n"
            (evidence_dir / "stack.txt").write_text(dump + "\n")
            out.evidence = {**out.evidence, "stack": str(evidence_dir / "stack.txt")}
        (evidence_dir / "error.txt").write_text(text)
        out.evidence = {**out.evidence, "error": str(evidence_dir / "error.txt")}
    stack.unlink(missing_ok=True)

    if out.status in ("ok", "empty", "timeout"):
        rows = merge_attempt_rows(source, work)
        if out.status == "timeout" and rows:
            out.status = "partial"  # rows collected before the timeout are kept and committed
        if out.status != "timeout":
            try:
                cls = source.load_class()
                frame = build_frame(source.name, cls.schema, tuple(cls.key), rows)
            except BadRowError as exc:
                out.status, out.category, out.error = "failed", "source", str(exc)
            else:
                store.write_parquet(week, keys.raw_key(source.name), frame)
                out.rows = frame.height
                if out.status in ("ok", "empty"):  # of the week's merged rows, not of this attempt's alone
                    out.status = "ok" if frame.height else "empty"
                # what a later failed attempt leaves in place: consolidation still has these rows and their outcome
                store.write_json(week, keys.good_outcome_key(source.name), out.to_json())
    store.write_json(week, keys.outcome_key(source.name), out.to_json())
    return out
