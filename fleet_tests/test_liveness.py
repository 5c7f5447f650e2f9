"""Runs judged alive from any host: `fleet ui` (its daemon's run monitoring) on this host, an operator's `fleet run`
on another hostname (a UTS namespace of its own), sharing Postgres and an artifact folder.

While the week runs, longer than several monitoring intervals, the run is never failed: its worker's heartbeat
(fleet/defs/runworker.py) keeps it RUNNING for the daemon, which cannot see the other host's processes. Then the
`fleet run` process is SIGKILLed: its heartbeat stops, run monitoring fails the run within a few intervals, and
the daemon's run-failure sensor re-executes the source it left and commits the week. Before, the daemon failed
the live run at its first check ("the run's worker ... is on another host")."""
import json
import os
import subprocess
import sys
import time

import pytest

from fleet_tests.conftest import ROOT, SOURCE, WEEK, committed_rows, start_ui, stop_ui
from fleet_tests.gitremote import log
from fleet_tests.services import Postgres

MONITOR_S = 2
OTHER = "fleet-other-host"




@pytest.mark.skipif(os.geteuid() != 0, reason="a UTS namespace (another hostname) needs root")
def test_a_run_on_another_host_lives_while_it_beats_and_is_failed_and_followed_up_when_killed(fleet_env, monkeypatch):
    from dagster import DagsterEventType, DagsterRunStatus, RunsFilter

    from fleet.defs.runworker import BEAT_TAG, STALE_BEATS, TAG, beat_period

    crash, dead = ROOT / "fleet_tests" / "scrapers_crash", ROOT / "fleet_tests" / "scrapers_deadrun"
    scrapers, counters, artifacts = (fleet_env.tmp / n for n in ("scrapers", "counters", "artifacts"))
    for d in (scrapers, counters, artifacts):
        d.mkdir()
    (scrapers / "steady.py").write_text((crash / "steady.py").read_text())
    # it waits for `go` while it has time left: time enough for `fleet ui` to start meanwhile
    killer = (dead / "kills_its_run.py").read_text()
    assert "    timeout_s = 60\n" in killer
    (scrapers / "kills_its_run.py").write_text(killer.replace("    timeout_s = 60\n", "    timeout_s = 240\n"))
    go = fleet_env.tmp / "go"  # kills_its_run scrapes until it exists, then SIGKILLs its run's process
    before = len(log(fleet_env.remote))
    with Postgres() as pg:
        env = {**fleet_env.env, "FLEET_POSTGRES_URL": pg.url, "FLEET_ARTIFACTS": str(artifacts),
               "FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_TEST_COUNTER_DIR": str(counters),
               "FLEET_RUN_MONITOR_S": str(MONITOR_S), "FLEET_TEST_KILL_RUN": "SIGKILL",
               "FLEET_TEST_KILL_WHEN": str(go), "FLEET_TEST_THEN": "ok",
               # its scraper stands in for a dying machine by killing fleet's own run process, which a sandboxed
               # attempt rightly cannot (as in test_daemon)
               "FLEET_SANDBOX": "off"}
        here = {**env, "DAGSTER_HOME": str(fleet_env.home / "dagster")}
        there_home = fleet_env.tmp / "there"
        there_home.mkdir()
        there = {**env, "FLEET_HOME": str(there_home)}
        # the instance's tables, made once before the two hosts start together (each would make them at once)
        from dagster import DagsterInstance

        monkeypatch.setenv("FLEET_POSTGRES_URL", pg.url)  # what the dagster.yaml names (env: FLEET_POSTGRES_URL)
        init = fleet_env.tmp / "pg-init"
        init.mkdir()
        (init / "dagster.yaml").write_text("storage:\n  postgres:\n    postgres_url:\n      env: FLEET_POSTGRES_URL\n")
        DagsterInstance.from_config(str(init)).dispose()
        # the other host's `fleet run` and this host's `fleet ui` start together
        out, err = open(fleet_env.tmp / "run.out", "w"), open(fleet_env.tmp / "run.err", "w")
        cmd = f"hostname {OTHER} && exec {sys.executable} -m fleet.cli run --week {WEEK} --force"
        run_proc = subprocess.Popen(["unshare", "--uts", "sh", "-c", cmd], env=there, cwd=there_home,
                                    stdout=out, stderr=err)
        ui = None
        try:
            ui, _port = start_ui(fleet_env, here)
            instance = DagsterInstance.from_config(str(fleet_env.home / "dagster"))

            def said():
                return ((fleet_env.tmp / "run.out").read_text()[-3000:] + (fleet_env.tmp / "run.err").read_text()[-5000:]
                        + (fleet_env.tmp / "ui.log").read_text()[-3000:])

            deadline = time.monotonic() + 180
            while True:  # steady is done and kills_its_run scrapes, in the other host's run
                runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
                done = {e.dagster_event.step_key for r in runs
                        for e in instance.all_logs(r.run_id, of_type=DagsterEventType.STEP_SUCCESS)}
                if "raw__steady" in done and (counters / "kills_its_run").exists():
                    break
                assert run_proc.poll() is None and time.monotonic() < deadline, said()
                time.sleep(0.5)
            [run] = runs
            worker = json.loads(run.tags[TAG])
            assert worker["host"] == OTHER and worker["pid"] == run_proc.pid, worker

            # five monitoring intervals and more, beyond the staleness bound: the daemon checks the run, sees the
            # beats change and never fails it
            checked_before = (fleet_env.tmp / "ui.log").read_text().count(f"Checking run {run.run_id}")
            first_beat = json.loads(instance.get_run_by_id(run.run_id).tags[BEAT_TAG])
            time.sleep(max(5 * MONITOR_S, STALE_BEATS * beat_period(MONITOR_S)) + MONITOR_S)
            now = instance.get_run_by_id(run.run_id)
            assert now.status == DagsterRunStatus.STARTED, said()
            assert not instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)
            assert json.loads(now.tags[BEAT_TAG])["n"] > first_beat["n"] + 3
            checks = (fleet_env.tmp / "ui.log").read_text().count(f"Checking run {run.run_id}") - checked_before
            assert checks >= 4, f"run monitoring checked the run {checks} times\n{said()}"

            go.touch()  # kills_its_run SIGKILLs `fleet run` (the run's worker) and its own step
            assert run_proc.wait(60) == -9, said()
            killed_at = time.time()

            deadline = time.monotonic() + 240
            while True:
                runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
                kinds = sorted((r.tags.get("fleet/kind"), r.status.value) for r in runs)
                if any(r.tags.get("fleet/kind") == "publish" and r.is_finished for r in runs):
                    break
                assert time.monotonic() < deadline, f"{kinds}\n{said()}"
                time.sleep(1)
            assert kinds == [("publish", "SUCCESS"), ("rerun", "SUCCESS"), ("scrape", "FAILURE")], kinds
            [failure] = instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)
            assert "Detected run worker status FAILED" in failure.message, failure.message  # Dagster's run monitoring
            assert f"the run's worker (pid {worker['pid']}) on host {OTHER} is gone: its heartbeat" in failure.message
            # failed by the heartbeat's silence, long before the 180 s start timeout could have
            assert failure.timestamp - killed_at < 60, failure.timestamp - killed_at
            rerun = next(r for r in runs if r.tags.get("fleet/kind") == "rerun")
            assert sorted(k.to_user_string() for k in rerun.asset_selection) == ["raw/kills_its_run"]
            assert rerun.tags["fleet/recovers"] == run.run_id
            assert json.loads(rerun.tags[TAG])["host"] != OTHER  # the daemon's host executed it
            print(f"failed {failure.timestamp - killed_at:.1f} s after the kill; "
                  f"published {time.time() - killed_at:.1f} s after it")
        finally:
            if run_proc.poll() is None:
                run_proc.kill()
                run_proc.wait()
            if ui is not None:
                stop_ui(ui)
            from fleet.engine import pool
            pool.stop(there_home / "browser-hosts")
    assert (counters / "kills_its_run").read_text() == "xx"
    assert len(log(fleet_env.remote)) == before + 2
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(set(frame[SOURCE])) == ["kills_its_run", "steady"]
    assert frame.filter(frame[SOURCE] == "kills_its_run").height == 2
