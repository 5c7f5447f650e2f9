"""Infra vs source failures from real crashes in real multiprocess runs, and bounded re-execution of crashed steps only."""
import json
import os
import subprocess
import sys
import textwrap

from fleet_tests.conftest import ROOT, SOURCE, WEEK, committed_rows, run_fleet, stored_outcome, writable_dir
from fleet_tests.gitremote import log

CRASH_DIR = ROOT / "fleet_tests" / "scrapers_crash"


def _env(fleet_env, reruns=2):
    counters = writable_dir(fleet_env.home)
    # FLEET_SANDBOX=off: crash_once, crash_always and kills_its_run stand for a crash of fleet's own step or run
    # process by SIGKILLing it from the scraper, which a sandboxed scraper (another user) rightly may not do
    return {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(CRASH_DIR), "FLEET_CRASH_RERUNS": str(reruns),
            "FLEET_TEST_COUNTER_DIR": str(counters), "FLEET_SANDBOX": "off"}, counters


def _runs(counters, name):
    p = counters / name
    return len(p.read_text()) if p.exists() else 0


def test_crashed_sources_are_reexecuted_at_most_n_times_and_bugs_never(fleet_env):
    env, counters = _env(fleet_env, reruns=2)
    before = log(fleet_env.remote)
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 1, res.stdout[-4000:] + res.stderr[-4000:]
    assert _runs(counters, "crash_once") == 2      # SIGKILLed once, re-executed inside the run, recovered on attempt 2
    assert _runs(counters, "crash_always") == 3    # 1 + N, then reported
    assert _runs(counters, "raises") == 1          # a bug is never re-executed
    # exactly one week of commits, after the last attempt, including the recovered source
    new = log(fleet_env.remote)[: -len(before)]
    assert [c["subject"].split(" rows")[0] for c in new] == ["fleet: processed", "fleet: raw"]
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(set(frame[SOURCE])) == ["crash_once", "steady"]
    assert "crash_always (failed, infra)" in new[1]["message"] and "raises (failed, source)" in new[1]["message"]

    status = run_fleet(env, "status", "--week", WEEK).stdout
    line = {l.split()[0]: l for l in status.splitlines()[2:]}
    assert line["crash_once"].split()[1:3] == ["ok", "-"] and "recovered from infra failure on attempt 2" in line["crash_once"]
    assert line["crash_always"].split()[1:3] == ["failed", "infra"] and "infra failure on all 3 attempts" in line["crash_always"]
    assert line["raises"].split()[1:3] == ["failed", "source"] and line["raises"].split()[5] == "1"

    # The crashes were re-executed inside the scrape run (no second pass over the week), and only they were:
    # the failed run carries its category as a tag.
    os.environ["DAGSTER_HOME"] = str(fleet_env.home / "dagster")
    from dagster import DagsterEventType, DagsterInstance, RunsFilter
    with DagsterInstance.get() as instance:
        runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
        tags = sorted(r.tags.get("fleet/failure", "-") for r in runs)
        kinds = sorted(r.tags.get("fleet/kind") for r in runs)
        scrape = next(r for r in runs if r.tags.get("fleet/kind") == "scrape")
        retried = sorted(e.dagster_event.step_key for e in
                         instance.all_logs(scrape.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY))
    assert kinds == ["publish", "scrape"]
    assert tags == ["-", "mixed"]  # scrape: infra + source; publish: none
    assert retried == ["raw__crash_always", "raw__crash_always", "raw__crash_once"]


SENSOR_SCRIPT = textwrap.dedent("""
    import json
    import os
    from dagster import DagsterEventType, execute_job, reconstructable, build_run_status_sensor_context, DagsterInstance
    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    from fleet.config import settings

    if __name__ == "__main__":
        instance = get_instance(settings())
        # A real run, launched as the UI would (no CLI driver tag), in which crash_once is SIGKILLed. This
        # process has FLEET_CRASH_RERUNS=0, so the run re-executes nothing itself: what is left to the sensor is
        # what a run leaves when its own process dies. The sensor, in definitions loaded with a budget of 2
        # (as the daemon's code server would load them), then gets that budget.
        # WEEK is past: the force tag lets the run scrape it (fleet/policy/pastweek.py)
        result = execute_job(reconstructable(d.scrape_week_job), instance,
                             tags={"dagster/partition": "%s", "fleet/force": "true"})
        os.environ["FLEET_CRASH_RERUNS"] = "2"
        run = instance.get_run_by_id(result.run_id)
        failure = [e for e in instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)][0]
        sensor = [s for s in d.build_defs().sensors if s.name == "fleet_after_failed_run"][0]
        ctx = build_run_status_sensor_context(sensor_name=sensor.name, dagster_event=failure.dagster_event,
                                              dagster_instance=instance, dagster_run=run)
        req = sensor(ctx)
        print(json.dumps({"status": str(run.status), "selection": sorted(k.to_user_string() for k in req.asset_selection),
                          "tags": dict(req.tags), "partition": req.partition_key, "job": req.job_name,
                          "failure_tag": instance.get_run_by_id(run.run_id).tags.get("fleet/failure")}))
""" % WEEK)


def test_run_failure_sensor_requests_only_the_crashed_steps(fleet_env):
    env, counters = _env(fleet_env, reruns=0)
    script = fleet_env.tmp / "sensor_check.py"
    script.write_text(SENSOR_SCRIPT)
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300,
                         cwd=fleet_env.home)
    assert res.returncode == 0, res.stderr[-4000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["status"] == "DagsterRunStatus.FAILURE"
    assert out["selection"] == ["raw/crash_always", "raw/crash_once"]  # not raises (source), not steady (ok)
    assert out["job"] == "scrape_week" and out["partition"] == WEEK
    assert out["tags"]["fleet/kind"] == "rerun" and out["tags"]["fleet/attempt"] == "2"
    assert out["failure_tag"] == "mixed"


def _stale_checkpoint(fleet_env, name):
    """A checkpoint an earlier scrape of the week left: ``--refresh`` must clear it, once."""
    work = fleet_env.home / "artifacts" / WEEK / "work" / name
    work.mkdir(parents=True)
    (work / "checkpoint.json").write_text(json.dumps({"crashed": True}))


def test_refresh_clears_the_week_once_and_a_crash_re_execution_resumes(fleet_env):
    """crash_once with --refresh: the refresh clears the stale checkpoint (so the first attempt crashes), and the
    in-run re-execution resumes from the crashed attempt's checkpoint instead of clearing it again (which made
    every attempt crash: infra on all 3)."""
    env, counters = _env(fleet_env, reruns=2)
    _stale_checkpoint(fleet_env, "crash_once")
    res = run_fleet(env, "run", "--week", WEEK, "--source", "crash_once", "--refresh", "--force")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert _runs(counters, "crash_once") == 2  # cleared once (else 1), resumed on the re-execution (else 3)
    frame = committed_rows(fleet_env.remote, WEEK)
    assert frame[SOURCE].to_list() == ["crash_once", "crash_once"]


RERUN_SCRIPT = textwrap.dedent("""
    import json
    import sys
    from dagster import AssetKey, DagsterEventType, execute_job, reconstructable, build_run_status_sensor_context
    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    from fleet.config import settings

    if __name__ == "__main__":
        instance = get_instance(settings())
        if sys.argv[1] == "first":
            # As the UI would, with refresh on: FLEET_CRASH_RERUNS=0 in this process, so the run re-executes
            # nothing itself and the sensor's rerun run (with the same config) is the re-execution.
            first = execute_job(reconstructable(d.scrape_week_job), instance,
                                tags={"dagster/partition": "%s", "fleet/force": "true"},
                                run_config={"ops": {"raw__crash_once": {"config": {"refresh": True}}}},
                                asset_selection=[AssetKey(["raw", "crash_once"])], raise_on_error=False)
            print(json.dumps({"first": first.success, "run_id": first.run_id}))
            sys.exit(0)
        # A second process with FLEET_CRASH_RERUNS=2 (a setting is read when a process starts: the steps are
        # forked from a server that has it): the sensor, then the rerun run it asks for.
        run = instance.get_run_by_id(sys.argv[2])
        failure = [e for e in instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)][0]
        sensor = [s for s in d.defs.sensors if s.name == "fleet_after_failed_run"][0]
        req = sensor(build_run_status_sensor_context(sensor_name=sensor.name, dagster_event=failure.dagster_event,
                                                     dagster_instance=instance, dagster_run=run))
        rerun = execute_job(reconstructable(d.scrape_week_job), instance, run_config=req.run_config,
                            tags={**req.tags, "dagster/partition": req.partition_key},
                            asset_selection=req.asset_selection, raise_on_error=False)
        print(json.dumps({"config": req.run_config, "rerun": rerun.success}))
""" % WEEK)


def test_a_rerun_run_of_a_refreshed_week_resumes_the_crashed_attempt(fleet_env):
    env, counters = _env(fleet_env, reruns=0)
    _stale_checkpoint(fleet_env, "crash_once")
    script = fleet_env.tmp / "rerun_check.py"
    script.write_text(RERUN_SCRIPT)
    res = subprocess.run([sys.executable, str(script), "first"], env=env, capture_output=True, text=True,
                         timeout=300, cwd=fleet_env.home)
    assert res.returncode == 0, res.stderr[-4000:]
    first = json.loads(res.stdout.strip().splitlines()[-1])
    assert first["first"] is False
    res = subprocess.run([sys.executable, str(script), "rerun", first["run_id"]],
                         env={**env, "FLEET_CRASH_RERUNS": "2"}, capture_output=True, text=True, timeout=300,
                         cwd=fleet_env.home)
    assert res.returncode == 0, res.stderr[-4000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["config"]["ops"]["raw__crash_once"]["config"]["refresh"] is True  # the rerun carries the refresh
    assert out["rerun"] is True, res.stderr[-4000:]
    assert _runs(counters, "crash_once") == 2
    outcome = stored_outcome(fleet_env.home, "crash_once")
    assert (outcome["status"], outcome["rows"]) == ("ok", 2)


DEAD_RUN_DIR = ROOT / "fleet_tests" / "scrapers_deadrun"
DEAD_RUN_SCRIPT = textwrap.dedent("""
    import json
    import os
    import sys
    from dagster import AssetKey, DagsterRunStatus, execute_job, reconstructable
    from fleet.config import settings
    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    from fleet.policy.followup import follow_up_request
    from fleet.storage.store import LocalArtifactStore
    from fleet.policy import taxonomy as tx
    from fleet.policy.status import week_status
    from fleet.storage import store as keys
    from fleet.transform.consolidate import consolidate

    WEEK = "%s"

    def artifact_store():
        return LocalArtifactStore(settings().store_root)

    if __name__ == "__main__":
        instance, mode = get_instance(settings()), sys.argv[1]
        tags = {tx.PARTITION_TAG: WEEK, "fleet/force": "true", **json.loads(sys.argv[2] if len(sys.argv) > 2 else "{}")}
        if mode == "run":       # a real multiprocess run of the selected sources
            selection = [AssetKey(["raw", n]) for n in sys.argv[3:]] or None
            os.environ["FLEET_TEST_RUN_PID"] = str(os.getpid())  # kills_its_run's target: this process
            result = execute_job(reconstructable(d.scrape_week_job), instance, tags=tags, asset_selection=selection)
            print(json.dumps({"run_id": result.run_id, "success": result.success}))
        elif mode == "follow":  # what the sensor (or fleet run) does after the run
            store = artifact_store()
            run = [r for r in instance.get_runs() if r.status == DagsterRunStatus.STARTED][0]
            claimed = [c.run_id for c in instance.event_log_storage.get_concurrency_info("scrapers").claimed_slots]
            # what Dagster's run monitoring does with a run whose worker is gone: fail it, and give back its slots
            instance.report_run_failed(run, "its process is gone")
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            run = instance.get_run_by_id(run.run_id)
            outcomes = {s: o.status for s, o in tx.run_outcomes(instance, run, store).items()}
            with_budget = tx.next_action(instance, run, 2, store)
            action, request = follow_up_request(instance, run, int(os.environ["FLEET_CRASH_RERUNS"]), store)
            summary = consolidate(store, WEEK, ["kills_its_run", "steady"])
            stored = {n: keys.read_outcome(store, WEEK, n) or {} for n in ("kills_its_run", "steady")}
            print(json.dumps({
                "claimed": [r == run.run_id for r in claimed],
                "claimed_after": len(instance.event_log_storage.get_concurrency_info("scrapers").claimed_slots),
                "outcomes": outcomes, "rerun_with_budget": [with_budget.kind, with_budget.sources],
                "action": action.kind, "stored": {n: [r.get("status"), r.get("run_id")] for n, r in stored.items()},
                "included": summary["included"], "missing": sorted(summary["missing"]),
                "status": {r.source: [r.status, r.category, r.rows, r.attempts] for r in
                           week_status(instance, store, WEEK, ["kills_its_run", "steady"])}}))
        elif mode == "policy":  # the policy after the week's last run, and the rerun it asks for, executed
            run = sorted(instance.get_run_records(), key=lambda r: r.create_timestamp)[-1].dagster_run
            action, request = follow_up_request(instance, run, int(os.environ["FLEET_CRASH_RERUNS"]), artifact_store())
            out = {"action": action.kind, "sources": action.sources, "exhausted": action.exhausted,
                   "tags": dict(request.tags) if request else None}
            if action.kind == "rerun":
                result = execute_job(reconstructable(d.scrape_week_job), instance, run_config=request.run_config,
                                     tags={tx.PARTITION_TAG: WEEK, **request.tags},
                                     asset_selection=request.asset_selection)
                out["rerun"] = {s: [o.status, o.retries, o.error] for s, o in tx.run_outcomes(instance, instance.get_run_by_id(result.run_id), artifact_store()).items()}
            out["spent"] = tx.crash_reexecutions(instance, WEEK)
            out["status"] = {r.source: [r.status, r.category, r.attempts, r.note] for r in
                             week_status(instance, artifact_store(), WEEK, ["kills_its_run"])}
            print(json.dumps(out))
""" % WEEK)


def _dead_run_env(fleet_env, reruns, then="ok"):
    d = fleet_env.tmp / "scrapers"
    d.mkdir(exist_ok=True)
    (d / "kills_its_run.py").write_text((DEAD_RUN_DIR / "kills_its_run.py").read_text())
    (d / "steady.py").write_text((CRASH_DIR / "steady.py").read_text())
    script = fleet_env.tmp / "dead_run.py"
    script.write_text(DEAD_RUN_SCRIPT)
    env, counters = _env(fleet_env, reruns)
    # one step at a time, kills_its_run's first: steady's step is still waiting when the run process dies
    env.update(FLEET_SCRAPERS_DIR=str(d), FLEET_MAX_PARALLEL="1", FLEET_TEST_THEN=then)

    def script_run(*args, check=True):
        res = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True,
                             timeout=300, cwd=fleet_env.home)
        if check:
            assert res.returncode == 0, res.stderr[-4000:]
        return res
    return script_run, counters


def test_a_dead_run_never_costs_a_source_its_stored_rows(fleet_env):
    """A week whose `steady` rows are stored by an earlier run; a second run's process is SIGKILLed (by
    kills_its_run, whose own step dies with it) before steady's step starts. steady keeps its stored outcome
    and rows: it is not re-executed, not marked failed, and consolidation takes it."""
    script_run, counters = _dead_run_env(fleet_env, reruns=0)
    first = json.loads(script_run("run", "{}", "steady").stdout.strip().splitlines()[-1])
    assert first["success"]
    killed = script_run("run", "{}", check=False)
    assert killed.returncode == -9, killed.stderr[-3000:]   # the run process was SIGKILLed mid-run
    assert _runs(counters, "kills_its_run") == 1
    out = json.loads(script_run("follow").stdout.strip().splitlines()[-1])
    # the pool admits 2 x the cap (fleet/engine/slot.py): steady's step may have started beside the one that killed
    # the run, and then reused its stored rows without scraping; either way its pool slot is given back too
    assert all(out["claimed"]) and len(out["claimed"]) in (1, 2) and out["claimed_after"] == 0
    assert out["outcomes"]["kills_its_run"] == "interrupted"
    assert out["outcomes"]["steady"] in ("not started", "succeeded"), out["outcomes"]
    assert out["rerun_with_budget"] == ["rerun", ["kills_its_run"]]  # N=2: only the source that crashed
    assert out["action"] == "publish"                                 # N=0: straight to consolidation
    assert out["stored"]["steady"] == ["ok", first["run_id"]]         # the earlier run's outcome, untouched
    assert out["stored"]["kills_its_run"][0] == "failed"              # the crash is recorded where nothing was
    assert out["included"] == {"steady": 3} and out["missing"] == ["kills_its_run"]
    assert out["status"]["steady"][:3] == ["ok", None, 3]             # its stored outcome and rows
    assert out["status"]["kills_its_run"] == ["failed", "infra", 0, 1]


def test_the_crash_budget_is_per_week_across_runs(fleet_env):
    """N=2 re-executions of a crashed source per week, however they come: its first run's process dies with
    it (SIGKILL), the sensor's rerun run crashes it again and its in-run retry crashes it once more, and the
    next retry is refused; so is a second run's retry. Before, the rerun run had N retries of its own (4
    executions) and every later run of the week N more."""
    script_run, counters = _dead_run_env(fleet_env, reruns=2, then="crash")
    killed = script_run("run", json.dumps({"fleet/kind": "scrape"}), "kills_its_run", check=False)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert _runs(counters, "kills_its_run") == 1
    reaped = json.loads(script_run("follow").stdout.strip().splitlines()[-1])  # marks the dead run failed
    assert reaped["outcomes"] == {"kills_its_run": "interrupted"}
    assert reaped["claimed"] == [True] and reaped["claimed_after"] == 0  # the dead step's pool slot is given back

    out = json.loads(script_run("policy").stdout.strip().splitlines()[-1])
    assert out["action"] == "rerun" and out["sources"] == ["kills_its_run"] and out["tags"]["fleet/attempt"] == "2"
    assert _runs(counters, "kills_its_run") == 3    # 1 + N: the rerun run's start and one in-run retry
    status, retries, error = out["rerun"]["kills_its_run"]
    assert (status, retries) == ("failed", 2)      # its second retry started, and was refused
    assert error.startswith("[infra] crash budget exhausted (2 re-executions this week)"), error
    assert out["spent"] == {"kills_its_run": 3}    # the rerun, two retries (the last one refused)

    out = json.loads(script_run("policy").stdout.strip().splitlines()[-1])
    assert out["action"] == "publish" and out["exhausted"] == ["kills_its_run"]
    assert out["status"]["kills_its_run"][:3] == ["failed", "infra", 3]
    assert "infra failure on all 3 attempts" in out["status"]["kills_its_run"][3]

    # a second run of the week (as `fleet run` starts one): its first attempt scrapes, its retry is refused
    again = json.loads(script_run("run", json.dumps({"fleet/kind": "scrape"}), "kills_its_run").stdout.strip().splitlines()[-1])
    assert not again["success"]
    assert _runs(counters, "kills_its_run") == 4
    out = json.loads(script_run("policy").stdout.strip().splitlines()[-1])
    assert out["action"] == "publish" and out["exhausted"] == ["kills_its_run"]
    assert out["spent"] == {"kills_its_run": 4}


def test_a_failure_s_category_is_what_fleet_recorded_never_dagster_s_exception_class(tmp_path):
    """Real steps in a real run: the category of a failed step comes from the category its Failure carries, else
    from the outcome its attempt stored, else (nothing recorded: a kill) infra. An exception that merely bears
    the name of Dagster's crash class is no crash, and a plain exception with nothing recorded is no source fault."""
    from dagster import AssetKey, DagsterInstance, Failure, StaticPartitionsDefinition, asset, materialize

    from fleet.policy import taxonomy as tx
    from fleet.engine import outcome
    from fleet.storage.store import LocalArtifactStore

    store = LocalArtifactStore(tmp_path / "artifacts")
    week = StaticPartitionsDefinition([WEEK])

    class ChildProcessCrashException(Exception):  # the name Dagster gives a crashed step process
        pass

    @asset(key=AssetKey(["raw", "recorded"]), partitions_def=week)
    def recorded(context):
        outcome.failed(store, "recorded", WEEK, context.run.run_id, "the price column moved", "source")
        raise ChildProcessCrashException("named like a crash, recorded as the source's fault")

    @asset(key=AssetKey(["raw", "unrecorded"]), partitions_def=week)
    def unrecorded(context):
        raise RuntimeError("ended before its attempt recorded anything")

    @asset(key=AssetKey(["raw", "told"]), partitions_def=week)
    def told(context):
        raise Failure(description="[blocked] HTTP 403", metadata={"fleet/category": "blocked"}, allow_retries=False)

    @asset(key=AssetKey(["raw", "earlier"]), partitions_def=week)
    def earlier(context):
        raise ValueError("its stored outcome is another run's")

    outcome.failed(store, "earlier", WEEK, "another-run", "an older failure", "source")
    with DagsterInstance.ephemeral() as instance:
        result = materialize([recorded, unrecorded, told, earlier], instance=instance, partition_key=WEEK,
                             raise_on_error=False)
        run = instance.get_run_by_id(result.run_id)
        found = {s: (o.status, o.category) for s, o in tx.run_outcomes(instance, run, store).items()}
    assert found == {"recorded": ("failed", "source"), "unrecorded": ("failed", "infra"),
                     "told": ("failed", "blocked"), "earlier": ("failed", "infra")}
