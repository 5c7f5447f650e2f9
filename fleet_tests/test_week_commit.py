"""A week's commit of a stage from its stored artifacts (fleet.publish.week), against a real bare remote with the
GitHub-like hook: what its record says after a refusal, and a processed file older than its raw rows."""
from __future__ import annotations

import uuid

import polars as pl
import pytest

from fleet.config import settings
from fleet.errors import FleetError
from fleet.publish import DataRepo
from fleet.publish.week import commit_stage, describe
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet.transform import layout
from fleet_tests import gitremote as gr

WEEK = "2026-11-16"


@pytest.fixture
def week_env(tmp_path, monkeypatch):
    remote = gr.make_remote(tmp_path)
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLEET_DATA_REMOTE", str(remote))
    s = settings()
    store = LocalArtifactStore(s.store_root)
    return DataRepo.from_settings(s), store, remote


def _consolidated(store, frames: dict[str, pl.DataFrame] | int, **summary) -> str:
    """A consolidated week as consolidation stores it: a file per source, and the summary that lists them."""
    if isinstance(frames, int):
        frames = {"a": pl.DataFrame({"v": list(range(frames))})}
    files = {name: layout.store_key("raw", name) for name in frames}
    for name, frame in frames.items():
        store.write_parquet(WEEK, files[name], frame)
    made = uuid.uuid4().hex
    store.write_json(WEEK, keys.CONSOLIDATED_META_KEY, {
        "week": WEEK, "included": {n: f.height for n, f in frames.items()}, "missing": {},
        "rows": sum(f.height for f in frames.values()), "files": files, "made": made, **summary})
    return made


def _processed(store, frame: pl.DataFrame, made: str) -> None:
    store.write_parquet(WEEK, layout.store_key("processed", "a"), frame)
    store.write_json(WEEK, keys.PROCESSED_META_KEY, {"files": {"a": layout.store_key("processed", "a")}, "from": made})


def test_a_refused_commit_is_recorded_as_failed_with_the_last_landed_commit(week_env):
    s, store, remote = week_env
    _consolidated(store, 3)
    first = commit_stage(s, store, WEEK, "raw", run_id="r1")
    assert first.status == "committed"
    assert describe(store.read_json(WEEK, keys.commit_key("raw"))) == f"committed  {first.sha}"

    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'GH006: Protected branch update failed for refs/heads/main.' >&2\nexit 1\n")
    _consolidated(store, 4)
    with pytest.raises(FleetError, match="GH006"):
        commit_stage(s, store, WEEK, "raw", run_id="r2")
    rec = store.read_json(WEEK, keys.commit_key("raw"))
    assert (rec["status"], rec["sha"], rec["run_id"], rec["last_landed"]) == ("failed", None, "r2", first.sha)
    assert "GH006" in rec["error"]
    line = describe(rec)
    assert line.startswith("failed") and "GH006" in line and f"last landed: {first.sha}" in line
    # a second refusal keeps pointing at the last commit that landed
    with pytest.raises(FleetError):
        commit_stage(s, store, WEEK, "raw", run_id="r3")
    assert store.read_json(WEEK, keys.commit_key("raw"))["last_landed"] == first.sha


def test_processed_rows_older_than_the_raw_rows_are_not_committed(week_env):
    s, store, remote = week_env
    _processed(store, pl.DataFrame({"v": [0, 1, 2]}), _consolidated(store, 3))
    made = _consolidated(store, 4)  # consolidated again; post-processing did not follow (killed, or failed)
    before = gr.log(remote)
    with pytest.raises(FleetError, match=r"older than its consolidated raw rows.*fleet reprocess --week 2026-11-16"):
        commit_stage(s, store, WEEK, "processed", run_id="r1")
    assert gr.log(remote) == before
    # made again after the consolidation: committed
    _processed(store, pl.DataFrame({"v": [0, 1, 2, 3]}), made)
    assert commit_stage(s, store, WEEK, "processed", run_id="r2").status == "committed"


def test_the_commit_message_names_sources_kept_from_an_earlier_attempt(week_env):
    s, store, remote = week_env
    _consolidated(store, {"a": pl.DataFrame({"v": [1]}), "b": pl.DataFrame({"v": [2]})},
                  kept={"b": {"status": "failed", "category": "source", "error": "the site changed"}})
    commit_stage(s, store, WEEK, "raw", run_id="r1")
    message = gr.log(remote)[0]["message"]
    assert "Sources included (2): a (1 rows), b (1 rows)" in message
    assert "with the rows of an earlier attempt this week (1): b (failed, source)" in message


def test_post_processing_the_same_rows_twice_gives_the_same_file(week_env, tmp_path):
    """Rows keep their order within a source, so the files' bytes (what the commit compares) do not change from
    run to run. (With the one-file layout's unstable sort, 200k rows a source gave two different files in three
    runs.)"""
    from fleet.transform.postprocess import post_process

    s, store, remote = week_env
    n = 200_000
    frame = pl.DataFrame({"v": list(range(2 * n)), "title": [f" t {i % 977} " for i in range(2 * n)]})
    _consolidated(store, {"a": frame[n:], "b": frame[:n]})
    outputs = set()
    for _ in range(3):
        post_process(store, WEEK)
        outputs.add(b"".join(store.path(WEEK, layout.store_key("processed", n)).read_bytes() for n in "ab"))
    assert len(outputs) == 1
