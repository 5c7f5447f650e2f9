"""What an attempt amounts to: its ``Outcome`` (status and category), its evidence, and its raw artifact built
from the rows of every attempt of the week, each with its provenance (fleet/storage/provenance.py), stored under
the attempt's own keys."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from fleet.errors import BadRowError
from fleet.engine.evidence import TRACE
from fleet.engine.spec import Attempt
from fleet.scraping.discovery import Source
from fleet.engine.supervise import Supervised
from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.frames import build_frame, read_spool
from fleet.quality import structure
from fleet.storage.store import ArtifactStore


@dataclasses.dataclass
class Outcome:
    source: str
    week: str
    status: str                 # ok | empty | partial | failed | timeout | refused | quarantined
    category: str | None        # None | source | infra | refused | quarantined
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
    forced: str | None = None   # the date a past week was scraped on under the run tag fleet/force=true
    key: list | None = None     # the source's natural key, for the week-over-week changes (fleet/publish/changes.py)
    domains: dict = dataclasses.field(default_factory=dict)  # per domain: requests, 429s, waits, bounds, robots.txt

    @property
    def succeeded(self) -> bool:
        return self.status in keys.USABLE_STATUSES

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def failed(store: ArtifactStore, source: str, week: str, run_id: str, error: str, category: str,
           status: str = "failed") -> Outcome:
    """An attempt that ended before a process ran it (or was refused one): stored as the source's outcome."""
    out = Outcome(source=source, week=week, status=status, category=category, error=error, run_id=run_id,
                  attempt=keys.new_attempt_id())
    keys.write_outcome(store, week, out.to_json())
    return out


def clear_evidence(evidence_dir: Path) -> None:
    """An attempt starts with no evidence: a screenshot, page or error of an earlier attempt of the week would
    look like this one's (an attempt killed at its limit cannot take a screenshot of its own)."""
    if evidence_dir.is_dir():
        for p in evidence_dir.iterdir():
            if p.is_file():
                p.unlink()


def merge_attempt_rows(source: Source, spool_dir: Path) -> list[dict]:
    """Rows of every attempt this week, oldest first (attempt ids sort by start, on any host: the files' times
    are those of their download); a later attempt's row replaces an earlier one with the same key."""
    merged: dict[tuple, dict] = {}
    for spool in sorted(spool_dir.glob("rows-*.jsonl")):
        for row in read_spool(spool):
            merged[tuple(row.get(c) for c in source.key)] = row
    return list(merged.values())


def classify(source: Source, attempt: Attempt, seen: Supervised, *, timeout: float, startup_s: float) -> dict:
    """The attempt's result: its process's own report, or what the step saw when the process could not report
    (killed at the limit: source; no browser in time, or died: infra)."""
    result = attempt.result()
    if seen.timed_out:
        from fleet.engine.attempt import IMPORTING  # the phase the attempt process wrote into its ready file

        ready = attempt.path("ready_path")
        phase = ready.read_text().splitlines()[1:2] if ready.exists() else []
        doing = (f"its module {source.module_path} did not finish importing"
                 if phase and phase[0].startswith(IMPORTING) else "timed out")
        return {**(result or {}), "status": "timeout", "category": "source",
                "error": f"source {source.name}: {doing} after {seen.seconds:.1f}s (limit {timeout:g}s); "
                         f"its attempt process and browser were killed"}
    if result and result.get("status") == "timeout":  # the process stopped the scraper itself, before the limit
        return {**result, "category": "source",
                "error": f"source {source.name}: timed out at fleet's soft deadline after {seen.seconds:.1f}s "
                         f"(limit {timeout:g}s, less a grace to save evidence); its attempt process stopped it"}
    if seen.startup_failed:
        return {"status": "failed", "category": "infra",
                "error": f"source {source.name}: the browser did not start within {startup_s:g}s"}
    if result is None:
        return {"status": "failed", "category": "infra",
                "error": f"source {source.name}: the attempt process died without reporting ({seen.exit_reason})"}
    return result


def finish(source: Source, week: str, store: ArtifactStore, run_id: str, attempt: str, deep: bool, work: Path,
           result: dict, seconds: float, forced: str | None = None) -> Outcome:
    """Turn an attempt's result into its outcome; keep its rows (merged with earlier attempts') as the raw artifact."""
    progress = work / f"last_url-{attempt}.txt"  # this attempt's: an earlier attempt's URL is not where it is
    last_url = progress.read_text() if progress.exists() else None
    out = Outcome(source=source.name, week=week, status=result["status"], category=result.get("category"),
                  pages=result.get("pages", 0), error=result.get("error"), url=result.get("url") or last_url,
                  evidence=result.get("evidence") or {}, seconds=seconds, run_id=run_id, attempt=attempt, deep=deep,
                  forced=forced, key=list(source.key) or None, domains=result.get("domains") or {})
    stack = work / f"stack-{attempt}.txt"
    if out.status == "timeout":
        evidence_dir = store.local_dir(week, keys.evidence_key(source.name))
        evidence_dir.mkdir(parents=True, exist_ok=True)
        text = out.error + f"\nlast URL: {out.url or 'unknown (no ctx.goto in this attempt)'}"
        dump = stack.read_text(errors="replace").strip() if stack.exists() else ""
        if dump:
            text += f"\n\nPython stacks of the attempt process at its limit (faulthandler):\n{dump}\n"
            (evidence_dir / "stack.txt").write_text(dump + "\n")
            out.evidence = {**out.evidence, "stack": str(evidence_dir / "stack.txt")}
        (evidence_dir / "error.txt").write_text(text)
        out.evidence = {**out.evidence, "error": str(evidence_dir / "error.txt")}
    stack.unlink(missing_ok=True)
    out.evidence = store.save_evidence(week, keys.evidence_key(source.name), attempt, out.evidence)
    # what a rerun on another host resumes from, kept before the outcome that may send one there
    store.save_work(week, keys.spool_key(source.name), {
        f"rows-{attempt}.jsonl": work / f"rows-{attempt}.jsonl", f"checkpoint-{attempt}.json": work / "checkpoint.json",
        f"seen-{attempt}.txt": work / "seen.txt", f"output-{attempt}.log": work / f"output-{attempt}.log"})

    if out.status in ("ok", "empty", "timeout"):
        rows = merge_attempt_rows(source, work)
        if out.status == "timeout" and rows:
            out.status = "partial"  # rows collected before the timeout are kept and committed
        if out.status != "timeout":
            try:
                rows, stamps = provenance.split(rows, source.key)
                frame = provenance.attach(build_frame(source.name, source.schema, source.key, rows), source.key, stamps)
            except BadRowError as exc:
                out.status, out.category, out.error = "failed", "source", str(exc)
            else:
                # under this attempt's own key: a later failed attempt leaves them in place (consolidation still
                # takes them, by their outcome), and a late write of an earlier attempt never replaces them
                store.write_parquet(week, keys.raw_key(source.name, attempt), frame)
                structure.keep(store, week, source.name, work / f"structure-{attempt}.json")
                out.rows = frame.height
                if out.status in ("ok", "empty"):  # of the week's merged rows, not of this attempt's alone
                    out.status = "ok" if frame.height else "empty"
    keys.write_outcome(store, week, out.to_json())
    return out


def settle_trace(store: ArtifactStore, week: str, out: Outcome, held: bool) -> dict:
    """The trace a successful attempt left in the work folder (``judge_trace``): kept as its evidence, and named in
    its stored outcome, when the quality gate holds its rows out (``held``), else deleted. Returns the evidence."""
    pending = store.local_dir(week, keys.spool_key(out.source)) / f"trace-{out.attempt}.zip"
    if not pending.is_file() or not held:
        pending.unlink(missing_ok=True)
        return out.evidence
    folder = store.local_dir(week, keys.evidence_key(out.source))
    folder.mkdir(parents=True, exist_ok=True)
    os.replace(pending, folder / TRACE)
    out.evidence = store.save_evidence(week, keys.evidence_key(out.source), out.attempt,
                                       {**out.evidence, "trace": str(folder / TRACE)})
    keys.write_outcome(store, week, out.to_json())
    return out.evidence
