"""Real-parts fixtures: a GitHub-like bare remote with hooks, a temp FLEET_HOME, and the fleet CLI as a subprocess."""
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from fleet_tests.gitremote import ls_tree, lfs_object, make_remote, pointer_oid, read_blob

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "_fleet_source"  # fleet's column naming a row's source in the week's files (fleet/storage/provenance.py)
WEEK = "2026-11-16"


def run_fleet(env: dict, *args: str, timeout: float = 420) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleet.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=env["FLEET_HOME"])


def stored_outcome(home: Path, source: str, week: str = WEEK) -> dict:
    """The outcome that counts for ``source``'s week in the local store under FLEET_HOME ``home``."""
    from fleet.storage import store as keys
    from fleet.storage.store import LocalArtifactStore

    return keys.read_outcome(LocalArtifactStore(home / "artifacts"), week, source) or {}


def committed_frame(remote: Path, path: str, ref: str = "main") -> pl.DataFrame:
    """A parquet file as committed: the blob must be an LFS pointer whose object is in the remote's LFS store."""
    pointer = pointer_oid(read_blob(remote, f"{ref}:{path}"))
    assert pointer is not None, f"{path} is not an LFS pointer in git"
    obj = lfs_object(remote, pointer[0])
    assert obj.exists() and obj.stat().st_size == pointer[1], f"LFS object of {path} missing from the remote"
    return pl.read_parquet(io.BytesIO(obj.read_bytes()))


def committed_sources(remote: Path, week: str, stage: str = "raw", ref: str = "main") -> dict[str, pl.DataFrame]:
    """Each source's file of ``stage`` in the week's folder as committed (``data/<week>/<stage>/<source>.parquet``),
    every one an LFS pointer whose object is in the remote's LFS store."""
    folder = f"data/{week}/{stage}/"
    names = [p for p in ls_tree(remote, ref) if p.startswith(folder) and p.endswith(".parquet")]
    return {p[len(folder):-len(".parquet")]: committed_frame(remote, p, ref) for p in sorted(names)}


def committed_rows(remote: Path, week: str, stage: str = "raw", ref: str = "main") -> pl.DataFrame:
    """The week's committed files of ``stage`` read together (sources of one shape, as most tests' are), with
    fleet's ``_fleet_source`` column saying whose each row is; an empty frame when there are none."""
    frames = list(committed_sources(remote, week, stage, ref).values())
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(schema={SOURCE: pl.String})


def writable_dir(home: Path, name: str = "counters") -> Path:
    """A folder the tests' scrapers write into (counters, pid files, spans): under FLEET_HOME, the one folder of a
    test's that a sandboxed attempt process sees (the tests run as root: scrapers run as the sandbox's user, in a
    view of the file system without the rest of pytest's 0700 folder), open to that user."""
    d = home / name
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o777)
    return d


@pytest.fixture
def fleet_env(tmp_path):
    """A clean FLEET_HOME and a remote that already has history (README, code, a CI workflow)."""
    home = tmp_path / "home"
    home.mkdir()
    remote = make_remote(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLEET_") and k not in ("DAGSTER_HOME",)}
    env.update(FLEET_HOME=str(home), FLEET_DATA_REMOTE=str(remote), FLEET_DEMO_LATENCY_MS="20",
               FLEET_START_WEEK="2026-01-05", PYTHONPATH=str(ROOT))
    yield SimpleNamespace(env=env, home=home, remote=remote, tree_before=ls_tree(remote), tmp=tmp_path)
    # A test that ran sources outside `fleet run` (the UI, run_source) leaves warm workers idling.
    from fleet.engine import pool
    pool.stop(home / "browser-hosts")


class Lines:
    """A logger that keeps the lines the runner logs (``info`` only), for a test to read."""

    def __init__(self):
        self.lines = []

    def info(self, line):
        self.lines.append(line)

    def __str__(self):
        return "\n".join(self.lines)


@pytest.fixture
def scrape_home(tmp_path, monkeypatch):
    """A FLEET_HOME and no other FLEET_ setting, for tests that call the runner and the pool directly; the warm
    workers they leave are stopped afterwards."""
    from fleet.engine import pool

    home = tmp_path / "home"
    home.mkdir()
    for name in list(os.environ):
        if name.startswith("FLEET_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLEET_HOME", str(home))
    yield home
    pool.stop(home / "browser-hosts")


@pytest.fixture(autouse=True)
def _environment_restored():
    """What a test sets in os.environ by hand ends with it: a test's setting must not reach the next test in the
    same process (pytest-xdist runs files in any order: test_scaleout's FLEET_POSTGRES_URL, left behind, pointed
    test_runworker's instance at a stopped Postgres)."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


def pytest_addoption(parser):
    parser.addoption("--ui-screenshots", metavar="DIR", default=None,
                     help="Save the UI tests' screenshots in DIR (default: the test session's temporary folder).")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SENSOR_TICKS = """query($after: Float!) { sensorsOrError(repositorySelector: {
  repositoryLocationName: "fleet", repositoryName: "__repository__"}) { ... on Sensors {
  results { name sensorState { status ticks(afterTimestamp: $after) { status } } } } } }"""


def sensors_ticked(port: int, since: float) -> bool:
    """Every running sensor of `fleet ui` on ``port`` finished a tick that started after ``since`` (unix time):
    a run status sensor's first tick sets its cursor to "now", and a run that ends before it is never seen."""
    body = json.dumps({"query": SENSOR_TICKS, "variables": {"after": since}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        sensors = json.load(resp)["data"]["sensorsOrError"]["results"]
    running = [s["sensorState"] for s in sensors if s["sensorState"]["status"] == "RUNNING"]
    return bool(running) and all(any(t["status"] in ("SKIPPED", "SUCCESS") for t in s["ticks"]) for s in running)


def quick_queue(env: dict, dequeue_s: int = 1) -> None:
    """Write FLEET_HOME's ``dagster.yaml`` before fleet does, as fleet would write it (its run queue dequeues every
    second), with the run queue's dequeue interval at ``dequeue_s``. (fleet writes the file only where there is
    none; it is the user's, and this is a key Dagster documents.)"""
    from unittest import mock

    from fleet import config
    from fleet.defs.instance import dagster_yaml

    with mock.patch.dict(os.environ, env, clear=True):
        s = config.settings()
    text = dagster_yaml(s)
    assert "dequeue_interval_seconds: 1\n" in text, text
    cfg = s.dagster_home / "dagster.yaml"
    if not cfg.exists():
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(text.replace("dequeue_interval_seconds: 1\n", f"dequeue_interval_seconds: {dequeue_s}\n"))


def start_ui(fleet_env, env, ticked: bool = True, demo: bool = False):
    """`fleet ui` on a free port, in a session of its own, once it answers (and, ``ticked``, once each of its
    daemon's sensors took its first tick); returns (process, port). ``demo``: with the demo sites. A new
    FLEET_HOME gets fleet's ``dagster.yaml`` with a run queue that dequeues every second (:func:`quick_queue`)."""
    quick_queue(env)
    port = free_port()
    since = time.time()
    ui = subprocess.Popen([sys.executable, "-m", "fleet.cli", "ui", "--port", str(port),
                           "--demo" if demo else "--no-demo"], env=env,
                          cwd=fleet_env.home, stdout=open(fleet_env.tmp / "ui.log", "a"), stderr=subprocess.STDOUT,
                          start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline, (fleet_env.tmp / "ui.log").read_text()[-3000:]
            time.sleep(1)
    while ticked and not sensors_ticked(port, since):
        assert time.monotonic() < deadline, "the sensors never ticked\n" + (fleet_env.tmp / "ui.log").read_text()[-3000:]
        time.sleep(0.5)
    return ui, port


def stop_ui(ui, sig=signal.SIGTERM):
    """Stop a `fleet ui` started in a session of its own, and everything it started."""
    os.killpg(ui.pid, sig)
    try:
        ui.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(ui.pid, signal.SIGKILL)
        ui.wait()
