"""`fleet gc --keep-weeks N [--dry-run]` on a real artifact store: evidence, work folders and spooled rows of weeks
older than the newest N go, a week's spooled rows only once its raw commit landed; raw rows and the data
repository are never touched; a negative N is one line."""
import datetime as dt

import polars as pl

from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet.weeks import last_complete_week
from fleet_tests.conftest import run_fleet
from fleet_tests.gitremote import ls_tree


def test_gc_removes_old_evidence_and_work_but_never_uncommitted_rows(fleet_env):
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    last = last_complete_week(dt.date.today())
    weeks = [(last - dt.timedelta(weeks=k)).isoformat() for k in range(4)]  # newest first
    for i, w in enumerate(weeks):
        store.write_parquet(w, keys.raw_key("books", "a1"), pl.DataFrame({"isbn": ["1"]}))
        store.write_bytes(w, "evidence/books/page.html", b"x" * 1000)
        store.write_bytes(w, "work/books/rows-a.jsonl", b'{"isbn": "1"}\n' * 100)
        if i != 3:  # the oldest week's raw commit never landed
            store.write_json(w, keys.commit_key("raw"), {"status": "committed", "sha": "abc"})
    tree = ls_tree(fleet_env.remote)

    dry = run_fleet(fleet_env.env, "gc", "--keep-weeks", "2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"{weeks[2]}  would remove evidence/books" in dry.stdout and f"{weeks[2]}  would remove work/books" in dry.stdout
    assert f"{weeks[3]}  kept         work/books" in dry.stdout and "its raw commit has not landed" in dry.stdout
    assert weeks[0] not in dry.stdout and weeks[1] not in dry.stdout, dry.stdout
    assert store.exists(weeks[2], "work/books/rows-a.jsonl")  # a dry run removes nothing

    res = run_fleet(fleet_env.env, "gc", "--keep-weeks", "2")
    assert res.returncode == 0 and "removed 3 item(s)" in res.stdout, res.stdout
    assert not store.exists(weeks[2], "evidence/books") and not store.exists(weeks[2], "work/books")
    assert not store.exists(weeks[3], "evidence/books")
    assert store.exists(weeks[3], "work/books/rows-a.jsonl")  # uncommitted: its spooled rows stay
    assert all(store.exists(w, keys.raw_key("books", "a1")) for w in weeks)
    assert all(store.exists(w, "work/books/rows-a.jsonl") for w in weeks[:2])
    assert ls_tree(fleet_env.remote) == tree

    bad = run_fleet(fleet_env.env, "gc", "--keep-weeks", "-1")
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "fleet: error: --keep-weeks must be a whole number of weeks, 0 or more, got -1"), bad.stderr
