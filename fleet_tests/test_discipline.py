"""Run discipline: one run per week, kill -9 at any point then rerun, reprocess, refusal of past weeks."""
import os
import signal
import subprocess
import sys
import time

from fleet_tests.conftest import ROOT, WEEK, committed_frame, run_fleet
from fleet_tests.gitremote import log

STEADY_DIR = ROOT / "fleet_tests" / "scrapers_crash"


def _steady_env(fleet_env):
    d = fleet_env.tmp / "steady_only"
    d.mkdir(exist_ok=True)
    (d / "steady.py").write_text((STEADY_DIR / "steady.py").read_text())
    (d / "steady_two.py").write_text((STEADY_DIR / "steady.py").read_text()
                                     .replace('name = "steady"', 'name = "steady_two"')
                                     .replace("class Steady", "class SteadyTwo"))
    return {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d)}


def test_two_concurrent_runs_of_a_week_make_one_week_of_commits(fleet_env):
    env = _steady_env(fleet_env)
    before = len(log(fleet_env.remote))
    cmd = [sys.executable, "-m", "fleet.cli", "run", "--week", WEEK, "--force"]
    procs = [subprocess.Popen(cmd, env=env, cwd=fleet_env.home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    assert any("is already being run by pid" in o for o in outs)
    assert len(log(fleet_env.remote)) == before + 2


def test_kill_9_at_any_point_then_rerun_gives_the_uninterrupted_result(fleet_env):
    env = _steady_env(fleet_env)
    for delay in (1.5, 4.0, 7.0):
        p = subprocess.Popen([sys.executable, "-m", "fleet.cli", "run", "--week", WEEK, "--force"], env=env,
                             cwd=fleet_env.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(delay)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    frame = committed_frame(fleet_env.remote, f"data/{WEEK}/raw.parquet")
    assert sorted(frame.rows()) == sorted((src, i, __import__("datetime").date(2026, 11, 16))
                                          for src in ("steady", "steady_two") for i in (1, 2, 3))
    subjects = [c["subject"] for c in log(fleet_env.remote) if c["subject"].startswith("fleet:")]
    assert subjects == [f"fleet: processed rows for week {WEEK}", f"fleet: raw rows for week {WEEK}"]
    # nothing is left "in progress" for the week
    status = run_fleet(env, "status", "--week", WEEK)
    assert "steady " in status.stdout and " ok " in status.stdout


def test_reprocess_and_past_weeks(fleet_env):
    env = _steady_env(fleet_env)
    refused = run_fleet(env, "run", "--week", "2026-W10")
    assert refused.returncode == 2 and "older than the last complete week" in refused.stderr
    assert run_fleet(env, "run", "--week", WEEK, "--force").returncode == 0
    n = len(log(fleet_env.remote))
    again = run_fleet(env, "reprocess", "--week", WEEK)
    assert again.returncode == 0 and "up_to_date" in again.stdout
    assert len(log(fleet_env.remote)) == n
    # a stored week runs without --force and without scraping
    rerun = run_fleet(env, "backfill", "--from", WEEK, "--to", WEEK)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "reusing the stored artifact" in rerun.stdout + rerun.stderr
    assert len(log(fleet_env.remote)) == n
