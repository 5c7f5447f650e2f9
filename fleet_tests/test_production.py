"""Production, as separate processes on one machine: the topology Dagster recommends (its examples/deploy_docker) and
deploy/docker-compose.yml runs as containers.

Postgres (Debian's, fleet_tests/services.py); deploy/prepare.py writing fleet's dagster.yaml (Postgres storage, the
run queue, run monitoring) and creating the tables; fleet's code served by `dagster code-server start`;
`dagster-webserver` and `dagster-daemon run`, each a process of its own, reading deploy/workspace.yaml (a
grpc_server entry) pointed at that code server. The schedule is turned on through the webserver's GraphQL, as the
UI's switch does, and the daemon fires it (FLEET_SCHEDULE every minute, so the test need not wait for Monday).
Its run's worker is SIGKILLed mid-scrape with every process under it, as an OOM kill would: the run fails, the
daemon's run-failure sensor re-executes only the source it left behind, then the week is consolidated, committed
(raw, processed) to a bare data remote, its checks evaluated and its alert posted. Containers and Kubernetes are not
tested here (no Docker engine, no cluster): deploy/'s files are checked for what they say, not built."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from fleet_tests.conftest import ROOT, SOURCE, committed_rows, writable_dir
from fleet_tests.gitremote import log, make_remote
from fleet_tests.services import Postgres, free_port, wait_port

DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
LOCATION = "fleet"

SLOW = '''
import asyncio, os
import polars as pl
from fleet import Scraper


class Slow(Scraper):
    """Scrapes until its run is killed under it, the first time in a week; two rows when run again."""
    name = "slow"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 120

    async def scrape(self, page, ctx):
        with open(os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name), "a") as fh:
            fh.write("x")
        await page.set_content("<p>slow</p>")
        if not ctx.checkpoint.get("started"):
            ctx.checkpoint["started"] = True
            ctx.save_checkpoint()
            while ctx.time_left() > 5:
                await asyncio.sleep(0.2)
            raise RuntimeError("the test never killed this run")
        for i in range(2):
            yield {"id": i}
'''
class _Hook(BaseHTTPRequestHandler):
    posted: list = []

    def do_POST(self):
        self.posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _webhook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Hook", (_Hook,), {"posted": []}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/alerts", server.RequestHandlerClass.posted
    finally:
        server.shutdown()


class Services:
    """The long-running processes, each in a session of its own, logging to a file; stopped with their children."""

    def __init__(self, tmp: Path, env: dict):
        self.tmp, self.env, self.procs = tmp, env, {}

    def start(self, name: str, *cmd: str) -> subprocess.Popen:
        proc = subprocess.Popen(list(cmd), env=self.env, cwd=self.tmp, stdin=subprocess.DEVNULL,
                                stdout=open(self.tmp / f"{name}.log", "ab"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def logs(self, chars: int = 2500) -> str:
        return "\n".join(f"--- {name}.log\n" + (self.tmp / f"{name}.log").read_text(errors="replace")[-chars:]
                         for name in self.procs)

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _gql(port: int, query: str, **variables) -> dict:
    body = json.dumps({"query": query, "variables": variables}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        out = json.load(resp)
    assert "errors" not in out, out
    return out["data"]


REPO = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__"}
SENSORS = """query($repo: RepositorySelector!, $after: Float!) { sensorsOrError(repositorySelector: $repo) {
  ... on Sensors { results { name sensorState { status ticks(afterTimestamp: $after) { status } } } } } }"""
TICKS = """query($sel: ScheduleSelector!) { scheduleOrError(scheduleSelector: $sel) { ... on Schedule {
  scheduleState { ticks(limit: 10) { status skipReason timestamp runIds } } } } }"""
START = """mutation($sel: ScheduleSelector!) { startSchedule(scheduleSelector: $sel) { __typename
  ... on ScheduleStateResult { scheduleState { status } } ... on PythonError { message } } }"""


def _until(what: str, check, services: Services, timeout: float = 420, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        for name, proc in services.procs.items():
            assert proc.poll() is None, f"{name} exited ({proc.returncode}) while waiting for {what}\n{services.logs()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{services.logs()}"
        time.sleep(every)


@pytest.fixture
def topology(tmp_path):
    """Postgres, a data remote, fleet's instance prepared by deploy/prepare.py, and the code server, webserver and
    daemon running; yields (env, services, webserver port, instance, remote, counters, webhook posts)."""
    remote = make_remote(tmp_path)
    home = tmp_path / "home"
    scrapers = tmp_path / "scrapers"
    scrapers.mkdir()
    (scrapers / "slow.py").write_text(SLOW)
    for name in ("steady", "raises"):  # a healthy source; a scraper bug (a source failure)
        (scrapers / f"{name}.py").write_text((ROOT / "fleet_tests" / "scrapers_crash" / f"{name}.py").read_text())
    with Postgres() as pg, _webhook() as (hook, posted):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "DAGSTER_HOME"}
        env.update(FLEET_HOME=str(home), DAGSTER_HOME=str(home / "dagster"), FLEET_POSTGRES_URL=pg.url,
                   FLEET_DATA_REMOTE=str(remote), FLEET_SCRAPERS_DIR=str(scrapers), FLEET_SCHEDULE="* * * * *",
                   FLEET_RUN_MONITOR_S="2", FLEET_ALERT_WEBHOOK=hook, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, str(DEPLOY / "prepare.py")], env=env, capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("fleet: instance ready:"), done.stdout
        counters = writable_dir(home)
        env["FLEET_TEST_COUNTER_DIR"] = str(counters)
        code_port, web_port = free_port(), free_port()
        workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
        [entry] = workspace["load_from"]
        assert entry["grpc_server"]["location_name"] == LOCATION
        entry["grpc_server"].update(host="127.0.0.1", port=code_port)
        (tmp_path / "workspace.yaml").write_text(yaml.safe_dump(workspace))
        services = Services(tmp_path, env)
        try:
            code = services.start("code", str(BIN / "dagster"), "code-server", "start", "-h", "127.0.0.1",
                                  "-p", str(code_port), "-m", "fleet.defs.definitions", "-a", "defs",
                                  "--location-name", LOCATION)
            wait_port(code_port, timeout=180, proc=code, what="the code server")
            since = time.time()
            web = services.start("webserver", str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(web_port),
                                 "-w", "workspace.yaml")
            services.start("daemon", str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml")
            wait_port(web_port, timeout=180, proc=web, what="dagster-webserver")

            def sensors_ticked():
                results = _gql(web_port, SENSORS, repo=REPO, after=since)["sensorsOrError"]["results"]
                running = [s["sensorState"] for s in results if s["sensorState"]["status"] == "RUNNING"]
                return running and all(any(t["status"] in ("SKIPPED", "SUCCESS") for t in s["ticks"])
                                       for s in running)

            _until("the daemon's sensors' first ticks", sensors_ticked, services, timeout=240)
            from dagster import DagsterInstance
            with pytest.MonkeyPatch.context() as mp:
                for k, v in env.items():
                    if k.startswith(("FLEET_", "DAGSTER_")):
                        mp.setenv(k, v)
                with DagsterInstance.get() as instance:
                    yield env, services, web_port, instance, remote, counters, posted
        finally:
            services.stop()
            from fleet.engine import pool
            pool.stop(home / "browser-hosts")


def test_the_schedule_runs_a_week_unattended_and_a_killed_run_is_reexecuted_by_the_sensor(topology):
    env, services, port, instance, remote, counters, posted = topology
    from dagster import DagsterEventType, DagsterRunStatus, RunsFilter

    from fleet.defs.runworker import TAG
    from fleet.engine.procs import descendants, kill_tree
    from fleet.weeks import last_complete_week

    cfg = yaml.safe_load((Path(env["DAGSTER_HOME"]) / "dagster.yaml").read_text())
    assert cfg["storage"]["postgres"]["postgres_url"] == {"env": "FLEET_POSTGRES_URL"}  # no password in the file
    assert cfg["run_coordinator"]["class"] == "QueuedRunCoordinator" and cfg["run_monitoring"]["enabled"]
    before = len(log(remote))

    started = _gql(port, START, sel={**REPO, "scheduleName": "weekly_fleet"})["startSchedule"]
    assert started == {"__typename": "ScheduleStateResult", "scheduleState": {"status": "RUNNING"}}, started

    def scheduled():
        runs = instance.get_runs(RunsFilter(tags={"dagster/schedule_name": "weekly_fleet"}))
        return runs if runs and (counters / "slow").exists() else None

    [run] = _until("the schedule's run scraping slow", scheduled, services, timeout=300)
    week = run.tags["dagster/partition"]
    ticks = _gql(port, TICKS, sel={**REPO, "scheduleName": "weekly_fleet"})["scheduleOrError"]["scheduleState"]
    [tick] = [t["timestamp"] for t in ticks["ticks"] if run.run_id in t["runIds"]]  # the daemon's tick launched it
    from datetime import datetime, timezone
    tick_day = datetime.fromtimestamp(tick, timezone.utc).date()
    assert week == last_complete_week(tick_day).isoformat()  # the week complete at the tick, as on a Monday
    assert run.job_name == "scrape_week" and run.tags["fleet/kind"] == "scrape"

    def others_done():  # slow is scraping; steady has succeeded and raises has failed, as sources do
        ends = {(e.dagster_event.step_key, e.dagster_event.event_type_value) for e in instance.all_logs(
            run.run_id, of_type={DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE})}
        return {("raw__steady", "STEP_SUCCESS"), ("raw__raises", "STEP_FAILURE")} <= ends

    _until("steady's and raises's steps to end", others_done, services)
    worker = json.loads(instance.get_run_by_id(run.run_id).tags[TAG])
    code = services.procs["code"]
    assert worker["pid"] in descendants(code.pid)  # the run executes under the code server, not the daemon
    kill_tree(worker["pid"])  # the run's worker, its steps, browser hosts and Chromium: an OOM kill of the run

    def published():
        runs = instance.get_runs(RunsFilter(tags={"dagster/partition": week}))
        if any(r.tags.get("fleet/kind") == "publish" and r.is_finished for r in runs):
            return runs
        return None

    runs = _until("the week's publish run", published, services, timeout=600, every=2)
    kinds = sorted((r.tags.get("fleet/kind"), r.status.value) for r in runs)
    assert kinds == [("publish", "SUCCESS"), ("rerun", "SUCCESS"), ("scrape", "FAILURE")], kinds
    assert code.poll() is None  # the code server lived through its run's death
    rerun = next(r for r in runs if r.tags.get("fleet/kind") == "rerun")
    assert sorted(k.to_user_string() for k in rerun.asset_selection) == ["raw/slow"]  # only what the kill left
    assert rerun.tags["fleet/recovers"] == run.run_id
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.FAILURE
    assert (counters / "slow").read_text() == "xx"
    # the schedule keeps ticking every minute here, and launches the week once: its later ticks skip it
    assert len(instance.get_runs(RunsFilter(tags={"dagster/schedule_name": "weekly_fleet"}))) == 1

    def skipped():
        state = _gql(port, TICKS, sel={**REPO, "scheduleName": "weekly_fleet"})["scheduleOrError"]["scheduleState"]
        return [t["skipReason"] for t in state["ticks"] if t["status"] == "SKIPPED"]

    why = _until("a later tick of the schedule", skipped, services, timeout=180, every=3)
    assert why[0] == f"week {week} was launched by this schedule already (run {run.run_id}); the sensors follow " \
                     "its runs up", why

    # raw and processed commits of the week, with the two sources that worked
    assert len(log(remote)) == before + 2
    assert sorted(set(committed_rows(remote, week)[SOURCE])) == ["slow", "steady"]
    assert sorted(set(committed_rows(remote, week, "processed")[SOURCE])) == ["slow", "steady"]
    # the week's checks and alerts: raises failed as a source, and its alert reached the webhook
    status = subprocess.run([sys.executable, "-m", "fleet.cli", "status", "--week", week], env=env,
                            capture_output=True, text=True, timeout=300, cwd=env["FLEET_HOME"])
    assert status.returncode == 0, status.stderr
    failed = status.stdout.split("checks: ", 1)[1].split("checks skipped", 1)[0]
    assert "raises" in failed and "steady" not in failed and "slow " not in failed, status.stdout
    assert any(a.get("source") == "raises" for a in posted), posted


def test_without_user_namespaces_a_container_refuses_in_one_line_naming_fleet_sandbox_off():
    """As in a container under Docker's default seccomp profile: `unshare` of a user namespace fails. The code
    service's first command, deploy/prepare.py, run as an unprivileged user (the image's is 10001; here nobody),
    refuses before it reaches Postgres, in one line naming FLEET_SANDBOX=off and why the container may be the
    sandbox; with FLEET_SANDBOX=off it says so in one line and goes on (here to a Postgres that is not there)."""
    home = writable_dir(Path(f"/tmp/fleet-prod-{os.getpid()}"), "home")  # nobody cannot enter pytest's tmp_path
    fake = writable_dir(home.parent, "bin")
    (fake / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    (fake / "unshare").chmod(0o755)
    try:
        env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": str(ROOT),
               "FLEET_HOME": str(home / "fleet"), "FLEET_SCRAPERS_DIR": str(ROOT / "scrapers"),
               "FLEET_POSTGRES_URL": f"postgresql://fleet:fleet@127.0.0.1:{free_port()}/fleet"}
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                     str(DEPLOY / "prepare.py")]
        done = subprocess.run(as_nobody, env=env, capture_output=True, text=True, timeout=120, cwd=home)
        assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
        [line] = done.stderr.splitlines()
        assert line.startswith("fleet: error: fleet refuses to scrape: the browser sandbox cannot run: the kernel "
                               "allows no unprivileged user namespaces"), line
        assert "in a container, a seccomp profile that permits them" in line, line
        assert "where the container itself is the sandbox" in line and line.endswith(
            "set FLEET_SANDBOX=off to scrape without Chromium's own sandbox"), line
        done = subprocess.run(as_nobody, env={**env, "FLEET_SANDBOX": "off"}, capture_output=True, text=True,
                              timeout=120, cwd=home)
        off, refused = done.stderr.splitlines()
        assert off == ("fleet: the browser sandbox is off (FLEET_SANDBOX=off); attempt processes and Chromium run "
                       "as this user with --no-sandbox"), off
        assert done.returncode == 2 and refused.startswith("fleet: error: FLEET_POSTGRES_URL") \
            and "cannot be reached" in refused, refused
    finally:
        subprocess.run(["rm", "-rf", str(home.parent)], check=False)


def _fleet_names(text: str) -> set[str]:
    import re
    return set(re.findall(r"\bFLEET_[A-Z0-9_]*[A-Z0-9]\b", text))


def test_the_deploy_files_run_what_this_test_runs_and_what_fleet_checks():
    """deploy/ cannot be built here: its files are held to the commands test_production runs, to fleet's settings,
    and to what fleet/defs/instance.py checks of the instance."""
    from fleet.config import CHROMIUM_CANDIDATES, known_settings
    from fleet.defs.instance import _partition_limit, pool_limit

    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "code", "webserver", "daemon"}
    code = " ".join(services["code"]["command"])
    assert "python /opt/fleet/deploy/prepare.py && exec dagster code-server start -h 0.0.0.0 -p 4000 " \
           "-m fleet.defs.definitions -a defs --location-name fleet" in code, code
    [entry] = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())["load_from"]
    assert entry == {"grpc_server": {"host": "code", "port": 4000, "location_name": LOCATION}}
    assert services["webserver"]["command"][0] == "dagster-webserver"
    assert services["daemon"]["command"][:2] == ["dagster-daemon", "run"]
    for name in ("webserver", "daemon"):
        assert services[name]["command"][-2:] == ["-w", "/opt/fleet/deploy/workspace.yaml"]
        assert services[name]["depends_on"]["code"]["condition"] == "service_healthy"
        assert "FLEET_GIT_TOKEN_FILE" not in services[name]["environment"]  # only the commit step reads it
    for name in ("code", "webserver", "daemon"):
        svc = services[name]
        assert svc["cap_drop"] == ["ALL"] and svc["environment"]["FLEET_SANDBOX"] == "off"
        assert "FLEET_POSTGRES_URL" in svc["environment"]
    docker = (DEPLOY / "Dockerfile").read_text()
    assert "chromium-headless-shell" in docker and "\nUSER fleet\n" in docker
    assert "FLEET_CHROMIUM=/usr/bin/chromium-headless-shell" in docker
    assert "/usr/bin/chromium-headless-shell" in CHROMIUM_CANDIDATES
    assert "COPY deploy/prepare.py deploy/workspace.yaml /opt/fleet/deploy/" in docker
    # installed in place: the definitions load through the pyproject.toml beside the package (a dg project)
    assert 'pip install --no-cache-dir -e "/opt/fleet/src[distributed]"' in docker
    assert "rm -rf /opt/fleet/src" not in docker
    helm = yaml.safe_load((DEPLOY / "helm-values.yaml").read_text())
    [grpc] = helm["dagster-user-deployments"]["deployments"]
    assert grpc["dagsterApiGrpcArgs"] == ["-m", "fleet.defs.definitions", "-a", "defs"]
    queued = helm["dagsterDaemon"]["runCoordinator"]
    assert queued["type"] == "QueuedRunCoordinator" and queued["enabled"]
    limits = queued["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    assert _partition_limit({"concurrency": {"runs": {"tag_concurrency_limits": limits}}})
    assert helm["dagsterDaemon"]["runMonitoring"]["enabled"] and not helm["dagsterDaemon"]["runRetries"]["enabled"]
    max_parallel = int(next(e["value"] for e in helm["dagsterWebserver"]["env"] if e["name"] == "FLEET_MAX_PARALLEL"))
    assert helm["concurrency"]["pools"] == {"defaultLimit": pool_limit(max_parallel), "granularity": "op"}
    # every FLEET_ name the deploy files set is one fleet knows (an unknown one is refused at start)
    named = set().union(*(_fleet_names((DEPLOY / f).read_text())
                          for f in ("Dockerfile", "docker-compose.yml", "helm-values.yaml", "prepare.py")))
    assert named and named <= known_settings(), named - known_settings()
