"""The UI path: `fleet ui` (webserver + daemon) runs the week with no CLI driving the policy.

A source's step process SIGKILLed: the run re-executes that step itself, and the daemon's sensor then
consolidates and commits the week. The run's own process killed mid-step: the run fails, its run-failure sensor
re-executes only the step it left behind, within the week's crash budget, then consolidates and commits."""
import contextlib
import json
import os
import signal
import time
from types import SimpleNamespace

from fleet_tests.conftest import ROOT, SOURCE, WEEK, committed_rows, start_ui, stop_ui, writable_dir
from fleet_tests.gitremote import log




@contextlib.contextmanager
def _ui(fleet_env, scrapers: dict, extra_env: dict):
    """`fleet ui` on a free port with these scraper modules ({name: source file}), its daemon's sensors ticking;
    yields (submit, instance, counters, ui): submit() launches a scrape_week run of WEEK as the UI's button does;
    ui.crash() SIGKILLs the whole `fleet ui` (webserver, daemon, code server, the runs' workers and their steps:
    one process group, as the OOM killer or a reboot would), ui.restart() starts it again on the same home."""
    d = fleet_env.tmp / "scrapers"
    d.mkdir()
    for name, path in scrapers.items():
        (d / f"{name}.py").write_text(path.read_text())
    counters = writable_dir(fleet_env.home)
    # FLEET_SANDBOX=off: crash_once and kills_its_run stand for a crash of fleet's own step or run process by
    # killing it from the scraper, which a sandboxed scraper (another user) rightly may not do
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d), "FLEET_TEST_COUNTER_DIR": str(counters),
           "DAGSTER_HOME": str(fleet_env.home / "dagster"), "FLEET_SANDBOX": "off", **extra_env}
    current = {}
    current["ui"], current["port"] = start_ui(fleet_env, env)
    try:
        from dagster_graphql import DagsterGraphQLClient

        def submit():
            client = DagsterGraphQLClient("127.0.0.1", port_number=current["port"])
            # WEEK is past: as an operator would, the launch sets the force tag (fleet/policy/pastweek.py)
            return client.submit_job_execution("scrape_week", tags={"dagster/partition": WEEK, "fleet/force": "true"})

        def crash():
            old = current.pop("ui")
            os.killpg(old.pid, signal.SIGKILL)
            old.wait()
            deadline = time.monotonic() + 30
            while _session(old.pid):  # every process of that session is gone
                assert time.monotonic() < deadline, f"left running: {_session(old.pid)}"
                time.sleep(0.2)

        def restart():
            current["ui"], current["port"] = start_ui(fleet_env, env)

        os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
        from dagster import DagsterInstance
        with DagsterInstance.get() as instance:
            yield submit, instance, counters, SimpleNamespace(crash=crash, restart=restart)
    finally:
        if "ui" in current:
            stop_ui(current["ui"])


def _session(sid: int) -> list[int]:
    """The live processes of session ``sid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] not in ("Z", "X"):  # field 6: session; field 3: state
                found.append(int(entry))
    return found


def _wait_for_publish(fleet_env, instance, timeout=300):
    from dagster import DagsterRunStatus, RunsFilter
    deadline = time.monotonic() + timeout
    while True:
        runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
        kinds = sorted((r.tags.get("fleet/kind", "ui"), r.status.value) for r in runs)
        if any(r.tags.get("fleet/kind") == "publish" and r.is_finished for r in runs):
            return runs, kinds
        assert time.monotonic() < deadline, f"{kinds}\n" + (fleet_env.tmp / "ui.log").read_text()[-5000:]
        time.sleep(2)


def test_daemon_run_reexecutes_a_crashed_step_itself_and_the_sensor_publishes(fleet_env):
    crash = ROOT / "fleet_tests" / "scrapers_crash"
    before = len(log(fleet_env.remote))
    scrapers = {n: crash / f"{n}.py" for n in ("crash_once", "steady")}
    with _ui(fleet_env, scrapers, {}) as (submit, instance, counters, _):
        submit()
        from dagster import DagsterEventType
        runs, kinds = _wait_for_publish(fleet_env, instance)
        # crash_once was SIGKILLed and re-executed in the run, so no second pass was needed
        assert kinds == [("publish", "SUCCESS"), ("ui", "SUCCESS")]
        ui_run = next(r for r in runs if "fleet/kind" not in r.tags)
        retried = [e.dagster_event.step_key for e in
                   instance.all_logs(ui_run.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)]
        assert retried == ["raw__crash_once"]
    assert (counters / "crash_once").read_text() == "xx"
    assert len(log(fleet_env.remote)) == before + 2
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(set(frame[SOURCE])) == ["crash_once", "steady"]


def test_daemon_sensor_reruns_only_the_step_a_dead_run_left_within_the_budget(fleet_env):
    """FLEET_CRASH_RERUNS=2. The run's own process is stopped (SIGTERM, as a shutdown sends) while kills_its_run
    scrapes and after steady succeeded and raises failed: Dagster interrupts the step (it asks for a retry that
    never runs) and fails the run, which no retry policy answers. The run-failure sensor re-executes
    kills_its_run alone; it crashes there (SIGKILL of its step), its in-run retry crashes again, and the next
    retry, beyond the week's budget, is refused before it scrapes: 1 + N executions. The sensor then
    consolidates and commits the week with steady. Before, the rerun run had N retries of its own (4
    executions); counting the retry that was asked for but never ran, one re-execution was lost (2)."""
    crash, dead = ROOT / "fleet_tests" / "scrapers_crash", ROOT / "fleet_tests" / "scrapers_deadrun"
    go = fleet_env.tmp / "go"
    scrapers = {"steady": crash / "steady.py", "raises": crash / "raises.py", "kills_its_run": dead / "kills_its_run.py"}
    extra = {"FLEET_CRASH_RERUNS": "2", "FLEET_TEST_KILL_RUN": "SIGTERM", "FLEET_TEST_THEN": "crash",
             "FLEET_TEST_KILL_WHEN": str(go)}
    before = len(log(fleet_env.remote))
    with _ui(fleet_env, scrapers, extra) as (submit, instance, counters, _):
        submit()
        from dagster import DagsterEventType, RunsFilter
        deadline = time.monotonic() + 180
        while not go.exists():  # kills_its_run is scraping; steady and raises are done: stop the run's process
            runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
            ends = {(e.dagster_event.step_key, e.dagster_event.event_type_value) for r in runs for e in
                    instance.all_logs(r.run_id, of_type={DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE})}
            if {("raw__steady", "STEP_SUCCESS"), ("raw__raises", "STEP_FAILURE")} <= ends \
                    and (counters / "kills_its_run").exists():
                go.touch()
            assert time.monotonic() < deadline, f"{ends}\n" + (fleet_env.tmp / "ui.log").read_text()[-5000:]
            time.sleep(0.5)
        runs, kinds = _wait_for_publish(fleet_env, instance)
        assert kinds == [("publish", "SUCCESS"), ("rerun", "FAILURE"), ("ui", "FAILURE")]
        assert (counters / "kills_its_run").read_text() == "xxx"  # 1 + N, the refused retry scraped nothing
        ui_run = next(r for r in runs if "fleet/kind" not in r.tags)
        rerun = next(r for r in runs if r.tags.get("fleet/kind") == "rerun")
        assert sorted(k.to_user_string() for k in rerun.asset_selection) == ["raw/kills_its_run"]  # only the crash
        assert rerun.tags["fleet/recovers"] == ui_run.run_id and rerun.tags["fleet/attempt"] == "2"
        assert instance.get_run_by_id(ui_run.run_id).tags["fleet/failure"] == "mixed"  # raises: source
        failures = {e.dagster_event.step_key: e.dagster_event.step_failure_data for e in
                    instance.all_logs(rerun.run_id, of_type=DagsterEventType.STEP_FAILURE)}
        refused = failures["raw__kills_its_run"].user_failure_data.description
        assert refused.startswith("[infra] crash budget exhausted (2 re-executions this week)"), refused
    assert (counters / "raises").read_text() == "x"          # a bug is never re-executed
    assert len(log(fleet_env.remote)) == before + 2
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(set(frame[SOURCE])) == ["steady"]


def test_daemon_run_whose_worker_was_killed_is_failed_by_monitoring_and_followed_up(fleet_env):
    """The whole `fleet ui` is SIGKILLed (one process group: the code server that started the run's worker,
    the worker, its steps) while kills_its_run scrapes and after steady succeeded, and `fleet ui` is started
    again. The code server that would have noticed its worker's death died with it, so the run is left
    STARTED. Run monitoring (FLEET_RUN_MONITOR_S=2) finds the process the run's fleet/run_worker tag names
    gone and fails the run; the run-failure sensor gives back the dead steps' pool claims and re-executes
    kills_its_run alone (attempt 2, two rows), then consolidates and commits the week with both sources.
    Before (DefaultRunLauncher, no worker check), the run stayed STARTED and, one run per partition, so did
    the week: no rerun and no commit until the wait below gives up."""
    crash, dead = ROOT / "fleet_tests" / "scrapers_crash", ROOT / "fleet_tests" / "scrapers_deadrun"
    never = fleet_env.tmp / "never"  # kills_its_run waits for it, scraping, until the test kills everything
    scrapers = {"steady": crash / "steady.py", "kills_its_run": dead / "kills_its_run.py"}
    extra = {"FLEET_RUN_MONITOR_S": "2", "FLEET_TEST_KILL_WHEN": str(never), "FLEET_TEST_THEN": "ok"}
    before = len(log(fleet_env.remote))
    with _ui(fleet_env, scrapers, extra) as (submit, instance, counters, ui):
        submit()
        from dagster import DagsterEventType, DagsterRunStatus, RunsFilter
        deadline = time.monotonic() + 120
        while True:  # steady is done, kills_its_run is scraping
            runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
            done = {e.dagster_event.step_key for r in runs
                    for e in instance.all_logs(r.run_id, of_type=DagsterEventType.STEP_SUCCESS)}
            if "raw__steady" in done and (counters / "kills_its_run").exists():
                break
            assert time.monotonic() < deadline, f"{done}\n" + (fleet_env.tmp / "ui.log").read_text()[-5000:]
            time.sleep(0.5)
        [ui_run] = runs
        from fleet.defs.runworker import TAG, process_start
        worker = json.loads(ui_run.tags[TAG])
        started = [e.message for e in instance.all_logs(ui_run.run_id, of_type=DagsterEventType.ENGINE_EVENT)
                   if e.message.startswith("Started process for run")]
        assert started == [f"Started process for run (pid: {worker['pid']})."]  # the tag names the run's worker
        claimed = {c.run_id for c in instance.event_log_storage.get_concurrency_info("scrapers").claimed_slots}
        assert ui_run.run_id in claimed  # kills_its_run's step holds its slot

        ui.crash()
        assert process_start(worker["pid"]) is None
        time.sleep(3)
        assert instance.get_run_by_id(ui_run.run_id).status == DagsterRunStatus.STARTED  # nobody saw it die
        ui.restart()

        runs, kinds = _wait_for_publish(fleet_env, instance, timeout=120)
        assert kinds == [("publish", "SUCCESS"), ("rerun", "SUCCESS"), ("ui", "FAILURE")]
        failure = [e.message for e in instance.all_logs(ui_run.run_id, of_type=DagsterEventType.RUN_FAILURE)]
        assert len(failure) == 1 and f"the run's worker process (pid {worker['pid']}) is gone" in failure[0], failure
        assert "Detected run worker status FAILED" in failure[0]  # Dagster's run monitoring failed it
        rerun = next(r for r in runs if r.tags.get("fleet/kind") == "rerun")
        assert sorted(k.to_user_string() for k in rerun.asset_selection) == ["raw/kills_its_run"]
        assert rerun.tags["fleet/recovers"] == ui_run.run_id and rerun.tags["fleet/attempt"] == "2"
        assert all(TAG in r.tags for r in runs)  # every run's worker recorded itself, the publish run's too
        claimed = {c.run_id for c in instance.event_log_storage.get_concurrency_info("scrapers").claimed_slots}
        assert ui_run.run_id not in claimed
    assert (counters / "kills_its_run").read_text() == "xx"
    assert len(log(fleet_env.remote)) == before + 2
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(set(frame[SOURCE])) == ["kills_its_run", "steady"]
    assert frame.filter(frame[SOURCE] == "kills_its_run").height == 2
