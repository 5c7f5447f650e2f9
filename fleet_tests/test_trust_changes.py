"""Week-over-week change summaries: per source, rows added, removed and changed by natural key against the previous
committed week, from the stored files, in each commit's message and in data/W/CHANGES.md (a plain git blob)."""
import datetime as dt

import polars as pl

from fleet.demo import sites as demo
from fleet.demo.sites import set_mode
from fleet.publish.changes import compare
from fleet.storage.provenance import FETCHED_AT, SCRAPER_REV
from fleet_tests.conftest import SOURCE, committed_rows, run_fleet
from fleet_tests.trust import demo_env
from fleet_tests.gitremote import log, pointer_oid, read_blob

W1, W2 = "2026-11-09", "2026-11-16"


def test_compare_counts_by_natural_key_with_null_keys_and_new_columns():
    prev = pl.DataFrame({SOURCE: ["s"] * 4, "k": ["a", "b", "c", None], "v": [1, 2, 3, 4],
                         FETCHED_AT: [None] * 4})
    cur = pl.DataFrame({SOURCE: ["s"] * 4, "k": ["a", "b", "d", None], "v": [1, 20, 5, 4], "w": [0] * 4,
                        FETCHED_AT: [dt.datetime(2026, 1, 1)] * 4})  # provenance is no change
    got = compare(prev, cur, ["k"])
    assert (got["added"], got["removed"], got["changed"]) == (1, 1, 1), got  # +d -c ~b
    assert got["columns_added"] == ["w"] and got["columns_removed"] == [] and got["columns_retyped"] == {}


def test_compare_reports_a_changed_type_and_never_crashes_on_any_dtype():
    """A new version of a scraper that changes a column's type (even its key's) is a change the summary reports:
    values compare by their text form, and a type with none (a list) counts its rows as changed."""
    prev = pl.DataFrame({"sku": [1, 2, 3], "price": [1.5, 2.0, 3.0], "tags": [["a"], ["b"], []],
                         "source": ["x", "y", "z"], "fetched_at": ["site's", "own", "columns"]})
    cur = pl.DataFrame({"sku": ["1", "2", "4"], "price": ["1.5", "2.5", "9"], "tags": [["a"], ["b"], ["c"]],
                        "source": ["x", "y", "w"], "fetched_at": ["site's", "own", "columns"]})
    got = compare(prev, cur, ["sku"])
    assert got["columns_retyped"] == {"sku": "Int64 -> String", "price": "Float64 -> String"}, got
    assert (got["added"], got["removed"], got["changed"]) == (1, 1, 1), got  # +4 -3 ~2 (price 2.0 -> "2.5")
    relisted = cur.with_columns(pl.col("tags").list.join(","))  # List(String) -> String: no text form before
    got = compare(prev, relisted, ["sku"])
    assert got["columns_retyped"]["tags"] == "List(String) -> String" and got["changed"] == 2, got
    nested = pl.DataFrame({"k": [[1], [2]], "v": [{"a": 1}, {"a": 2}]})
    assert compare(nested, nested.with_columns(pl.col("v").struct.field("a").alias("v")), ["k"])["changed"] == 2


def test_each_commit_says_what_changed_since_the_previous_committed_week(fleet_env):
    env, state = demo_env(fleet_env, "books", "jobs")
    res = run_fleet(env, "demo", "--week", W1, "--force")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    first = log(fleet_env.remote)[1]["message"]
    assert "Changes with no previous committed week (+added -removed ~changed by natural key" in first, first
    assert "jobs +35 -0 ~0" in first, first

    set_mode(state, "jobs", "volume_collapse")  # 2 of the 35 jobs are left
    res = run_fleet(env, "demo", "--week", W2, "--force")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    processed, raw = log(fleet_env.remote)[:2]
    # the books' prices move every week; their isbns do not
    w1, w2 = dt.date.fromisoformat(W1), dt.date.fromisoformat(W2)
    moved = sum(a["price"] != b["price"] for a, b in zip(demo.books_rows(w1), demo.books_rows(w2)))
    kept_jobs = demo.apply_volume(demo.jobs_rows(w2), "volume_collapse")
    jobs_changed = sum(r != p for r, p in zip(kept_jobs, demo.jobs_rows(w1)))
    want_books, want_jobs = f"books +0 -0 ~{moved}", f"jobs +0 -33 ~{jobs_changed}"
    for commit in (raw, processed):
        assert f"Changes against week {W1}" in commit["message"], commit["message"]
        assert want_books in commit["message"] and want_jobs in commit["message"], commit["message"]

    md = read_blob(fleet_env.remote, f"main:data/{W2}/CHANGES.md")
    assert pointer_oid(md) is None  # readable in the repository, not an LFS pointer
    text = md.decode()
    assert f"## raw rows against week {W1}" in text and f"## processed rows against week {W1}" in text, text
    assert f"| jobs | 2 | 35 | 0 | 33 | {jobs_changed} |  |" in text and f"| books | 24 | 24 | 0 | 0 | {moved} |" in text

    # provenance reaches the committed raw rows
    frame = committed_rows(fleet_env.remote, W2)
    assert frame[FETCHED_AT].null_count() == 0 and frame[SCRAPER_REV].n_unique() == 2

    # fleet status says what the store holds and what the week's commits added to LFS storage
    status = run_fleet(env, "status", "--week", W2).stdout
    assert "(added 0.0 MB of LFS storage)" in status and f"store: week {W2} holds raw " in status, status

    # the week again: nothing new to commit, CHANGES.md included
    n = len(log(fleet_env.remote))
    assert run_fleet(env, "demo", "--week", W2, "--force").returncode == 0
    assert len(log(fleet_env.remote)) == n
