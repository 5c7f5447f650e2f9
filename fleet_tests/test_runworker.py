"""FleetRunLauncher.check_run_worker_health (fleet/defs/compat.py) on fleet's instance, against real processes: the run worker a run's
``fleet/run_worker`` tag names is alive, gone, or its pid now belongs to another process."""
import json
import os
import subprocess
import sys
import time

from dagster import job, op


@op
def _noop():
    pass


@job
def _tiny():
    _noop()


def _instance(fleet_env, monkeypatch):
    for k, v in fleet_env.env.items():
        if k.startswith("FLEET_"):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("FLEET_RUN_MONITOR_S", "3")
    from fleet.config import settings
    from fleet.defs.instance import get_instance
    return get_instance(settings())


def test_check_run_worker_health_on_real_processes(fleet_env, monkeypatch):
    from fleet.defs.compat import FleetRunLauncher
    from fleet.defs.runworker import TAG, identity, process_start

    instance = _instance(fleet_env, monkeypatch)
    assert isinstance(instance.run_launcher, FleetRunLauncher)   # what the generated dagster.yaml configures
    assert instance.run_launcher.supports_check_run_worker_health
    assert instance.run_monitoring_enabled and instance.run_monitoring_poll_interval_seconds == 3
    launcher = instance.run_launcher

    def health(run_id):
        return launcher.check_run_worker_health(instance.get_run_by_id(run_id))

    # tags missing: the run has no worker on record (this run never started, so no grace applies)
    run = instance.create_run_for_job(_tiny)
    res = health(run.run_id)
    assert res.status.name == "UNKNOWN" and TAG in res.msg

    # a real worker: a process that records itself on the run, as fleet's executors do, then waits
    worker = subprocess.Popen(
        [sys.executable, "-c", "import sys; from dagster import DagsterInstance; "
         "from fleet.defs.runworker import record_run_worker; "
         f"record_run_worker(DagsterInstance.get(), {run.run_id!r}); print('ok', flush=True); sys.stdin.read()"],
        env={**os.environ, "PYTHONPATH": fleet_env.env["PYTHONPATH"]}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    try:
        assert worker.stdout.readline().strip() == "ok"
        tag = json.loads(instance.get_run_by_id(run.run_id).tags[TAG])
        assert tag["pid"] == worker.pid and tag["start"] == process_start(worker.pid) is not None
        res = health(run.run_id)
        assert res.status.name == "RUNNING", res
    finally:
        worker.kill()
    time.sleep(0.2)  # exited but not reaped: a zombie is gone too
    assert health(run.run_id).status.name == "FAILED"
    worker.wait()
    res = health(run.run_id)
    assert res.status.name == "FAILED" and res.msg == f"the run's worker process (pid {worker.pid}) is gone", res

    # pid reused: the tag names a pid that lives (this process), but with another start time
    reused = {**identity(), "start": process_start(os.getpid()) - 1}
    instance.add_run_tags(run.run_id, {TAG: json.dumps(reused)})
    res = health(run.run_id)
    assert res.status.name == "FAILED", res
    assert res.msg.startswith(f"the run's worker process (pid {os.getpid()}) is gone (pid {os.getpid()} is now another")

    # the same pid and start time: this very process is alive
    instance.add_run_tags(run.run_id, {TAG: json.dumps(identity())})
    assert health(run.run_id).status.name == "RUNNING"

    # recorded before the last boot: gone, whatever lives at that pid now
    instance.add_run_tags(run.run_id, {TAG: json.dumps({**identity(), "boot": "another-boot"})})
    res = health(run.run_id)
    assert res.status.name == "FAILED" and "rebooted" in res.msg


def test_a_just_started_run_without_its_worker_tag_is_given_time(fleet_env, monkeypatch):
    """The worker records itself as its executor starts, just after RUN_START: until the start timeout a
    started run without the tag is presumed running, after it UNKNOWN (which run monitoring fails)."""
    from fleet.defs.runworker import worker_health

    instance = _instance(fleet_env, monkeypatch)
    run = instance.create_run_for_job(_tiny)
    assert worker_health(run, started_at=time.time() - 1, grace_s=180).status == "RUNNING"
    assert worker_health(run, started_at=time.time() - 181, grace_s=180).status == "UNKNOWN"


def test_a_worker_on_another_host_is_judged_by_its_heartbeat(fleet_env, monkeypatch):
    """A worker on another host: RUNNING while its fleet/heartbeat tag changes between checks (by the checker's
    own clock), FAILED once it has not for STALE_BEATS beat periods; before the first beat, the start grace. A
    real beat thread (runworker.heartbeat) rewrites the tag on the instance."""
    from fleet.defs.runworker import BEAT_TAG, STALE_BEATS, TAG, heartbeat, identity, worker_health

    instance = _instance(fleet_env, monkeypatch)
    run = instance.create_run_for_job(_tiny)
    elsewhere = {**identity(), "host": "another-host", "pid": 1}
    instance.add_run_tags(run.run_id, {TAG: json.dumps(elsewhere)})
    seen = {}

    def health(**kw):
        return worker_health(instance.get_run_by_id(run.run_id), seen=seen, **kw)

    assert health(started_at=time.time() - 1, grace_s=180).status == "RUNNING"  # no beat yet: the start grace
    res = health(started_at=time.time() - 181, grace_s=180)
    assert res.status == "FAILED" and "sent no heartbeat" in res.msg and "another-host" in res.msg, res

    with heartbeat(instance, run.run_id, every=0.2):
        time.sleep(0.5)
        first = instance.get_run_by_id(run.run_id).tags[BEAT_TAG]
        assert health().status == "RUNNING"
        time.sleep(0.5)
        assert instance.get_run_by_id(run.run_id).tags[BEAT_TAG] != first  # it beats
        seen[run.run_id] = (seen[run.run_id][0], time.monotonic() - 3600)  # the last check was long ago
        assert health().status == "RUNNING"  # but the beat changed since: alive
    beat = json.loads(instance.get_run_by_id(run.run_id).tags[BEAT_TAG])
    assert beat["every"] == 0.2 and beat["n"] >= 4
    assert health().status == "RUNNING"  # the beats stopped just now
    raw, _ = seen[run.run_id]
    seen[run.run_id] = (raw, time.monotonic() - STALE_BEATS * 0.2 - 0.1)  # unchanged for STALE_BEATS periods
    res = health()
    assert res.status == "FAILED", res
    assert res.msg.startswith("the run's worker (pid 1) on host another-host is gone: its heartbeat"), res.msg
