"""Refuse early and cleanly (issue 51, part 5): an unknown FLEET_* setting, a data remote that is not there or does
not answer, and a second run of a week are each refused in one line, exit 2, before anything is scraped."""
import base64
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleet import config
from fleet.errors import FleetError
from fleet_tests.conftest import ROOT, WEEK, run_fleet

NAME = re.compile(r"\bFLEET_[A-Z0-9_]*[A-Z0-9]\b")
# FLEET_ words in the tests and benchmarks that are no variable: a file in a clone's .git, a Python constant
# (and this file's deliberate typos)
NOT_VARIABLES = {"FLEET_COMMIT_MSG", "FLEET_DIR", "FLEET_MAX_PARALEL", "FLEET_ZORK"}


def test_an_unknown_setting_is_refused_naming_the_closest_known_one(monkeypatch):
    monkeypatch.setenv("FLEET_MAX_PARALEL", "3")
    with pytest.raises(FleetError, match=r"^unknown setting FLEET_MAX_PARALEL \(did you mean FLEET_MAX_PARALLEL\?\)$"):
        config.settings()
    monkeypatch.delenv("FLEET_MAX_PARALEL")
    monkeypatch.setenv("FLEET_ZORK", "1")
    with pytest.raises(FleetError, match=r"^unknown setting FLEET_ZORK: no setting of fleet's is near it; unset it"):
        config.check_names()
    monkeypatch.delenv("FLEET_ZORK")
    # the test suite's own variables, and an old name (refused with its new name instead)
    monkeypatch.setenv("FLEET_TEST_COUNTER_DIR", "/tmp")
    monkeypatch.setenv("FLEET_WORKERS", "warm")
    config.check_names()
    with pytest.raises(FleetError, match="FLEET_WORKERS is now called FLEET_BROWSER_HOSTS"):
        config.settings()


def test_every_name_fleet_its_tests_and_benchmarks_set_is_known():
    """What fleet sets for its children (FLEET_GIT_TOKEN_FILE, FLEET_DEMO_URL, FLEET_WORKER_NAME,
    FLEET_CHROMIUM_SANDBOX ...) and what the tests and benchmarks set must never be refused."""
    found = {}
    for folder in ("fleet", "fleet_tests", "bench", "scrapers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in NAME.findall(path.read_text()):
                found.setdefault(name, str(path.relative_to(ROOT)))
    assert {"FLEET_GIT_TOKEN_FILE", "FLEET_DEMO_URL", "FLEET_WORKER_NAME", "FLEET_CHROMIUM_SANDBOX",
            "FLEET_TEST_COUNTER_DIR", "FLEET_BENCH_CRASH"} <= set(found), found  # the scan sees them
    unknown = {n: where for n, where in found.items() if n not in config.known_settings()
               and not n.startswith(config.RESERVED_PREFIXES) and n not in NOT_VARIABLES}
    assert not unknown, unknown


def test_fleet_refuses_an_unknown_setting_in_one_line_before_anything(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(FLEET_HOME=str(tmp_path), FLEET_MAX_PARALEL="3", PYTHONPATH=str(ROOT))
    res = run_fleet(env, "run", "--week", WEEK, "--force", timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    assert res.stderr == "fleet: error: unknown setting FLEET_MAX_PARALEL (did you mean FLEET_MAX_PARALLEL?)\n"
    assert list(tmp_path.iterdir()) == []  # nothing made under FLEET_HOME


def _bare_env(fleet_env, **extra):
    """fleet_env's environment with the steady test scrapers (no demo sites needed)."""
    return {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(ROOT / "fleet_tests" / "scrapers_crash"), **extra}


def test_a_mistyped_local_remote_is_refused_before_anything_and_never_created(fleet_env):
    typo = fleet_env.tmp / "data-remtoe.git"
    res = run_fleet(_bare_env(fleet_env, FLEET_DATA_REMOTE=str(typo)), "run", "--week", WEEK, "--force", timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    line = f"fleet: error: data remote (FLEET_DATA_REMOTE) {typo} does not exist; fleet creates none but the demo's"
    assert res.stderr.startswith(line) and res.stderr.count("\n") == 1, res.stderr
    assert not typo.exists() and not (fleet_env.home / "dagster").exists()


class _Refusing(BaseHTTPRequestHandler):
    """A git host that knows no repository: 404 to everything, keeping the Authorization header it was sent."""
    seen: list = []

    def do_GET(self):
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_an_https_remote_that_does_not_answer_is_refused_with_the_token_sent_and_redacted(fleet_env):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = "tok-9c1e5d7a3b"
    url = f"http://127.0.0.1:{server.server_port}/org/data.git"
    try:
        res = run_fleet(_bare_env(fleet_env, FLEET_DATA_REMOTE=f"http://bot:{token}@127.0.0.1:{server.server_port}/org/data.git"),
                        "run", "--week", WEEK, "--force", timeout=120)
    finally:
        server.shutdown()
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    assert res.stderr.startswith(f"fleet: error: data remote (FLEET_DATA_REMOTE) {url} does not answer: ")
    assert "not found" in res.stderr and "check FLEET_DATA_REMOTE and FLEET_GIT_TOKEN" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and token not in res.stderr and "bot:" not in res.stderr, res.stderr
    # asked with the credentials as a header, as the commit sends them
    assert f"Basic {base64.b64encode(f'bot:{token}'.encode()).decode()}" in _Refusing.seen, _Refusing.seen
    assert not (fleet_env.home / "dagster").exists()


def test_only_the_demo_makes_its_own_remote(tmp_path, monkeypatch):
    from fleet.defs.week import check_data_remote, demo_data_remote

    for name in [n for n in os.environ if n.startswith("FLEET_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    with pytest.raises(FleetError, match="data-remote.git does not exist"):
        check_data_remote()  # `fleet run` without FLEET_DATA_REMOTE, before any demo
    demo_data_remote()
    assert (tmp_path / "home" / "data-remote.git" / "HEAD").is_file()
    check_data_remote()
    monkeypatch.setenv("FLEET_DATA_REMOTE", str(tmp_path / "yours.git"))
    demo_data_remote()  # the operator's remote, even under `fleet demo`: never made
    assert not (tmp_path / "yours.git").exists()
    with pytest.raises(FleetError, match="yours.git does not exist"):
        check_data_remote()


def _steady_only(fleet_env):
    d = fleet_env.tmp / "steady_only"
    d.mkdir(exist_ok=True)
    (d / "steady.py").write_text((ROOT / "fleet_tests" / "scrapers_crash" / "steady.py").read_text())
    return {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d)}


def test_a_second_run_of_a_week_is_refused_at_once_and_leaves_no_trace(fleet_env):
    """Two `fleet run`s of one week started together: the loser says one line and nothing else, before the winner
    has done anything much; the winner's table and `fleet status` show nothing of it (it used to print "scraping
    week" for 10 s, and leave its planned step and check: "kept the stored rows of run ...; the last run's step not
    started", and the quality check "not evaluated" until the next run)."""
    env = _steady_only(fleet_env)
    cmd = [sys.executable, "-m", "fleet.cli", "run", "--week", WEEK, "--force"]
    started = time.monotonic()
    procs = [subprocess.Popen(cmd, env=env, cwd=fleet_env.home, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    while all(p.poll() is None for p in procs):
        time.sleep(0.05)
    loser = next(p for p in procs if p.poll() is not None)
    winner = next(p for p in procs if p is not loser)
    loser_s = time.monotonic() - started
    assert winner.poll() is None  # the loser was done while the winner was still at work
    out, err = loser.communicate()
    print(f"loser refused after {loser_s:.2f} s")
    assert loser.returncode == 2 and out == "", out + err
    assert re.fullmatch(rf"fleet: error: week {WEEK} is already being run by another fleet command \(pid "
                        rf"{winner.pid} on host \S+, since [0-9: -]+ UTC\); not starting a second run of it\n", err), err
    w_out, w_err = winner.communicate(timeout=400)
    assert winner.returncode == 0, w_out[-3000:] + w_err[-3000:]
    assert "kept the stored rows" not in w_out and "not started" not in w_out, w_out
    status = run_fleet(env, "status", "--week", WEEK)
    assert status.returncode == 0 and "steady " in status.stdout, status.stdout + status.stderr
    assert "not evaluated" not in status.stdout and "kept the stored rows" not in status.stdout, status.stdout

    # a command that commits refuses a remote that is not there too, and makes none
    typo = fleet_env.tmp / "data-remtoe.git"
    for args in (("commit", "--week", WEEK), ("reprocess", "--week", WEEK)):
        res = run_fleet({**env, "FLEET_DATA_REMOTE": str(typo)}, *args, timeout=120)
        assert res.returncode == 2 and res.stdout == "", (args, res.stdout + res.stderr)
        assert res.stderr.startswith(f"fleet: error: data remote (FLEET_DATA_REMOTE) {typo} does not exist"), res.stderr
        assert not typo.exists()


def test_a_run_of_the_week_in_the_instance_is_refused_before_another_is_created():
    """What the lock on this host cannot see: a run of the week launched by the UI, a sensor or another host. A run
    that a fleet command on this host requested and that command is gone (killed) is left to Dagster instead: the
    new command says so and queues behind it."""
    import json
    import subprocess
    import sys

    from dagster import DagsterInstance, job, op

    from fleet import records
    from fleet.defs.runworker import identity
    from fleet.defs.week import precheck_week
    from fleet.policy import taxonomy as tx

    @op
    def noop():
        pass

    @job
    def tiny():
        noop()

    said = []
    with DagsterInstance.ephemeral() as instance:
        precheck_week(instance, WEEK, said.append)  # nothing of the week yet
        other = instance.create_run_for_job(tiny, tags={"dagster/partition": WEEK})
        with pytest.raises(FleetError, match=rf"^week {WEEK} is already being run by run {other.run_id} \(not_started, "
                                             r"launched by the UI or a sensor\); not starting a second run of it$"):
            precheck_week(instance, WEEK, said.append)
        precheck_week(instance, "2026-11-23", said.append)  # another week is free
        assert len(records.runs(instance, {"dagster/partition": WEEK})) == 1 and not said

        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        dead = {**identity(), "pid": int(gone.stdout), "start": 1}  # a fleet command of this host that is gone
        week = "2026-11-30"
        left = instance.create_run_for_job(tiny, tags={"dagster/partition": week, tx.TAG_REQUESTER: json.dumps(dead)})
        precheck_week(instance, week, said.append)
        assert said == [f"fleet: week {week} has runs left by a fleet command that is gone ({left.run_id}); "
                        "Dagster's run monitoring and the sensors end them first"]
        alive = instance.create_run_for_job(tiny, tags={"dagster/partition": week,
                                                        tx.TAG_REQUESTER: json.dumps(identity())})
        with pytest.raises(FleetError, match=rf"already being run by run {alive.run_id} "):
            precheck_week(instance, week, said.append)
