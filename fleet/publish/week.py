"""A week's two commits (raw, then processed) from the stored artifacts, through the LFS-safe commit loop; each
also commits the week's ``CHANGES.md`` (fleet/publish/changes.py)."""
from __future__ import annotations

from fleet.errors import FleetError
from fleet.publish import changes, message
from fleet.publish.commit import CommitResult, commit_files
from fleet.publish.datarepo import DataRepo, ensure_remote
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore

LANDED = ("committed", "up_to_date")
STAGE_FILES = {"raw": (keys.CONSOLIDATED_KEY, "raw.parquet"), "processed": (keys.PROCESSED_KEY, "processed.parquet")}


def commit_stage(repo: DataRepo, store: ArtifactStore, week: str, stage: str, *, run_id: str, log=None) -> CommitResult:
    """Commit ``stage`` (raw | processed) of ``week``; the stored artifact is the source of truth (staged from a
    local copy: itself for a local store, a download for a remote one)."""
    if stage not in STAGE_FILES:
        raise FleetError(f"unknown stage {stage!r}: use raw or processed")
    key, filename = STAGE_FILES[stage]
    if not store.exists(week, key):
        raise FleetError(f"week {week}: no stored {stage} artifact at {store.location(week, key)}; run the pipeline "
                         f"for this week first")
    if stage == "processed":
        _refuse_stale_processed(store, week)
    artifact = store.local_copy(week, key)
    summary = store.read_json(week, keys.CONSOLIDATED_META_KEY, {}) or {}
    subject, body = message.for_week(week, stage, run_id, summary)
    change_lines, changes_md = changes.for_commit(store, week, stage)
    body = "\n".join([body, *change_lines])
    before = store.read_json(week, keys.commit_key(stage)) or {}
    landed = before.get("sha") if before.get("status") in LANDED else before.get("last_landed")
    try:
        ensure_remote(repo)
        result = commit_files(repo, {f"{week}/{filename}": artifact, f"{week}/CHANGES.md": store.local_copy(week, changes_md)},
                              subject=subject, body=body,
                              idempotency_key=f"{week}:{stage}", key_with_content=True, log=log)
    except FleetError as exc:
        # The record says what the last attempt did: `fleet status` must not go on showing an older success.
        store.write_json(week, keys.commit_key(stage), {"status": "failed", "sha": None, "error": str(exc),
                                                       "run_id": run_id, "last_landed": landed})
        raise
    # what this commit added to the repository's LFS storage: its parquet file, when it is new content
    lfs_bytes = (artifact.stat().st_size if result.status == "committed"
                 else before.get("lfs_bytes", 0) if before.get("sha") == result.sha else 0)
    store.write_json(week, keys.commit_key(stage), {"status": result.status, "sha": result.sha,
                                                   "attempts": result.attempts, "run_id": run_id,
                                                   "lfs_bytes": lfs_bytes})
    return result


def describe(rec: dict | None) -> str:
    """One line for a stage's commit record: its status and commit, or why its last attempt failed."""
    if not rec:
        return "none"
    if rec.get("status") in LANDED:
        return f"{rec['status']:<10} {rec['sha']}"
    error = (rec.get("error") or "").strip().splitlines()
    last = f" (last landed: {rec['last_landed']})" if rec.get("last_landed") else ""
    return f"{rec.get('status', '?'):<10} {(error[0] if error else '')[:160]}{last}"


def _refuse_stale_processed(store: ArtifactStore, week: str) -> None:
    """The processed rows are made from the consolidated raw rows; if those were consolidated again after them
    (post-processing was killed, or failed, after a new consolidation), committing them would commit last
    consolidation's data under this one's message. Both are written whole, so their modification times order
    them (to the second on S3)."""
    raw = store.modified_ns(week, keys.CONSOLIDATED_KEY)
    if raw is not None and (store.modified_ns(week, keys.PROCESSED_KEY) or 0) < raw:
        raise FleetError(f"week {week}: the stored post-processed rows ({store.location(week, keys.PROCESSED_KEY)}) "
                         f"are older than its consolidated "
                         f"raw rows; post-processing has not run since the last consolidation. Run `fleet reprocess "
                         f"--week {week}` to make and commit them")
