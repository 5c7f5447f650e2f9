"""One attempt of a source: its id, and the spec its attempt process reads (what to run, where its files go)."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from fleet import config
from fleet.engine import sandbox
from fleet.config import block_markers
from fleet.scraping.discovery import Source
from fleet.engine.pool import tmp_root
from fleet.engine.settings import EngineSettings
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore


@dataclasses.dataclass(frozen=True)
class Trial:
    """What `fleet test`, `record`, `new` and `canary` change about an attempt, which is otherwise the weekly run's:
    where the page's network comes from (live, recorded into ``record_har``, or replayed from ``replay_har``),
    settings for the scraper's process (``env``: a fixture's demo site), and stopping after ``first_rows``."""

    record_har: Path | None = None
    replay_har: Path | None = None
    env: dict = dataclasses.field(default_factory=dict)
    first_rows: int | None = None

    def spec(self) -> dict:
        return {"record_har": str(self.record_har or "") or None, "replay_har": str(self.replay_har or "") or None,
                "env": dict(self.env), "first_rows": self.first_rows}


@dataclasses.dataclass(frozen=True)
class Attempt:
    """An attempt's files live in the source's work folder for the week (host-local scratch), named after the
    attempt, next to the rows spooled by earlier attempts (what a re-execution resumes from, fetched from the store
    when they were spooled on another host: ``ArtifactStore.sync_down``)."""

    id: str
    work: Path
    spec: dict

    def path(self, key: str) -> Path:
        """One of the attempt's files named in its spec: ``ready_path``, ``result_path``, ``stack_path``, ..."""
        return Path(self.spec[key])

    def write_spec(self) -> Path:
        (path := self.work / f"spec-{self.id}.json").write_text(json.dumps(self.spec))
        return path

    def result(self) -> dict | None:
        """What the attempt process reported, if it lived to."""
        done = self.path("result_path")
        return json.loads(done.read_text()) if done.exists() else None


def new_attempt(source: Source, week: str, *, store: ArtifactStore, run_id: str, deep: bool, timeout: float,
                retry: dict | None, settings: EngineSettings, trial: Trial | None = None,
                judge_trace: bool = False) -> Attempt:
    """``judge_trace``: a successful attempt's trace is written to ``pending_trace`` for the quality gate to keep
    if it holds the rows out (outcome.settle_trace); else it is dropped (``FLEET_TRACE=always``: kept)."""
    attempt = keys.new_attempt_id()
    work = store.workdir(week, keys.spool_key(source.name))
    replay = bool(trial and trial.replay_har)
    spec = {
        "source": source.name, "module_path": str(source.module_path), "class_name": source.class_name,
        "week": week, "run_id": run_id, "deep": deep, "timeout_s": timeout, "retry": retry or {},
        "chromium": settings.chromium, "work_dir": str(work),
        "spool_path": str(work / f"rows-{attempt}.jsonl"),
        "result_path": str(work / f"result-{attempt}.json"),
        "ready_path": str(work / f"ready-{attempt}"),
        "progress_path": str(work / f"last_url-{attempt}.txt"),
        "stack_path": str(work / f"stack-{attempt}.txt"),
        "output_path": str(work / f"output-{attempt}.log"),
        "structure_path": str(work / f"structure-{attempt}.json"),
        "evidence_dir": str(store.local_dir(week, keys.evidence_key(source.name))),
        "trace": config.trace_mode(), "pending_trace": str(work / f"trace-{attempt}.zip") if judge_trace else None,
        "node_cache": str(settings.node_cache or ""),
        "tmp_root": str(tmp_root(settings.hosts_dir, sandbox.for_attempt(settings, source.module_path).uid)),
        "step_pid": os.getpid(),
        "block_markers": list(block_markers()),
        "politeness": {"root": str(settings.hosts_dir.parent / "politeness"), **config.politeness(), "week": week,
                       # a replay's pages are the recording's: no robots.txt is asked for (nor could be)
                       "obey_robots": source.obey_robots and not replay,
                       "robots_reason": "a replay of its fixture" if replay else source.obey_robots_reason},
        **(trial or Trial()).spec(),
    }
    return Attempt(id=attempt, work=work, spec=spec)
