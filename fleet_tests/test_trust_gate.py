"""The quality gate through real `fleet demo` runs: a source whose week fails a blocking check (volume collapse below
10% of its trailing median, selector rot) is held out of the commit while the others are committed; its rows stay
stored, and `fleet release` commits them with a note."""
import polars as pl

from fleet.demo.sites import set_mode
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import SOURCE, committed_rows, run_fleet
from fleet_tests.trust import demo_env
from fleet_tests.gitremote import log

WEEKS = ("2026-11-02", "2026-11-09")
W = "2026-11-16"


def test_a_source_failing_a_blocking_check_is_held_and_released(fleet_env):
    env, state = demo_env(fleet_env, "books", "jobs", "stocks")
    for week in WEEKS:  # the trailing history the checks compare against
        res = run_fleet(env, "demo", "--week", week, "--force")
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    set_mode(state, "jobs", "volume_collapse")   # 2 rows where there were 35: below 10%
    set_mode(state, "books", "selector_rot")     # price cells stop matching: a coverage drop
    res = run_fleet(env, "demo", "--week", W, "--force")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert "HELD jobs: 2 rows" in res.stderr and "fleet release jobs --week 2026-11-16" in res.stderr, res.stderr[-3000:]
    assert "HELD books" in res.stderr
    processed, raw = log(fleet_env.remote)[:2]
    assert "Sources held by the quality gate (2;" in raw["message"], raw["message"]
    assert "jobs (2 rows: volume: volume collapse: 2 rows, usual 35)" in raw["message"]
    assert "books (24 rows: coverage: selector rot suspected" in raw["message"]
    assert set(committed_rows(fleet_env.remote, W)[SOURCE]) == {"stocks"}
    # the held rows stay in the artifact store
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    stored = store.read_parquet(W, keys.rows_key(keys.read_outcome(store, W, "jobs")))
    assert stored.height == 2

    bad = run_fleet(env, "release", "stocks", "--week", W)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        f"fleet: error: source stocks is not held by the quality gate in week {W}; nothing to release"), bad.stderr
    n = len(log(fleet_env.remote))
    res = run_fleet(env, "release", "jobs", "--week", W, "--note", "the sale ended; 2 jobs is right")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    new = log(fleet_env.remote)[: len(log(fleet_env.remote)) - n]
    assert [c["subject"].split(" rows")[0] for c in new] == ["fleet: processed", "fleet: raw"]
    assert ("Released from the quality gate: jobs (volume: volume collapse: 2 rows, usual 35); "
            "note: the sale ended; 2 jobs is right") in new[1]["message"], new[1]["message"]
    assert "Sources held by the quality gate (1;" in new[1]["message"] and "books (24 rows" in new[1]["message"]
    frame = committed_rows(fleet_env.remote, W)
    assert sorted(set(frame[SOURCE])) == ["jobs", "stocks"]
    assert frame.filter(pl.col(SOURCE) == "jobs").height == 2

    # a rerun of the week keeps the release (same rows) and commits nothing new
    n = len(log(fleet_env.remote))
    assert run_fleet(env, "demo", "--week", W, "--force").returncode == 1
    assert len(log(fleet_env.remote)) == n
