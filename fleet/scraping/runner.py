"""Run one source for one week in its own worker process, with a hard timeout, and store its raw artifact.

This is the isolation boundary: whatever the scraper does (raise, hang in asyncio, block in C, crash the
browser), the caller gets an ``Outcome`` back within ``timeout_s`` plus a few seconds.
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

from fleet.config import chromium_path
from fleet.errors import BadRowError
from fleet.scraping.discovery import Source
from fleet.storage import store as keys
from fleet.storage.frames import build_frame, read_spool
from fleet.storage.store import ArtifactStore

OK_STATUSES = ("ok", "empty", "partial")
STARTUP_LIMIT_S = float(os.environ.get("FLEET_BROWSER_STARTUP_S", "90"))


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
        return self.status in OK_STATUSES

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the worker, its process group, and every descendant (Playwright starts Chromium in a group of its own)."""
    pids = _descendants(proc.pid)
    for sig_target in [proc.pid, *pids]:
        try:
            os.kill(sig_target, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def merge_attempt_rows(source: Source, spool_dir: Path) -> list[dict]:
    """Rows of every attempt this week, oldest first; a later attempt's row replaces an earlier one with the same key."""
    merged: dict[tuple, dict] = {}
    for spool in sorted(spool_dir.glob("rows-*.jsonl"), key=lambda p: p.stat().st_mtime_ns):
        for row in read_spool(spool):
            merged[tuple(row.get(c) for c in source.key)] = row
    return list(merged.values())


def run_source(source: Source, week: str, *, store: ArtifactStore, run_id: str, deep: bool = False,
               timeout_s: float | None = None, retry: dict | None = None, refresh: bool = False,
               log=None) -> Outcome:
    """Scrape ``source`` for ``week`` (reusing a stored complete artifact unless ``refresh``), store and return its outcome."""
    log_line = (log.info if log else (lambda *a: None))
    previous = store.read_json(week, keys.outcome_key(source.name))
    reusable = (previous and previous.get("status") in ("ok", "empty") and store.exists(week, keys.raw_key(source.name))
                and (previous.get("deep", False) or not deep))  # a shallow artifact does not answer a deep request
    if not refresh and reusable:
        out = Outcome(**{**previous, "reused": True, "run_id": run_id})
        log_line(f"[run {run_id}] [{source.name}] week {week} already scraped ({out.rows} rows); reusing the stored artifact")
        return out

    work = store.workdir(week, keys.spool_key(source.name))
    if refresh:
        for p in work.iterdir():
            p.unlink()
    if source.broken:
        out = Outcome(source=source.name, week=week, status="failed", category="source", error=source.error,
                      run_id=run_id)
        store.write_json(week, keys.outcome_key(source.name), out.to_json())
        return out

    timeout = float(timeout_s or source.timeout_s)
    attempt = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    spec = {
        "source": source.name, "module_path": str(source.module_path), "class_name": source.class_name,
        "week": week, "run_id": run_id, "deep": deep, "timeout_s": timeout, "retry": retry or {},
        "chromium": chromium_path(), "work_dir": str(work),
        "spool_path": str(work / f"rows-{attempt}.jsonl"),
        "result_path": str(work / f"result-{attempt}.json"),
        "ready_path": str(work / f"ready-{attempt}"),
        "evidence_dir": str(store.path(week, keys.evidence_key(source.name))),
    }
    spec_path = work / f"spec-{attempt}.json"
    spec_path.write_text(json.dumps(spec))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fleet.scraping.worker", str(spec_path)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)

    def pump():
        for line in proc.stderr:
            line = line.rstrip()
            if line:
                log_line(line if line.startswith("[run ") else f"[run {run_id}] [{source.name}] {line}")

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
            if ready_at is None and now - started > STARTUP_LIMIT_S:
                startup_failed = True
                break
            if ready_at is not None and now - ready_at > timeout:
                timed_out = True
                break
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    pump_thread.join(timeout=2)
    seconds = round(time.monotonic() - (ready_at or started), 3)

    result_path = Path(spec["result_path"])
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    last_url = (work / "last_url.txt").read_text() if (work / "last_url.txt").exists() else None
    if timed_out or (result and result.get("status") == "timeout"):
        result = {**(result or {}), "status": "timeout", "category": "source",
                  "error": f"source {source.name}: timed out after {seconds:.1f}s (limit {timeout:g}s); "
                           f"its worker and browser were killed"}
    elif startup_failed:
        result = {"status": "failed", "category": "infra",
                  "error": f"source {source.name}: the browser did not start within {STARTUP_LIMIT_S:g}s"}
    elif result is None:
        code = proc.returncode
        why = f"killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
        result = {"status": "failed", "category": "infra",
                  "error": f"source {source.name}: the scrape worker died without reporting ({why})"}

    out = Outcome(source=source.name, week=week, status=result["status"], category=result.get("category"),
                  pages=result.get("pages", 0), error=result.get("error"), url=result.get("url") or last_url,
                  evidence=result.get("evidence") or {}, seconds=seconds, run_id=run_id, attempt=attempt, deep=deep)
    if out.status == "timeout":
        evidence_dir = store.path(week, keys.evidence_key(source.name))
        evidence_dir.mkdir(parents=True, exist_ok=True)
        (evidence_dir / "error.txt").write_text(out.error + (f"\nlast URL: {out.url}" if out.url else ""))

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
    store.write_json(week, keys.outcome_key(source.name), out.to_json())
    return out
