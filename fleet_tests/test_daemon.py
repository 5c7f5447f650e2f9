"""The UI path: `fleet ui` (webserver + daemon) launches a scrape run in which a source's step process is SIGKILLed;
the run re-executes that step itself, and the daemon's sensor then consolidates and commits the week — no CLI
driving the policy."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from fleet_tests.conftest import ROOT, WEEK, committed_frame
from fleet_tests.gitremote import log


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_daemon_sensors_recover_a_crash_and_publish_the_week(fleet_env):
    d = fleet_env.tmp / "scrapers"
    d.mkdir()
    for name in ("crash_once", "steady"):
        (d / f"{name}.py").write_text((ROOT / "fleet_tests" / "scrapers_crash" / f"{name}.py").read_text())
    counters = fleet_env.tmp / "counters"
    counters.mkdir()
    port = _free_port()
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d), "FLEET_TEST_COUNTER_DIR": str(counters),
           "DAGSTER_HOME": str(fleet_env.home / "dagster")}
    before = len(log(fleet_env.remote))
    ui = subprocess.Popen([sys.executable, "-m", "fleet.cli", "ui", "--port", str(port), "--no-demo"], env=env,
                          cwd=fleet_env.home, stdout=open(fleet_env.tmp / "ui.log", "w"), stderr=subprocess.STDOUT,
                          start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, (fleet_env.tmp / "ui.log").read_text()[-3000:]
                time.sleep(1)
        time.sleep(10)  # let the daemon's sensors take their first tick before the run exists

        from dagster_graphql import DagsterGraphQLClient
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        client.submit_job_execution("scrape_week", tags={"dagster/partition": WEEK})

        os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
        from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
        deadline = time.monotonic() + 300
        with DagsterInstance.get() as instance:
            while True:
                runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
                kinds = {r.tags.get("fleet/kind", "ui"): r.status for r in runs}
                if kinds.get("publish") in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE):
                    break
                assert time.monotonic() < deadline, f"{kinds}\n" + (fleet_env.tmp / "ui.log").read_text()[-5000:]
                time.sleep(2)
            assert kinds["ui"] == DagsterRunStatus.SUCCESS         # crash_once was SIGKILLed and re-executed in the run
            assert "rerun" not in kinds                            # so no second pass was needed
            assert kinds["publish"] == DagsterRunStatus.SUCCESS
            ui_run = next(r for r in runs if "fleet/kind" not in r.tags)
            retried = [e.dagster_event.step_key for e in
                       instance.all_logs(ui_run.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)]
            assert retried == ["raw__crash_once"]
        assert (counters / "crash_once").read_text() == "xx"
        assert len(log(fleet_env.remote)) == before + 2
        frame = committed_frame(fleet_env.remote, f"data/{WEEK}/raw.parquet")
        assert sorted(set(frame["source"])) == ["crash_once", "steady"]
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
