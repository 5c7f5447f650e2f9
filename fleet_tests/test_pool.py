"""Browser hosts (fleet/engine/pool.py, host.py), through real Chromium: reused only after a clean finish, each
source in a fresh context with its step's environment and a fresh import of its module, and never outliving its
step."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from fleet.config import browser_host_idle_s
from fleet.errors import FleetError
from fleet.engine import pool, sandbox
from fleet.scraping.discovery import discover
from fleet.engine.procs import alive, descendants
from fleet.engine.runner import EngineSettings, run_source
from fleet.storage.store import LocalArtifactStore, rows_key
from fleet_tests.conftest import ROOT, WEEK, Lines, writable_dir

SCRAPERS = ROOT / "fleet_tests" / "scrapers_pool"


@pytest.fixture
def home(scrape_home, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_TEST_COUNTER_DIR", str(writable_dir(scrape_home)))
    return scrape_home


def _run(home, name, log=None):
    source = {s.name: s for s in discover([SCRAPERS])}[name]
    store = LocalArtifactStore(home / "artifacts")
    out = run_source(source, WEEK, store=store, run_id="test", settings=EngineSettings.from_env(home), refresh=True,
                     log=log)
    rows = store.read_parquet(WEEK, rows_key(out.to_json())).to_dicts() if out.status == "ok" else []
    return out, rows


def _wait_dead(pid, seconds=15):
    deadline = time.monotonic() + seconds
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still alive"
        time.sleep(0.1)


def _files(home):
    """The browser hosts' files (not the folder ``home``, the sandbox's user's HOME, when there is one)."""
    return sorted(p.name for p in (home / "browser-hosts").iterdir() if not p.name.startswith(".") and not p.is_dir())


def _sandbox(home):
    """The sandbox the sources of SCRAPERS run in (as root: its user, and a view of the file system when pytest's
    0700 folder hides FLEET_HOME from it, which each host's ``ID.view`` names)."""
    return sandbox.for_attempt(EngineSettings.from_env(home), SCRAPERS / "probes.py")


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def test_a_warm_worker_runs_each_source_in_a_fresh_context_with_its_steps_world(home, tmp_path, monkeypatch):
    seen = []
    for i, cwd in enumerate([tmp_path, home]):
        monkeypatch.setenv("FLEET_TEST_PROBE", f"value-{i}")
        monkeypatch.chdir(cwd)
        out, rows = _run(home, "probe")
        assert out.status == "ok", out.error
        seen.append(rows[0])
    assert seen[0]["pid"] == seen[1]["pid"]  # the same worker ran both
    assert [r["cookies_at_start"] for r in seen] == [0, 0]  # the first source's cookie did not reach the second
    assert [r["probe_env"] for r in seen] == ["value-0", "value-1"]
    assert [r["cwd"] for r in seen] == [str(tmp_path), str(home)]
    assert [r["calls"] for r in seen] == [1, 1]  # the module is imported afresh for each source
    specs = list((home / "artifacts").rglob("spec-*.json"))
    assert specs and not any("value-" in p.read_text() for p in specs)  # the environment never reaches disk
    # a new interpreter started by this process, holding none of its files
    assert _ppid(seen[0]["pid"]) == os.getpid()
    held = {os.readlink(f"/proc/{seen[0]['pid']}/fd/{fd}") for fd in os.listdir(f"/proc/{seen[0]['pid']}/fd")}
    assert not any("artifacts" in target for target in held), held
    assert pool.stop(home / "browser-hosts") == 1
    _wait_dead(seen[0]["pid"])
    assert _files(home) == []


def test_a_worker_is_reused_only_after_a_clean_finish(home, tmp_path):
    log = Lines()
    out, rows = _run(home, "probe", log)
    first = rows[0]["pid"]
    # the hang takes the idle warm worker; at its limit the worker is killed with its browser, not reused
    out, _ = _run(home, "hangs", log)
    assert out.status == "timeout" and out.category == "source", out
    assert int((home / "counters" / "hangs.pid").read_text()) == first
    _wait_dead(first)
    # a source that leaves a task running gets a new worker, which then retires
    out, rows = _run(home, "leaky", log)
    leaky = rows[0]["pid"]
    assert out.status == "ok" and leaky != first
    assert "left task left-running running; this browser host will not be reused" in str(log)
    _wait_dead(leaky)
    # own_process: a worker of its own, never a warm one
    out, rows = _run(home, "loner", log)
    assert out.status == "ok" and "[loner] attempt in process" in str(log) and "(an attempt process of its own;" in str(log)
    _wait_dead(rows[0]["pid"])
    out, rows = _run(home, "probe", log)
    assert out.status == "ok" and rows[0]["pid"] not in (first, leaky)
    assert "(a new browser host;" in str(log)
    files = _files(home)  # only the idle worker's: the killed and retired ones were cleared away
    assert len({f.split(".")[0] for f in files}) == 1, files
    assert sorted(f.split(".")[1] for f in files) == sorted(["lock", "log", "pid", "sock",
                                                              *(["view"] if _sandbox(home).plan else [])])
    # so are their temporary files: the idle worker's browser keeps its profile in the worker's own folder, and
    # the killed worker's (whose driver never removed it), the retired one's and the loner's are gone
    tmp = pool.tmp_root(home / "browser-hosts", _sandbox(home).uid)
    [own] = tmp.iterdir()
    assert own.name.startswith(f"{rows[0]['pid']}-"), own
    assert any(p.name.startswith("playwright_chromiumdev_profile-") for p in own.iterdir()), list(own.iterdir())
    assert pool.stop(home / "browser-hosts") == 1
    assert not tmp.exists()  # emptied, then removed


def test_a_reused_worker_still_finds_the_processes_its_source_left_behind(home):
    """A reused worker takes its process group and descendants from the end of its last source (nothing was left
    then, or it would not be reused), not from a new scan; processes the next source leaves are still found and
    killed, in the worker's group or in a session of their own. Its own Chromium's new renderers are not."""
    log = Lines()
    out, rows = _run(home, "probe", log)
    first = rows[0]["pid"]
    out, rows = _run(home, "spawns", log)
    assert out.status == "ok" and rows[0]["pid"] == first  # the same, reused worker
    child, detached = rows[0]["child"], rows[0]["detached"]
    assert (f"left process {child} (sleep 3600, now killed), process {detached} (sleep 3601, now killed) running; "
            f"this browser host will not be reused") in str(log) or (
            f"left process {detached} (sleep 3601, now killed), process {child} (sleep 3600, now killed) running; "
            f"this browser host will not be reused") in str(log), str(log)
    _wait_dead(child)
    _wait_dead(detached)
    _wait_dead(first)


def test_a_warm_worker_dies_with_its_step(home, tmp_path):
    """The step process is SIGKILLed mid-source: the worker, its driver and its Chromium go too, at once."""
    code = ("from pathlib import Path; from fleet.scraping.discovery import discover;"
            "from fleet.engine.runner import run_source; from fleet.storage.store import LocalArtifactStore;"
            "from fleet.engine.settings import EngineSettings;"
            f"s = {{x.name: x for x in discover([Path({str(SCRAPERS)!r})])}}['lingers'];"
            f"run_source(s, {WEEK!r}, store=LocalArtifactStore({str(home / 'artifacts')!r}), run_id='t',"
            f" settings=EngineSettings.from_env(Path({str(home)!r})))")
    step = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})
    marker = home / "counters" / "lingers.pid"
    deadline = time.monotonic() + 90
    while not marker.exists():
        assert step.poll() is None and time.monotonic() < deadline, "lingers never started"
        time.sleep(0.1)
    worker = int(marker.read_text())
    tree = [worker, *descendants(worker)]
    assert len(tree) >= 3  # the worker, Playwright's driver and Chromium's processes
    step.send_signal(signal.SIGKILL)
    step.wait()
    for pid in tree:
        _wait_dead(pid, seconds=10)
    assert _files(home) == []
    pool.stop(home / "browser-hosts")  # what the dead worker left in its temporary folder goes
    assert not pool.tmp_root(home / "browser-hosts").exists()


def test_a_private_tmp_lives_as_long_as_its_process(tmp_path, monkeypatch, request):
    """procs.private_tmp and sweep_tmp with plain processes: a live process keeps its folder, and Python's own
    temporary files follow it there; a dead one's goes, as does one whose pid now names another process."""
    import shutil
    import tempfile

    from fleet.engine import procs
    from fleet.engine.procs import private_tmp, sweep_tmp

    short = Path(tempfile.mkdtemp(prefix="fleet-test-"))  # tmp_path is too deep for a TMPDIR Chromium accepts
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    base = short / "tmp"
    code = ("import sys, tempfile, time; from pathlib import Path; from fleet.engine.procs import private_tmp;"
            "own = private_tmp(Path(sys.argv[1])); print(own, tempfile.mkdtemp(), flush=True); time.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code, str(base)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        own, made = child.stdout.readline().split()
        assert own.startswith(str(base / f"{child.pid}-")) and made.startswith(own + "/")
        reused = base / f"{os.getpid()}-0"  # this pid, another start time: a process that is gone
        reused.mkdir()
        (base / "notes").mkdir()  # not a process's folder: never touched
        assert sweep_tmp(base) == 1 and not reused.exists()
        assert sorted(p.name for p in base.iterdir()) == sorted(["notes", Path(own).name])
        child.kill()
        child.wait()
        assert sweep_tmp(base) == 1
        assert [p.name for p in base.iterdir()] == ["notes"]
    finally:
        child.kill()
        child.wait()
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # both are put back after the test
    monkeypatch.setattr(tempfile, "tempdir", None)
    mine = private_tmp(base)
    assert os.environ["TMPDIR"] == str(mine)
    assert sweep_tmp(base) == 0 and mine.exists()
    assert sweep_tmp(base, killed=(os.getpid(),)) == 1 and not mine.exists()
    (base / "notes").rmdir()
    assert sweep_tmp(base) == 0 and not base.exists()  # an empty base goes too
    # a path too long for Chromium's singleton socket (the full build exits at start-up), or a base that cannot be
    # a folder of ours: TMPDIR is left alone
    assert private_tmp(tmp_path / ("x" * 80)) is None and os.environ["TMPDIR"] == str(mine)
    (short / "file").write_text("")
    assert private_tmp(short / "file") is None and os.environ["TMPDIR"] == str(mine)
    # the real bases are short, in the system's temporary folder, whatever FLEET_HOME is
    deep = pool.tmp_root(tmp_path / ("y" * 200) / "browser-hosts")
    assert deep.parent == Path(procs._SYSTEM_TMP) and len(str(deep)) < 40


def test_an_idle_worker_leaves_by_itself(home, monkeypatch):
    monkeypatch.setenv("FLEET_BROWSER_HOST_IDLE_S", "1")
    out, rows = _run(home, "probe")
    assert out.status == "ok"
    _wait_dead(rows[0]["pid"], seconds=20)
    assert _files(home) == []


def test_a_worker_being_started_is_not_cleared_away_by_another_step(home):
    """A starting worker has only its temporary ``.ID.lock``, unlocked for an instant after it is created. Another
    step looking for an idle worker, and ``stop_idle``, must leave it alone (they used to take it for a dead
    worker and delete it, and the new worker's start failed as infra)."""
    workers = home / "browser-hosts"
    workers.mkdir(parents=True)
    starting = workers / ".0123456789ab.lock"
    starting.touch()
    out, rows = _run(home, "probe")  # leases: scans the folder for idle workers, then starts one
    assert out.status == "ok"
    assert pool.stop_idle(workers) == 1  # the probe's worker, not the one being started
    assert starting.exists()
    _wait_dead(rows[0]["pid"])


def test_stop_idle_leaves_a_worker_in_use_alone(home, tmp_path):
    """A step holds its worker's lock while the source runs: ``stop_idle`` (the end of ``fleet run``) skips it."""
    step = threading.Thread(target=_run, args=(home, "lingers"))
    step.start()
    marker = home / "counters" / "lingers.pid"
    deadline = time.monotonic() + 90
    while not marker.exists():
        assert step.is_alive() and time.monotonic() < deadline, "lingers never started"
        time.sleep(0.1)
    assert pool.stop_idle(home / "browser-hosts") == 0
    assert alive(int(marker.read_text()))
    pool.stop(home / "browser-hosts")  # in use or not
    step.join(timeout=30)
    assert not step.is_alive()


def test_bad_worker_settings_are_clear_errors(monkeypatch, tmp_path):
    monkeypatch.setenv("FLEET_BROWSER_HOSTS", "pooled")
    with pytest.raises(FleetError, match="FLEET_BROWSER_HOSTS must be 'warm' or 'fresh', got 'pooled'"):
        EngineSettings.from_env(tmp_path)
    monkeypatch.setenv("FLEET_BROWSER_HOST_IDLE_S", "soon")
    with pytest.raises(FleetError, match="FLEET_BROWSER_HOST_IDLE_S must be a number, got 'soon'"):
        browser_host_idle_s()
    with pytest.raises(FleetError, match="browser_hosts must be 'warm' or 'fresh', got 'pooled'"):
        EngineSettings(chromium="/bin/true", hosts_dir=tmp_path, browser_hosts="pooled")
    with pytest.raises(FleetError, match="max_sources must be a number of at least 1, got 0"):
        EngineSettings(chromium="/bin/true", hosts_dir=tmp_path, max_sources=0)


@pytest.mark.parametrize("old,new,value", [("FLEET_WORKERS", "FLEET_BROWSER_HOSTS", "warm"),
                                            ("FLEET_WORKER_IDLE_S", "FLEET_BROWSER_HOST_IDLE_S", "30"),
                                            ("FLEET_WORKER_MAX_SOURCES", "FLEET_BROWSER_HOST_MAX_SOURCES", "50")])
def test_an_old_browser_host_setting_is_refused_in_one_line_naming_the_new_one(monkeypatch, tmp_path, old, new, value):
    from fleet.config import settings

    monkeypatch.setenv("FLEET_HOME", str(tmp_path))
    settings()  # without the old name, the same environment is accepted
    monkeypatch.setenv(old, value)
    for read in (lambda: EngineSettings.from_env(tmp_path), settings):
        with pytest.raises(FleetError) as refused:
            read()
        assert str(refused.value) == f"{old} is now called {new}; set {new} instead"


def test_a_fleet_home_deeper_than_a_unix_socket_path_still_gets_warm_workers(home, tmp_path, monkeypatch):
    """The workers' sockets live under FLEET_HOME, and a socket's address holds at most 107 bytes. A home of more
    than ~73 bytes used to make every worker fail to bind (``AF_UNIX path too long``), so every source failed as
    infra and was re-executed, with the cause deep in a traceback."""
    from fleet.engine.procs import SOCKET_PATH_MAX

    deep = tmp_path / ("d" * 60) / ("e" * 60) / "home"
    deep.mkdir(parents=True)
    monkeypatch.setenv("FLEET_HOME", str(deep))
    root = deep / "browser-hosts"
    assert len(os.fsencode(root / "0123456789ab.sock")) > SOCKET_PATH_MAX
    try:
        out, rows = _run(deep, "probe")
        assert out.status == "ok", out.error
        assert [p.name for p in root.glob("*.sock")] == [f"{w}.sock" for w in pool.host_ids(root)]
        out, again = _run(deep, "probe")  # the idle worker is found by its socket and takes the next source
        assert out.status == "ok", out.error
        assert again[0]["pid"] == rows[0]["pid"]
    finally:
        pool.stop(root)


def test_a_warm_worker_that_dies_mid_source_is_infra_with_how_it_ended(home):
    """The worker this process started and leased again for another source dies (SIGKILL, as a crash in a native
    library would end it): infra, with its exit status, and the next source gets a new worker."""
    out, rows = _run(home, "probe")
    first = rows[0]["pid"]
    out, _ = _run(home, "crashes")  # takes the idle worker
    assert out.status == "failed" and out.category == "infra", out
    assert "died without reporting (killed by signal SIGKILL)" in out.error, out.error
    _wait_dead(first)
    assert _files(home) == []
    out, rows = _run(home, "probe")
    assert out.status == "ok" and rows[0]["pid"] != first
