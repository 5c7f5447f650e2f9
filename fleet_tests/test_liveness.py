"""Runs judged alive from another host: the daemon on this host, the code server that executes the runs (and so
their run workers) on another hostname (a UTS namespace of its own), sharing Postgres and an artifact folder, and
`fleet run` here as a client of that daemon (fleet/defs/requests.py). Production has this shape whenever the code
server is a container or a machine of its own.

The daemon cannot see the other host's processes: it judges the run's worker by the heartbeat the worker beats into
the instance (fleet/defs/runworker.py). While a source scrapes for longer than several monitoring intervals and the
staleness bound, the run is checked again and again and never failed. Then the code server's process group (the
code server, the run worker and its steps) is SIGKILLed, as a crashed machine would be: the heartbeat stops, run
monitoring fails the run within a few intervals, and the daemon's run-failure sensor re-executes the one source it
left, on the code server started again, then publishes; the client follows the chain to its commits."""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fleet_tests.conftest import ROOT, SOURCE, WEEK, committed_rows, free_port, quick_queue, writable_dir
from fleet_tests.gitremote import log
from fleet_tests.services import Postgres

MONITOR_S = 2
OTHER = "fleet-other-host"
BIN = Path(sys.executable).parent
SCRAPERS = ROOT / "fleet_tests" / "scrapers_liveness"  # steady, and waits (scrapes until the test's `go` file)


def _code_server(env: dict, port: int, out: Path) -> subprocess.Popen:
    """`dagster api grpc` serving fleet's definitions on ``port``, on host OTHER, in a session of its own."""
    cmd = (f"hostname {OTHER} && exec {BIN / 'dagster'} api grpc -m fleet.defs.definitions -a defs "
           f"-h 127.0.0.1 -p {port} --location-name fleet")
    return subprocess.Popen(["unshare", "--uts", "sh", "-c", cmd], env=env, cwd=env["FLEET_HOME"],
                            stdin=subprocess.DEVNULL, stdout=open(out, "a"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _kill_group(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    """Signal ``proc``'s process group (its session's leader is ``proc``), SIGKILL what is left of it, and wait
    until none of it is."""
    from fleet.engine.procs import group_members

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 60
    while left := group_members(proc.pid):  # a member that ignored ``sig``, or one exiting
        assert time.monotonic() < deadline, f"process group {proc.pid} outlived SIGKILL: {left}"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.2)


def _listens(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@pytest.mark.skipif(os.geteuid() != 0, reason="a UTS namespace (another hostname) needs root")
def test_a_run_on_another_host_lives_while_it_beats_and_is_failed_and_followed_up_when_killed(fleet_env, monkeypatch):
    from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus

    from fleet import records
    from fleet.defs.daemon import BEATS
    from fleet.defs.runworker import BEAT_TAG, LOST_TAG, STALE_BEATS, TAG, beat_period
    from fleet.engine import pool
    from fleet.engine.procs import group_members

    tmp = fleet_env.tmp
    artifacts = tmp / "artifacts"
    artifacts.mkdir()
    there_home = tmp / "there"
    counters = writable_dir(there_home)  # where the other host's scrapes (sandboxed) count themselves
    go = counters / "go"
    before = len(log(fleet_env.remote))
    logs = {name: tmp / f"{name}.log" for name in ("code", "daemon", "client")}
    procs: dict[str, subprocess.Popen] = {}

    def said() -> str:
        return "".join(f"\n--- {n} ---\n" + (p.read_text(errors="replace")[-4000:] if p.exists() else "")
                       for n, p in logs.items())

    def until(what: str, check, timeout: float, every: float = 0.5):
        deadline = time.monotonic() + timeout
        while not (got := check()):
            for name, proc in procs.items():  # the client may be done (0) as the publish run it waited for ends
                assert proc.poll() is None or (name, proc.returncode) == ("client", 0), \
                    f"{name} exited ({proc.returncode}) while waiting for {what}{said()}"
            assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s{said()}"
            time.sleep(every)
        return got

    with Postgres() as pg:
        # The settings both hosts share (the client's must match the code server's, or the daemon refuses its
        # request); each host has its own FLEET_HOME and DAGSTER_HOME.
        shared = {**fleet_env.env, "FLEET_POSTGRES_URL": pg.url, "FLEET_ARTIFACTS": str(artifacts),
                  "FLEET_SCRAPERS_DIR": str(SCRAPERS), "FLEET_RUN_MONITOR_S": str(MONITOR_S),
                  "FLEET_TEST_COUNTER_DIR": str(counters), "FLEET_TEST_GO": str(go)}
        here = {**shared, "DAGSTER_HOME": str(fleet_env.home / "dagster")}
        there = {**shared, "FLEET_HOME": str(there_home), "DAGSTER_HOME": str(there_home / "dagster")}
        quick_queue(here)
        quick_queue(there)
        # the instance's tables, made once before the processes of both hosts start (each would make them at once)
        monkeypatch.setenv("FLEET_POSTGRES_URL", pg.url)  # what the dagster.yaml names (env: FLEET_POSTGRES_URL)
        init = tmp / "pg-init"
        init.mkdir()
        (init / "dagster.yaml").write_text("storage:\n  postgres:\n    postgres_url:\n      env: FLEET_POSTGRES_URL\n")
        DagsterInstance.from_config(str(init)).dispose()
        instance = DagsterInstance.from_config(here["DAGSTER_HOME"])
        port = free_port()
        workspace = tmp / "workspace.yaml"
        workspace.write_text(yaml.safe_dump({"load_from": [
            {"grpc_server": {"host": "127.0.0.1", "port": port, "location_name": "fleet"}}]}))
        try:
            procs["code"] = _code_server(there, port, logs["code"])
            until("code server listening", lambda: _listens(port), timeout=300)
            since = time.time()
            procs["daemon"] = subprocess.Popen(
                [str(BIN / "dagster-daemon"), "run", "-w", str(workspace), "--log-level", "info"], env=here,
                cwd=tmp, stdin=subprocess.DEVNULL, stdout=open(logs["daemon"], "a"), stderr=subprocess.STDOUT,
                start_new_session=True)

            def beating():
                beats = records.daemon_heartbeats(instance)
                return all(k in beats and beats[k].timestamp >= since for k in BEATS)

            # before the client starts: it must find this daemon serving, not start one of its own
            until("heartbeat of the daemon", beating, timeout=300)
            procs["client"] = subprocess.Popen(
                [sys.executable, "-m", "fleet.cli", "run", "--week", WEEK, "--force"], env=here, cwd=fleet_env.home,
                stdin=subprocess.DEVNULL, stdout=open(logs["client"], "w"), stderr=subprocess.STDOUT,
                start_new_session=True)

            def scraping():  # steady is done and waits scrapes, in the other host's run
                runs = records.runs(instance, {"dagster/partition": WEEK})
                done = {e.event_log_entry.dagster_event.step_key for r in runs
                        for e in records.events(instance, r.run_id, DagsterEventType.STEP_SUCCESS)}
                return runs if "raw__steady" in done and (counters / "waits").exists() else None

            [run] = until("run with steady done and waits scraping", scraping, timeout=420)
            assert run.tags["fleet/kind"] == "scrape", run.tags
            worker = json.loads(records.run_by_id(instance, run.run_id).tags[TAG])
            assert worker["host"] == OTHER, worker
            assert worker["pid"] in group_members(procs["code"].pid), worker  # a process under the code server

            # More than five monitoring intervals and beyond the staleness bound (and at least four checks, however
            # slow the machine): the daemon checks the run, sees the beats change and never fails it.
            checking = f"Checking run {run.run_id}"
            checked_before = logs["daemon"].read_text(errors="replace").count(checking)
            first_beat = json.loads(records.run_by_id(instance, run.run_id).tags[BEAT_TAG])
            window = time.monotonic() + max(5 * MONITOR_S, STALE_BEATS * beat_period(MONITOR_S)) + MONITOR_S
            until("four checks of the run by run monitoring",
                  lambda: time.monotonic() > window
                  and logs["daemon"].read_text(errors="replace").count(checking) - checked_before >= 4, timeout=300)
            now = records.run_by_id(instance, run.run_id)
            assert now.status == DagsterRunStatus.STARTED, said()
            assert not records.events(instance, run.run_id, DagsterEventType.RUN_FAILURE), said()
            assert json.loads(now.tags[BEAT_TAG])["n"] > first_beat["n"] + 3, (first_beat, now.tags[BEAT_TAG])
            assert (counters / "waits").read_text() == "x"  # the same scrape all along

            killed_at = time.time()
            _kill_group(procs.pop("code"))  # the other host dies: its code server, the run's worker, its steps
            procs["code"] = _code_server(there, port, logs["code"])  # a later run needs a code server
            go.touch()  # the rerun of waits returns its rows at once

            def published():
                runs = records.runs(instance, {"dagster/partition": WEEK})
                return runs if any(r.tags.get("fleet/kind") == "publish" and r.is_finished for r in runs) else None

            runs = until("publish run of the week", published, timeout=600, every=1)
            kinds = sorted((r.tags.get("fleet/kind"), r.status.value) for r in runs)
            assert kinds == [("publish", "SUCCESS"), ("rerun", "SUCCESS"), ("scrape", "FAILURE")], kinds
            [failure] = [e.event_log_entry for e in records.events(instance, run.run_id, DagsterEventType.RUN_FAILURE)]
            assert "Detected run worker status FAILED" in failure.message, failure.message  # Dagster's run monitoring
            assert f"the run's worker (pid {worker['pid']}) on host {OTHER} is gone: its heartbeat" in failure.message
            # failed by the heartbeat's silence, long before the 60 s start timeout or anything else could have
            assert failure.timestamp - killed_at < 60, failure.timestamp - killed_at
            failed = records.run_by_id(instance, run.run_id)
            assert failed.tags[LOST_TAG] in failure.message
            rerun = next(r for r in runs if r.tags.get("fleet/kind") == "rerun")
            assert sorted(k.to_user_string() for k in rerun.asset_selection) == ["raw/waits"]  # only what was lost
            assert rerun.tags["fleet/recovers"] == run.run_id
            assert json.loads(rerun.tags[TAG])["host"] == OTHER  # the code server started again executed it

            assert procs["client"].wait(timeout=300) == 0, said()
            out = logs["client"].read_text()
            assert "through the daemon already serving this instance" in out, out  # the client started none
            reason = failed.tags["fleet/next"]
            assert reason.startswith("rerun: ") and f"fleet: {reason[len('rerun: '):]}" in out, (reason, out)
            shas = {line.split()[-1] for line in out.splitlines() if line.startswith(("commit raw", "commit processed"))}
            print(f"failed {failure.timestamp - killed_at:.1f} s after the kill; "
                  f"published {time.time() - killed_at:.1f} s after it")
        finally:
            for name in ("client", "daemon", "code"):
                if name in procs:
                    _kill_group(procs[name], signal.SIGKILL if name == "code" else signal.SIGTERM)
            instance.dispose()
            pool.stop(there_home / "browser-hosts")
    commits = log(fleet_env.remote)
    assert len(commits) == before + 2
    assert shas == {c["sha"] for c in commits[:2]}, (shas, commits[:2])
    assert (counters / "waits").read_text() == "xx"  # scraped again once, by the rerun
    assert (counters / "steady").read_text() == "x"
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(set(frame[SOURCE])) == ["steady", "waits"]
    assert frame.filter(frame[SOURCE] == "waits").height == 2 and frame.filter(frame[SOURCE] == "steady").height == 3
