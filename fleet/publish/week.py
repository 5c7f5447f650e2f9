"""A week's two commits (raw, then processed) from the stored artifacts, through the LFS-safe commit loop."""
from __future__ import annotations

from fleet.config import Settings
from fleet.errors import FleetError
from fleet.publish.commit import CommitResult, DataRepo, commit_files, ensure_remote
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore

STAGE_FILES = {"raw": (keys.CONSOLIDATED_KEY, "raw.parquet"), "processed": (keys.PROCESSED_KEY, "processed.parquet")}


def commit_stage(s: Settings, store: ArtifactStore, week: str, stage: str, *, run_id: str, log=None) -> CommitResult:
    """Commit ``stage`` (raw | processed) of ``week``; the stored artifact is the source of truth."""
    if stage not in STAGE_FILES:
        raise FleetError(f"unknown stage {stage!r}: use raw or processed")
    key, filename = STAGE_FILES[stage]
    artifact = store.path(week, key)
    if not artifact.exists():
        raise FleetError(f"week {week}: no stored {stage} artifact at {artifact}; run the pipeline for this week first")
    summary = store.read_json(week, keys.CONSOLIDATED_META_KEY, {}) or {}
    included = summary.get("included", {})
    missing = summary.get("missing", {})
    subject = f"fleet: {stage} rows for week {week}"
    lines = [f"Week: {week}", f"Stage: {stage}", f"Run: {run_id}",
             f"Sources included ({len(included)}): " + (", ".join(f"{k} ({v} rows)" for k, v in sorted(included.items())) or "none")]
    if missing:
        lines.append(f"Sources missing ({len(missing)}): " + ", ".join(
            f"{k} ({v.get('status')}{', ' + v['category'] if v.get('category') else ''})" for k, v in sorted(missing.items())))
    repo = DataRepo.from_settings(s)
    ensure_remote(repo)
    result = commit_files(repo, {f"{week}/{filename}": artifact}, subject=subject, body="\n".join(lines),
                          idempotency_key=f"{week}:{stage}", key_with_content=True, log=log)
    store.write_json(week, keys.commit_key(stage), {"status": result.status, "sha": result.sha,
                                                   "attempts": result.attempts, "run_id": run_id})
    return result
