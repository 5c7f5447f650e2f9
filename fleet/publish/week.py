"""A week's two commits (raw, then processed) from the stored artifacts, through the LFS-safe commit loop: each
source's file of the stage (fleet/transform/layout.py) and the week's ``CHANGES.md`` (fleet/publish/changes.py).

A commit writes the files of the sources this run consolidated and touches no other: a source the week's folder on
the branch already holds and this run does not know (a narrower set of scrapers, a source since deleted) keeps its
committed file, and the message says so, naming the commit that wrote it. Only a source the operator names to drop
(``fleet/drop``) is removed."""
from __future__ import annotations

from fleet.errors import FleetError
from fleet.publish import changes, message
from fleet.publish.commit import CommitResult, commit_files
from fleet.publish.datarepo import DataRepo, ensure_remote
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore
from fleet.transform import layout

LANDED = ("committed", "up_to_date")
STAGES = layout.STAGES
DROP_TAG = "fleet/drop"  # a run's sources to remove from the week's folder on the branch, comma-separated


def parse_drop(value: str | None) -> list[str]:
    return sorted({n.strip() for n in (value or "").split(",") if n.strip()})


def commit_stage(repo: DataRepo, store: ArtifactStore, week: str, stage: str, *, run_id: str, drop=(),
                 log=None) -> CommitResult:
    """Commit ``stage`` (raw | processed) of ``week``; the stored artifacts are the source of truth (staged from
    local copies: themselves for a local store, downloads for a remote one). ``drop``: sources whose files this
    commit removes from the week's folder."""
    if stage not in STAGES:
        raise FleetError(f"unknown stage {stage!r}: use raw or processed")
    listed = layout.required(store, week, stage)
    if stage == "processed":
        _refuse_stale_processed(store, week)
    drop = sorted(set(drop))
    ours = {name for name in listed if name not in drop}
    artifacts = {layout.repo_path(week, stage, name): store.local_copy(week, listed[name]) for name in sorted(ours)}
    summary = store.read_json(week, keys.CONSOLIDATED_META_KEY, {}) or {}
    subject, body = message.for_week(week, stage, run_id, summary)
    change_lines, changes_md = changes.for_commit(store, week, stage, drop)
    artifacts[f"{week}/CHANGES.md"] = store.local_copy(week, changes_md)

    def message_body(on_branch: dict[str, str]) -> str:
        return "\n".join([body, *message.folder_lines(sort_sources(week, stage, ours, drop, on_branch)), *change_lines])

    before = store.read_json(week, keys.commit_key(stage)) or {}
    landed = before.get("sha") if before.get("status") in LANDED else before.get("last_landed")
    try:
        ensure_remote(repo)
        result = commit_files(repo, artifacts, subject=subject, body=message_body, listing=f"{week}/",
                              remove=[layout.repo_path(week, stage, name) for name in drop],
                              idempotency_key=f"{week}:{stage}", key_with_content=True, log=log)
    except FleetError as exc:
        # The record says what the last attempt did: `fleet status` must not go on showing an older success.
        store.write_json(week, keys.commit_key(stage), {"status": "failed", "sha": None, "error": str(exc),
                                                       "run_id": run_id, "last_landed": landed})
        raise
    lfs_bytes = (result.lfs_bytes if result.status == "committed"
                 else before.get("lfs_bytes", 0) if before.get("sha") == result.sha else 0)
    store.write_json(week, keys.commit_key(stage), {"status": result.status, "sha": result.sha,
                                                   "attempts": result.attempts, "run_id": run_id,
                                                   "lfs_bytes": lfs_bytes,
                                                   **sort_sources(week, stage, ours, drop, result.listed)})
    return result


def sort_sources(week: str, stage: str, ours: set[str], drop: list[str], on_branch: dict[str, str]) -> dict:
    """The week's sources as this commit leaves them: ``added`` (new on the branch), ``updated`` (written again),
    ``kept`` (on the branch, not in this run: name -> the commit that wrote its file), ``dropped`` (removed, as
    the operator named them), and ``legacy``, an older fleet's one-file layout of the week, left as it is."""
    there = {layout.source_of(path): sha for path, sha in on_branch.items()
             if path.startswith(f"{week}/{stage}/") and layout.source_of(path)}
    legacy = [path for path in on_branch if path == f"{week}/{layout.LEGACY_REPO_FILE[stage]}"]
    return {"added": sorted(ours - set(there)), "updated": sorted(ours & set(there)),
            "kept": {n: sha for n, sha in sorted(there.items()) if n not in ours and n not in drop},
            "dropped": sorted(n for n in drop if n in there), "legacy": legacy}


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
    consolidation's data under this one's message. Each consolidation has its own name (``made``), and the
    processed rows' summary names the one they were made from."""
    made = (store.read_json(week, keys.CONSOLIDATED_META_KEY) or {}).get("made")
    made_from = (store.read_json(week, keys.PROCESSED_META_KEY) or {}).get("from")
    if made_from != made:
        raise FleetError(f"week {week}: the stored post-processed rows ({store.location(week, keys.PROCESSED_META_KEY)}) "
                         f"are older than its consolidated "
                         f"raw rows; post-processing has not run since the last consolidation. Run `fleet reprocess "
                         f"--week {week}` to make and commit them")
