"""A week's commit of a stage from its stored artifacts (fleet.publish.week), against a real bare remote with the
GitHub-like hook: what its record says after a refusal, and a processed file older than its raw rows."""
from __future__ import annotations

import time

import polars as pl
import pytest

from fleet.config import settings
from fleet.errors import FleetError
from fleet.publish import DataRepo
from fleet.publish.week import commit_stage, describe
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
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


def _consolidated(store, rows: int) -> None:
    store.write_parquet(WEEK, keys.CONSOLIDATED_KEY, pl.DataFrame({"source": ["a"] * rows, "v": list(range(rows))}))
    store.write_json(WEEK, keys.CONSOLIDATED_META_KEY, {"week": WEEK, "included": {"a": rows}, "missing": {}, "rows": rows})


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
    _consolidated(store, 3)
    store.write_parquet(WEEK, keys.PROCESSED_KEY, pl.DataFrame({"source": ["a"] * 3, "v": [0, 1, 2]}))
    time.sleep(0.05)
    _consolidated(store, 4)  # consolidated again; post-processing did not follow (killed, or failed)
    before = gr.log(remote)
    with pytest.raises(FleetError, match=r"older than its consolidated raw rows.*fleet reprocess --week 2026-11-16"):
        commit_stage(s, store, WEEK, "processed", run_id="r1")
    assert gr.log(remote) == before
    # made again after the consolidation: committed
    store.write_parquet(WEEK, keys.PROCESSED_KEY, pl.DataFrame({"source": ["a"] * 4, "v": [0, 1, 2, 3]}))
    assert commit_stage(s, store, WEEK, "processed", run_id="r2").status == "committed"


def test_the_commit_message_names_sources_kept_from_an_earlier_attempt(week_env):
    s, store, remote = week_env
    store.write_parquet(WEEK, keys.CONSOLIDATED_KEY, pl.DataFrame({"source": ["a", "b"], "v": [1, 2]}))
    store.write_json(WEEK, keys.CONSOLIDATED_META_KEY, {
        "week": WEEK, "included": {"a": 1, "b": 1}, "rows": 2, "missing": {},
        "kept": {"b": {"status": "failed", "category": "source", "error": "the site changed"}}})
    commit_stage(s, store, WEEK, "raw", run_id="r1")
    message = gr.log(remote)[0]["message"]
    assert "Sources included (2): a (1 rows), b (1 rows)" in message
    assert "with the rows of an earlier attempt this week (1): b (failed, source)" in message


def test_post_processing_the_same_rows_twice_gives_the_same_file(week_env, tmp_path):
    """A stable sort by source: rows keep their order within a source, so the file's bytes (what the commit
    compares) do not change from run to run. With an unstable sort, 200k rows a source gave two different files
    in three runs."""
    from fleet.transform.postprocess import post_process

    s, store, remote = week_env
    n = 200_000
    frame = pl.DataFrame({"source": ["b"] * n + ["a"] * n, "v": list(range(2 * n)),
                          "title": [f" t {i % 977} " for i in range(2 * n)]})
    store.write_parquet(WEEK, keys.CONSOLIDATED_KEY, frame)
    outputs = set()
    for _ in range(3):
        post_process(store, WEEK)
        outputs.add(store.path(WEEK, keys.PROCESSED_KEY).read_bytes())
    assert len(outputs) == 1
