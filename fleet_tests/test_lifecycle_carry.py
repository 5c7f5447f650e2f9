"""Carry-forward through real weekly runs (Dagster, Chromium, git + git-lfs) against the newsroom demo site, and its
rule over stored weeks."""
import polars as pl

from fleet.demo.newsroom import SCRAPER, Newsroom, scrapers_folder
from fleet.lifecycle import carry
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet.storage.provenance import STALE_SINCE as STALE
from fleet_tests.conftest import SOURCE, committed_rows, run_fleet
from fleet_tests.gitremote import log

WEEKS = ["2026-10-26", "2026-11-02", "2026-11-09", "2026-11-16"]


def _good(store, week, source, rows=2):
    store.write_parquet(week, keys.raw_key(source, "a1"), pl.DataFrame({"k": list(range(rows))}))
    keys.write_outcome(store, week, {"source": source, "attempt": "a1", "status": "ok", "rows": rows})


def test_quarantined_or_unflagged_sources_are_never_carried(tmp_path):
    store = LocalArtifactStore(tmp_path)
    _good(store, "2026-11-02", "a")
    _good(store, "2026-11-02", "b")
    missing = {"a": {"status": "quarantined", "category": "quarantined"}, "b": {"status": "failed", "category": "source"}}
    carried, frames = carry.carry(store, "2026-11-09", missing, {"a": 5})
    assert carried == {} and frames == {}
    carried, frames = carry.carry(store, "2026-11-09", missing, {"a": 5, "b": 5})
    assert carried == {"b": {"from": "2026-11-02", "rows": 2, "status": "failed"}}
    assert list(frames) == ["b"]
    frame = frames["b"].collect()
    assert [str(d) for d in frame[STALE].to_list()] == ["2026-11-02"] * 2


def test_a_failed_week_carries_the_last_good_rows_for_at_most_n_weeks(fleet_env):
    scrapers = scrapers_folder(fleet_env.tmp / "scrapers", SCRAPER.replace(
        "    timeout_s = 30\n", "    timeout_s = 30\n    carry_forward = True\n    carry_forward_weeks = 2\n"))
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers)}
    with Newsroom() as site:
        env["FLEET_DEMO_URL"] = site.url
        first = run_fleet(env, "run", "--week", WEEKS[0], "--force")
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
        site.change_week = "2026-01-05"
        for week in WEEKS[1:]:
            res = run_fleet(env, "run", "--week", week, "--force")
            assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-3000:]
    messages = {c["subject"]: c["message"] for c in log(fleet_env.remote)}
    frames = {w: committed_rows(fleet_env.remote, w) for w in WEEKS}
    # the column is always there, null for fresh rows
    for w, frame in frames.items():
        assert frame.schema[STALE] == pl.Date, (w, frame.schema)
        assert frame.filter(pl.col(SOURCE) == "front")[STALE].null_count() == 1
    assert frames[WEEKS[0]].filter(pl.col(SOURCE) == "news")[STALE].null_count() == 12
    for w in WEEKS[1:3]:
        news = frames[w].filter(pl.col(SOURCE) == "news")
        assert news.height == 12 and [str(d) for d in news[STALE].unique()] == [WEEKS[0]]
        assert news.drop(STALE).equals(frames[WEEKS[0]].filter(pl.col(SOURCE) == "news").drop(STALE))
        assert (f"Sources carried forward, their rows marked _fleet_stale_since (1): news (12 rows of week {WEEKS[0]})"
                in messages[f"fleet: raw rows for week {w}"])
    # the third failed week in a row is past carry_forward_weeks = 2
    assert frames[WEEKS[3]].filter(pl.col(SOURCE) == "news").height == 0
    assert "carried forward" not in messages[f"fleet: raw rows for week {WEEKS[3]}"]
    assert "Sources missing (1): news (failed, source)" in messages[f"fleet: raw rows for week {WEEKS[3]}"]
    status = run_fleet(env, "status", "--week", WEEKS[2])
    assert f"carried forward news: 12 rows of week {WEEKS[0]} (_fleet_stale_since {WEEKS[0]}); this week failed" in status.stdout
    assert "carried forward" not in run_fleet(env, "status", "--week", WEEKS[3]).stdout
