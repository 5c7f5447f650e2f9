"""Faults through the real parts (`fleet demo` weeks: Dagster, Chromium, a git+LFS remote): a corrupt object in the
artifact store (a truncated parquet, a garbled outcome) is named in one line and scraped again, never committed,
and reported when consolidation meets it; a Chromium that hangs at launch is cut off at FLEET_BROWSER_STARTUP_S,
counted as infra and re-executed, and the week commits once."""
import re
import shutil
import tempfile
from pathlib import Path

from fleet.engine.procs import alive
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import SOURCE, WEEK, committed_rows, run_fleet
from fleet_tests.gitremote import log


def _messages(fleet_env, monkeypatch) -> list[str]:
    """Every message of the week's runs' event logs."""
    from fleet import records
    from fleet.config import settings
    from fleet.defs.instance import get_instance

    for name, value in fleet_env.env.items():
        monkeypatch.setenv(name, value)
    instance = get_instance(settings())
    return [r.event_log_entry.user_message or "" for run in records.runs(instance)
            for r in records.events(instance, run.run_id)]


def _demo(fleet_env, *extra: str, env: dict | None = None):
    res = run_fleet({**fleet_env.env, **(env or {})}, "demo", "--week", WEEK, "--force", "--source", "books",
                    "--source", "jobs", *extra)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def test_a_corrupt_object_in_the_store_is_named_scraped_again_and_never_committed(fleet_env, monkeypatch):
    _demo(fleet_env)
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    books, jobs = (keys.read_outcome(store, WEEK, n) for n in ("books", "jobs"))
    parquet = store.path(WEEK, keys.rows_key(books))
    parquet.write_bytes(parquet.read_bytes()[: parquet.stat().st_size // 2])  # truncated
    garbled = keys.outcome_key("jobs", jobs["attempt"])
    store.path(WEEK, garbled).write_text('{"source": "jobs", "status": "o')  # garbled
    assert keys.rows_problem(store, WEEK, books) and keys.read_outcome(store, WEEK, "jobs")["corrupt"] == garbled

    _demo(fleet_env)  # the same week again: neither is reused, each is named and scraped again
    said = [m for m in _messages(fleet_env, monkeypatch) if "is corrupt" in m]
    want = {f"source books: the store's {keys.rows_key(books)} of week {WEEK} is corrupt (unreadable parquet",
            f"source jobs: the store's {garbled} of week {WEEK} is corrupt (not JSON"}
    assert {w for w in want if any(w in m and "scraping the source again" in m for m in said)} == want, said
    again = {n: keys.read_outcome(store, WEEK, n) for n in ("books", "jobs")}
    assert again["books"]["attempt"] != books["attempt"] and again["jobs"]["attempt"] != jobs["attempt"], again
    assert all(o["status"] == "ok" and not o.get("reused") for o in again.values()), again
    frame = committed_rows(fleet_env.remote, WEEK)  # reads whole: nothing corrupt went in
    assert {s: frame.filter(frame[SOURCE] == s).height for s in ("books", "jobs")} == \
        {s: again[s]["rows"] for s in ("books", "jobs")}

    # met by consolidation instead (corrupted after its source's step): reported with the line, left out
    from fleet.transform.consolidate import consolidate

    parquet = store.path(WEEK, keys.rows_key(again["books"]))
    parquet.write_bytes(parquet.read_bytes()[:100])
    summary = consolidate(store, WEEK, ["books", "jobs"])
    assert "books" not in summary["included"] and summary["included"]["jobs"] == again["jobs"]["rows"], summary
    assert summary["missing"]["books"]["category"] == "infra", summary
    assert summary["missing"]["books"]["error"].startswith(
        f"source books: the store's {keys.rows_key(again['books'])} of week {WEEK} is corrupt"), summary


HANGS_ONCE = """#!/bin/sh
# a Chromium that hangs at its first launch (never opens its DevTools pipe), and is the real one after that
if mkdir {flag}/hung 2>/dev/null; then echo $$ > {flag}/hung/pid; exec sleep 3600; fi
exec {chromium} "$@"
"""


def test_a_chromium_that_hangs_at_launch_is_bounded_infra_and_reexecuted(fleet_env, monkeypatch):
    from fleet.config import chromium_path

    flag = Path(tempfile.mkdtemp(prefix="fleet-hang-"))
    flag.chmod(0o777)  # the sandbox's user marks the hung launch here
    try:
        fake = fleet_env.tmp / "bin" / "chromium"
        fake.parent.mkdir()
        fake.write_text(HANGS_ONCE.format(flag=flag, chromium=chromium_path()))
        fake.chmod(0o755)
        res = _demo(fleet_env, env={"FLEET_CHROMIUM": str(fake), "FLEET_BROWSER_STARTUP_S": "3"})
        pid = int((flag / "hung" / "pid").read_text())
        assert not alive(pid)  # the hung Chromium was killed with its browser host
        store = LocalArtifactStore(fleet_env.home / "artifacts")
        tries = {n: [keys.attempt_outcome(store, WEEK, n, a) for a in keys.outcomes(store, WEEK, n)]
                 for n in ("books", "jobs")}
        hung = [o for os_ in tries.values() for o in os_ if o["status"] == "failed"]
        assert len(hung) == 1 and hung[0]["category"] == "infra", tries
        assert "the browser did not start within 3s" in hung[0]["error"], hung
        assert all(os_[-1]["status"] == "ok" for os_ in tries.values()), tries  # re-executed, and it worked
        assert "recovered from infra failure on attempt 2" in res.stdout, res.stdout
        frame = committed_rows(fleet_env.remote, WEEK)
        assert sorted(set(frame[SOURCE])) == ["books", "jobs"]
        raw_commits = [c for c in log(fleet_env.remote) if f"data/{WEEK}/raw/books.parquet" in c["files"]]
        assert len(raw_commits) == 1, raw_commits  # the week commits once
    finally:
        shutil.rmtree(flag, ignore_errors=True)


def test_a_broken_selectors_line_names_its_call_locator_and_url_and_what_to_run_next(fleet_env):
    """broken_selector through `fleet demo`: the table's line, the stored outcome's error and error.txt name the
    failing call, what went wrong, the locator (from Playwright's call log, whose other lines are dropped) and the
    URL, uncut, and point at `fleet debug` and `fleet doctor`."""
    res = run_fleet({**fleet_env.env, "FLEET_DEMO_FAULTS": "1"}, "demo", "--week", WEEK, "--force",
                    "--source", "broken_selector")
    out = res.stdout + res.stderr
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    stored = keys.read_outcome(store, WEEK, "broken_selector")
    assert (stored["status"], stored["category"]) == ("failed", "source"), stored
    url = f"/books?week={WEEK}"
    error = stored["error"]
    assert "\n" not in error, error
    for part in ("Locator.wait_for: Timeout 2000ms exceeded", 'waiting for locator("table#book-list-v1 tr.book")',
                 f"{url}; see `fleet debug broken_selector --week {WEEK}` and `fleet doctor broken_selector`"):
        assert part in error, error
    assert "Call log" not in error, error
    [line] = [x for x in out.splitlines() if re.match(r"broken_selector +failed +source ", x)]  # not its progress
    assert line.endswith(error), line  # the table's line, whole
    text = (store.local_dir(WEEK, keys.evidence_key("broken_selector")) / "error.txt").read_text()
    assert text.startswith(error + "\nURL: http://") and url in text.splitlines()[1], text[:500]
    assert "Traceback" in text, text[:500]
