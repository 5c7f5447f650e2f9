"""Refuse early and cleanly (issue 51, part 5): an unknown FLEET_* setting, a data remote that is not there or does
not answer, and a second run of a week are each refused in one line, exit 2, before anything is scraped."""
import base64
import os
import re
import threading
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
