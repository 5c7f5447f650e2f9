"""The week end to end through real parts: demo sites, Chromium, a multiprocess Dagster run, git + git-lfs."""

import os
import time

from fleet.engine.procs import alive
from fleet_tests.conftest import ROOT, SOURCE, WEEK, committed_rows, run_fleet
from fleet_tests.gitremote import log, ls_tree

DEMO_ROWS = {"books": 24, "catalog": 40, "jobs": 35, "parts": 18, "shops": 15, "stocks": 20}


def test_demo_week_makes_two_lfs_commits_and_reruns_make_none(fleet_env):
    before = log(fleet_env.remote)
    env = {**fleet_env.env, "FLEET_BROWSER_HOST_IDLE_S": "3"}
    res = run_fleet(env, "demo", "--week", "2026-W47", "--force")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    commits = log(fleet_env.remote)
    new = commits[: len(commits) - len(before)]
    assert [c["subject"] for c in new] == [f"fleet: processed rows for week {WEEK}", f"fleet: raw rows for week {WEEK}"]
    processed, raw = new
    per_source = lambda stage: [f"data/{WEEK}/{stage}/{name}.parquet" for name in sorted(DEMO_ROWS)]  # noqa: E731
    assert raw["files"] == ["data/.gitattributes", f"data/{WEEK}/CHANGES.md", *per_source("raw")]
    assert processed["files"] == [f"data/{WEEK}/CHANGES.md", *per_source("processed")]
    assert "Sources included (6)" in raw["message"] and "Fleet-Idempotency-Key:" in raw["message"]
    assert "Run: " in raw["message"]
    # the remote's own files are untouched
    after = ls_tree(fleet_env.remote)
    for path, blob in fleet_env.tree_before.items():
        assert after[path] == blob
    assert set(after) - set(fleet_env.tree_before) == {"data/.gitattributes", f"data/{WEEK}/CHANGES.md",
                                                       *per_source("raw"), *per_source("processed")}
    # the committed content: every source's rows, unique by source and key
    frame = committed_rows(fleet_env.remote, WEEK)
    counts = dict(frame.group_by(SOURCE).len().iter_rows())
    assert counts == DEMO_ROWS
    assert committed_rows(fleet_env.remote, WEEK, "processed").height > 0
    for name in DEMO_ROWS:
        assert f"\n{name:<20} ok" in res.stdout
    _readme_reads_the_week(fleet_env)
    # the warm workers leave on their own once idle for FLEET_BROWSER_HOST_IDLE_S, whoever drove the week, and so do
    # their browsers' profiles, which Playwright only removes when a browser closes (procs.private_tmp)
    from fleet.engine.pool import tmp_root
    deadline = time.monotonic() + 60
    while _live_pids(fleet_env.home / "browser-hosts") or tmp_root(fleet_env.home / "browser-hosts").exists():
        assert time.monotonic() < deadline, (_live_pids(fleet_env.home / "browser-hosts"), "workers outlived their idle limit")
        time.sleep(0.5)

    again = run_fleet(env, "demo", "--week", "2026-W47", "--force")
    assert again.returncode == 0, again.stderr[-3000:]
    assert log(fleet_env.remote) == commits  # no new commit: "up to date"
    assert "up_to_date" in again.stdout
    # the rerun reused every source's stored artifact: it started no worker
    assert _live_pids(fleet_env.home / "browser-hosts") == []

    status = run_fleet(fleet_env.env, "status", "--week", WEEK)
    assert status.returncode == 0
    assert all(f"{n:<20} ok" in status.stdout for n in DEMO_ROWS)


def _readme_reads_the_week(fleet_env) -> None:
    """README's "Reading the data", as a consumer runs it: its polars and DuckDB code in a clone of the data
    repository made with git-lfs (the week's files are LFS objects)."""
    import re
    import subprocess

    clone = fleet_env.tmp / "consumer"
    lfs = ["-c", "filter.lfs.process=git-lfs filter-process", "-c", "filter.lfs.required=true",
           "-c", "filter.lfs.smudge=git-lfs smudge -- %f", "-c", "filter.lfs.clean=git-lfs clean -- %f"]
    subprocess.run(["git", *lfs, "clone", "-q", str(fleet_env.remote), str(clone)], check=True)
    section = (ROOT / "README.md").read_text().split("## Reading the data", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, blocks
    names: dict = {}
    cwd = os.getcwd()
    os.chdir(clone)
    try:
        for block in blocks:
            exec(block, names)  # noqa: S102  (the README's own code)
    finally:
        os.chdir(cwd)
    assert names["books"].height == DEMO_ROWS["books"] and names["books"]["_fleet_source"].unique().to_list() == ["books"]
    assert {k: v.height for k, v in names["week"].items()} == DEMO_ROWS
    assert names["history"].height == DEMO_ROWS["books"]
    duck = names["duckdb"]
    os.chdir(clone)
    try:
        counts = dict(duck.sql("SELECT _fleet_source, count(*) FROM read_parquet('data/2026-11-16/raw/*.parquet', "
                               "union_by_name=true) GROUP BY ALL").fetchall())
    finally:
        os.chdir(cwd)
    assert counts == DEMO_ROWS


def _live_pids(root) -> list[tuple[str, int]]:
    """The processes that the pid files under ``root`` (the warm workers') name and that live."""
    live = []
    for pid_file in root.rglob("*.pid"):
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            continue
        if pid != os.getpid() and alive(pid):
            live.append((str(pid_file.relative_to(root)), pid))
    return live


USER_SCRAPER = '''
import polars as pl
from fleet import Scraper


class Planets(Scraper):
    """Planets from an inline page: a scraper that lives outside this repository."""
    name = "planets"
    schema = {"planet": pl.String, "moons": pl.Int64}
    key = ("planet",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await page.set_content("<table><tr><td>Mars</td><td>2</td></tr><tr><td>Earth</td><td>1</td></tr></table>")
        for cells in await page.locator("tr").evaluate_all("rs => rs.map(r => [...r.cells].map(c => c.textContent))"):
            yield {"planet": cells[0], "moons": int(cells[1])}
'''

BAD_ROW_SCRAPER = '''
import polars as pl
from fleet import Scraper


class Prices(Scraper):
    name = "prices"
    schema = {"sku": pl.String, "price": pl.Float64}
    key = ("sku",)

    async def scrape(self, page, ctx):
        yield {"sku": "a", "price": 1.5}
        yield {"sku": "b", "price": "call us"}
'''


def test_scrapers_from_another_directory_run_end_to_end(fleet_env):
    d = fleet_env.tmp / "their_scrapers"
    d.mkdir()
    (d / "planets.py").write_text(USER_SCRAPER)
    (d / "prices.py").write_text(BAD_ROW_SCRAPER)
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d)}
    res = run_fleet(env, "run", "--week", "2026-W47", "--force")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]  # prices failed, planets committed
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(frame["planet"].to_list()) == ["Earth", "Mars"]
    assert set(frame[SOURCE]) == {"planets"}  # rows of a failed source are not committed
    assert "source prices: column 'price' expects Float64, got 'call us'" in res.stdout
    msg = log(fleet_env.remote)[1]["message"]
    assert "Sources missing (1): prices (failed, source)" in msg


def test_no_data_at_all_is_an_infrastructure_failure(fleet_env):
    d = fleet_env.tmp / "broken_only"
    d.mkdir()
    (d / "prices.py").write_text(BAD_ROW_SCRAPER)
    (d / "oops.py").write_text("import this_module_does_not_exist\n")
    before = log(fleet_env.remote)
    res = run_fleet({**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d)}, "run", "--week", "2026-W47", "--force")
    assert res.returncode == 2
    assert f"infrastructure failure: no source returned data for week {WEEK}" in res.stdout + res.stderr
    assert log(fleet_env.remote) == before
    assert "oops" in res.stdout and "No module named 'this_module_does_not_exist'" in res.stdout


REJECT_HOOK = """#!/bin/bash
# Like a protected path on a hosted remote: refuse any push that touches {pattern}.
while read old new ref; do
  if git diff --name-only "$old" "$new" | grep -q '{pattern}'; then
    echo "remote: error: GH006: Protected path {pattern} cannot be changed" >&2
    exit 1
  fi
done
exit 0
"""


def _replace_hook(remote, pattern):
    hook = remote / "hooks" / "pre-receive"
    original = hook.read_text()
    hook.write_text(REJECT_HOOK.format(pattern=pattern))
    return lambda: hook.write_text(original)


def test_a_rejected_raw_commit_exits_2_and_fleet_commit_lands_it_later(fleet_env):
    d = fleet_env.tmp / "their_scrapers"
    d.mkdir()
    (d / "planets.py").write_text(USER_SCRAPER)
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d)}
    restore = _replace_hook(fleet_env.remote, "/raw/")
    before = log(fleet_env.remote)
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 2, res.stdout[-3000:]
    assert "GH006" in res.stdout + res.stderr
    assert log(fleet_env.remote) == before
    restore()
    later = run_fleet(env, "commit", "--week", WEEK)  # from the stored artifacts, nothing scraped again
    assert later.returncode == 0, later.stderr[-2000:]
    assert "commit raw       committed" in later.stdout
    assert sorted(committed_rows(fleet_env.remote, WEEK)["planet"]) == ["Earth", "Mars"]


def test_a_failed_processed_commit_never_loses_the_raw_commit(fleet_env):
    d = fleet_env.tmp / "their_scrapers"
    d.mkdir()
    (d / "planets.py").write_text(USER_SCRAPER)
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d)}
    _replace_hook(fleet_env.remote, "/processed/")
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 1, res.stdout[-3000:]
    assert "the raw rows were committed, but post-processing or its commit failed" in res.stderr
    assert log(fleet_env.remote)[0]["subject"] == f"fleet: raw rows for week {WEEK}"
    assert committed_rows(fleet_env.remote, WEEK).height == 2
