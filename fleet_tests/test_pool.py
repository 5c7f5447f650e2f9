"""Warm workers (fleet/scraping/pool.py), through real Chromium: reused only after a clean finish, each source in a
fresh context with its step's environment and a fresh import of its module, and never outliving its step."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from fleet.config import chromium_path, settings, worker_idle_s
from fleet.errors import FleetError
from fleet.scraping import pool
from fleet.scraping.discovery import discover
from fleet.scraping.procs import alive, descendants
from fleet.scraping.runner import run_source
from fleet.storage.store import LocalArtifactStore, outcome_key, raw_key
from fleet_tests.conftest import ROOT, WEEK, Lines

SCRAPERS = ROOT / "fleet_tests" / "scrapers_pool"


@pytest.fixture
def home(scrape_home, tmp_path, monkeypatch):
    """Workers with a browser of their own (FLEET_BROWSER=own), whose driver, Chromium and profile these tests
    follow; workers on the shared browser (the default) run in every `fleet run` test, and in test_browser."""
    monkeypatch.setenv("FLEET_TEST_COUNTER_DIR", str(tmp_path))
    monkeypatch.setenv("FLEET_BROWSER", "own")
    return scrape_home


def _run(home, name, log=None):
    source = {s.name: s for s in discover([SCRAPERS])}[name]
    store = LocalArtifactStore(home / "artifacts")
    out = run_source(source, WEEK, store=store, run_id="test", refresh=True, log=log)
    rows = pl.read_parquet(store.path(WEEK, raw_key(name))).to_dicts() if out.status == "ok" else []
    return out, rows


def _wait_dead(pid, seconds=15):
    deadline = time.monotonic() + seconds
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still alive"
        time.sleep(0.1)


def _files(home, kind="own"):
    return sorted(p.name for p in (home / "workers" / kind).iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("kind", ["own", "shared"])
def test_a_warm_worker_runs_each_source_in_a_fresh_context_with_its_steps_world(home, tmp_path, monkeypatch, kind):
    monkeypatch.setenv("FLEET_BROWSER", kind)
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
    if kind == "shared":  # a worker on the shared browser runs no Node.js driver and no Chromium of its own
        assert not descendants(seen[0]["pid"])
    assert pool.stop_idle(home / "workers") == 1
    _wait_dead(seen[0]["pid"])
    assert _files(home, kind) == []


def test_a_worker_is_reused_only_after_a_clean_finish(home, tmp_path):
    log = Lines()
    out, rows = _run(home, "probe", log)
    first = rows[0]["pid"]
    # the hang takes the idle warm worker; at its limit the worker is killed with its browser, not reused
    out, _ = _run(home, "hangs", log)
    assert out.status == "timeout" and out.category == "source", out
    assert int((tmp_path / "hangs.pid").read_text()) == first
    _wait_dead(first)
    # a source that leaves a task running gets a new worker, which then retires
    out, rows = _run(home, "leaky", log)
    leaky = rows[0]["pid"]
    assert out.status == "ok" and leaky != first
    assert "left task left-running running; this worker will not be reused" in str(log)
    _wait_dead(leaky)
    # own_process: forked from the step, never a warm worker
    out, rows = _run(home, "loner", log)
    assert out.status == "ok" and "[loner] worker" in str(log) and "(forked from the step" in str(log)
    _wait_dead(rows[0]["pid"])
    out, rows = _run(home, "probe", log)
    assert out.status == "ok" and rows[0]["pid"] not in (first, leaky)
    assert "(a new warm worker, browser of its own" in str(log)
    files = _files(home)  # only the idle worker's: the killed and retired ones were cleared away
    assert len({f.split(".")[0] for f in files}) == 1, files
    assert sorted(f.split(".")[1] for f in files) == ["lock", "log", "pid", "sock"]
    # so are their temporary files: the idle worker's browser keeps its profile in the worker's own folder, and
    # the killed worker's (whose driver never removed it), the retired one's and the loner's are gone
    tmp = pool.tmp_root(home / "workers")
    [own] = tmp.iterdir()
    assert own.name.startswith(f"{rows[0]['pid']}-"), own
    assert any(p.name.startswith("playwright_chromiumdev_profile-") for p in own.iterdir()), list(own.iterdir())
    assert pool.stop_idle(home / "workers") == 1
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
            f"this worker will not be reused") in str(log) or (
            f"left process {detached} (sleep 3601, now killed), process {child} (sleep 3600, now killed) running; "
            f"this worker will not be reused") in str(log), str(log)
    _wait_dead(child)
    _wait_dead(detached)
    _wait_dead(first)


def test_a_warm_worker_dies_with_its_step(home, tmp_path):
    """The step process is SIGKILLed mid-source: the worker, its driver and its Chromium go too, at once."""
    code = ("from pathlib import Path; from fleet.scraping.discovery import discover;"
            "from fleet.scraping.runner import run_source; from fleet.storage.store import LocalArtifactStore;"
            f"s = {{x.name: x for x in discover([Path({str(SCRAPERS)!r})])}}['lingers'];"
            f"run_source(s, {WEEK!r}, store=LocalArtifactStore({str(home / 'artifacts')!r}), run_id='t')")
    step = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})
    marker = tmp_path / "lingers.pid"
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
    pool.stop_idle(home / "workers")  # as `fleet run` does at the end of its week: what the dead worker left goes
    assert not pool.tmp_root(home / "workers").exists()


def test_a_private_tmp_lives_as_long_as_its_process(tmp_path, monkeypatch, request):
    """procs.private_tmp and sweep_tmp with plain processes: a live process keeps its folder, and Python's own
    temporary files follow it there; a dead one's goes, as does one whose pid now names another process."""
    import shutil
    import tempfile

    from fleet.scraping import procs
    from fleet.scraping.procs import private_tmp, sweep_tmp

    short = Path(tempfile.mkdtemp(prefix="fleet-test-"))  # tmp_path is too deep for a TMPDIR Chromium accepts
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    base = short / "tmp"
    code = ("import sys, tempfile, time; from pathlib import Path; from fleet.scraping.procs import private_tmp;"
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
    deep = pool.tmp_root(tmp_path / ("y" * 200) / "workers")
    assert deep.parent == Path(procs._SYSTEM_TMP) and len(str(deep)) < 40


def test_an_idle_worker_leaves_by_itself(home, monkeypatch):
    monkeypatch.setenv("FLEET_WORKER_IDLE_S", "1")
    out, rows = _run(home, "probe")
    assert out.status == "ok"
    _wait_dead(rows[0]["pid"], seconds=20)
    assert _files(home) == []


def test_a_worker_being_started_is_not_cleared_away_by_another_step(home):
    """A starting worker has only its temporary ``.ID.lock``, unlocked for an instant after it is created. Another
    step looking for an idle worker, and ``stop_idle``, must leave it alone (they used to take it for a dead
    worker and delete it, and the new worker's start failed as infra)."""
    own = home / "workers" / "own"
    own.mkdir(parents=True)
    starting = own / ".0123456789ab.lock"
    starting.touch()
    out, rows = _run(home, "probe")  # leases: scans own/ for idle workers, then starts one
    assert out.status == "ok"
    assert pool.stop_idle(home / "workers") == 1  # the probe's worker, not the one being started
    assert starting.exists()


def test_bad_worker_settings_are_clear_errors(monkeypatch):
    monkeypatch.setenv("FLEET_WORKERS", "pooled")
    with pytest.raises(FleetError, match="FLEET_WORKERS must be 'warm' or 'fresh', got 'pooled'"):
        settings()
    monkeypatch.setenv("FLEET_WORKER_IDLE_S", "soon")
    with pytest.raises(FleetError, match="FLEET_WORKER_IDLE_S must be a number, got 'soon'"):
        worker_idle_s()


def test_a_fleet_home_deeper_than_a_unix_socket_path_still_gets_warm_workers_from_the_zygote(home, tmp_path,
                                                                                             monkeypatch):
    """The zygote's and the workers' sockets live under FLEET_HOME, and a socket's address holds at most 107
    bytes. A home of more than ~73 bytes used to make every worker fail to bind (``AF_UNIX path too long``), so
    every source failed as infra and was re-executed, with the cause deep in a traceback."""
    from fleet.scraping.procs import SOCKET_PATH_MAX

    deep = tmp_path / ("d" * 60) / ("e" * 60) / "home"
    deep.mkdir(parents=True)
    monkeypatch.setenv("FLEET_HOME", str(deep))
    root = deep / "workers"
    assert len(os.fsencode(root / "zygote.sock")) > SOCKET_PATH_MAX
    try:
        out, rows = _run(deep, "probe")
        assert out.status == "ok", out.error
        assert _ppid(rows[0]["pid"]) == int((root / "zygote.pid").read_text())  # the zygote answered, too
        assert [p.name for p in (root / "own").glob("*.sock")] == [f"{w}.sock" for w in pool._worker_ids(root / "own")]
        out, again = _run(deep, "probe")  # the idle worker is found by its socket and takes the next source
        assert out.status == "ok", out.error
        assert again[0]["pid"] == rows[0]["pid"]
    finally:
        pool.stop(root)
    assert not (root / "zygote.sock").exists()


HOLD_SLOT = """
import sys, time
from pathlib import Path
from fleet.scraping.slots import scrape_slot
with scrape_slot(Path(sys.argv[1]), int(sys.argv[2])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_scrape_slots_cap_holders_across_processes_and_a_killed_holder_frees_its_slot(tmp_path):
    from fleet.scraping.slots import scrape_slot

    slots = tmp_path / "slots"
    holders = [subprocess.Popen([sys.executable, "-c", HOLD_SLOT, str(slots), "2"], stdout=subprocess.PIPE, text=True,
                                cwd=ROOT) for _ in range(2)]
    try:
        assert [h.stdout.readline().strip() for h in holders] == ["held", "held"]
        third = subprocess.Popen([sys.executable, "-c", HOLD_SLOT, str(slots), "2"], stdout=subprocess.PIPE, text=True,
                                 cwd=ROOT)
        holders.append(third)
        import select
        ready, _, _ = select.select([third.stdout], [], [], 1.5)
        assert not ready and third.poll() is None, "a third holder got a slot of two"
        holders[0].kill()  # the kernel releases a dead holder's flock
        holders[0].wait()
        t = time.monotonic()
        assert third.stdout.readline().strip() == "held"
        assert time.monotonic() - t < 5
        # and this process still finds both slots taken until one more holder goes
        holders[1].kill()
        holders[1].wait()
        with scrape_slot(slots, 2, poll_s=0.01) as waited:
            assert waited < 5
    finally:
        for h in holders:
            h.kill()
            h.wait()


WAIT_SLOT = """
import sys, time
from pathlib import Path
from fleet.scraping.slots import scrape_slot
with scrape_slot(Path(sys.argv[1]), 1, resuming=sys.argv[2] == "1"):
    with open(sys.argv[3], "a") as fh:
        fh.write(sys.argv[4] + "\\n")
    time.sleep(0.5)
"""


def test_an_attempt_resuming_a_crashed_one_takes_the_next_free_slot_first(tmp_path):
    from fleet.scraping.slots import scrape_slot

    slots, order = tmp_path / "slots", tmp_path / "order"
    with scrape_slot(slots, 1):
        waiters = [subprocess.Popen([sys.executable, "-c", WAIT_SLOT, str(slots), "0", str(order), "new"], cwd=ROOT)]
        time.sleep(1.0)  # the new source is waiting first
        waiters.append(subprocess.Popen([sys.executable, "-c", WAIT_SLOT, str(slots), "1", str(order), "resumed"],
                                        cwd=ROOT))
        time.sleep(1.0)
        assert not order.exists()
    assert [w.wait(timeout=30) for w in waiters] == [0, 0]
    assert order.read_text().split() == ["resumed", "new"]


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def test_new_warm_workers_fork_from_the_zygote_and_keep_nothing_of_it_but_its_imports(home, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_TEST_PROBE", "from-the-step")
    monkeypatch.chdir(tmp_path)
    out, rows = _run(home, "probe")
    assert out.status == "ok", out.error
    worker, root = rows[0]["pid"], home / "workers"
    zygote_pid = int((root / "zygote.pid").read_text())
    assert _ppid(worker) == zygote_pid, "the warm worker was not forked by the zygote"
    # the step's world, not the zygote's; none of the zygote's files
    assert rows[0]["probe_env"] == "from-the-step" and rows[0]["cwd"] == str(tmp_path)
    held = {os.readlink(f"/proc/{worker}/fd/{fd}") for fd in os.listdir(f"/proc/{worker}/fd")}
    assert not any("zygote" in target for target in held), held
    # the zygote never imports a scraper module
    with open(f"/proc/{zygote_pid}/maps") as fh:
        assert "probes" not in fh.read()

    # a worker that dies mid-source is an infra failure whose exit status the zygote reported
    out, _ = _run(home, "crashes")
    assert out.status == "failed" and out.category == "infra", out
    assert "killed by signal SIGKILL" in out.error, out.error

    # no zygote (or one that does not answer): a new interpreter, as before
    pool.stop(root)
    assert not (root / "zygote.sock").exists()
    monkeypatch.setattr("fleet.scraping.zygote.spawn", lambda *a, **k: None)
    out, rows = _run(home, "probe")
    assert out.status == "ok" and _ppid(rows[0]["pid"]) == os.getpid()


def _pids(directory):
    return {int(p.read_text()) for p in directory.glob("*.pid")}


def test_prestarted_workers_wait_idle_and_the_first_steps_take_them(home, monkeypatch):
    """``fleet run`` starts the first wave's workers before its steps ask (pool.prestart): one after another, up
    to the count, each left idle with its browser up; a step then takes one instead of starting its own."""
    monkeypatch.setenv("FLEET_TEST_PROBE", "from-the-step")
    own, s = home / "workers" / "own", settings()
    args = dict(chromium=chromium_path(), browser_dir=None, node_cache=str(home / "cache" / "node"))
    assert pool.prestart(own, 2, **args) == 2
    idle = _pids(own)
    assert len(idle) == 2 and all(alive(p) for p in idle)
    assert len(list(own.glob("*.sock"))) == 2  # each is up: its socket appears once its browser is
    assert pool.prestart(own, 2, **args) == 0  # the pool already holds two
    out, rows = _run(home, "probe")
    assert out.status == "ok" and rows[0]["pid"] in idle, (rows, idle)
    assert rows[0]["probe_env"] == "from-the-step"  # the step's world, not the prestarter's
    assert pool.stop_idle(s.home / "workers") == 2


def test_a_prestart_stopped_midway_leaves_no_half_started_worker(home):
    """The prestart process runs beside ``fleet run``, which stops it once its week is done; the worker it was
    starting at that moment goes with it, and the ones it had started stay idle, ready (stop_idle ends them)."""
    root = home / "workers"
    proc = pool.start_prestart(root, 3, shared=False, chromium=chromium_path(), browser_dir=None,
                               node_cache=str(home / "cache" / "node"))
    own = root / "own"
    deadline = time.monotonic() + 60
    while len(list(own.glob("*.sock"))) < 1:  # one is up, the next one starting
        assert proc.poll() is None and time.monotonic() < deadline, (root / pool.PRESTART_LOG).read_text()
        time.sleep(0.05)
    pool.stop_prestart(proc)
    assert proc.returncode is not None
    assert list(own.glob(".*.lock")) == []  # no worker left half-started
    for wid in {p.name.split(".")[0] for p in own.glob("*.pid")}:
        assert (own / f"{wid}.sock").exists() and alive(int((own / f"{wid}.pid").read_text()))
    assert pool.start_prestart(root, 0, shared=False, chromium="", browser_dir=None, node_cache="") is None
    pool.stop_prestart(None)  # nothing to stop


def test_the_first_wave_is_the_sources_that_will_scrape_up_to_the_cap(home, tmp_path, monkeypatch):
    from fleet.cli import first_wave

    scrapers = tmp_path / "scrapers"
    scrapers.mkdir()
    for name in ("a", "b", "c", "_helpers"):
        (scrapers / f"{name}.py").write_text("")
    monkeypatch.setenv("FLEET_SCRAPERS_DIR", str(scrapers))
    monkeypatch.setenv("FLEET_MAX_PARALLEL", "10")
    store = LocalArtifactStore(home / "artifacts")
    assert first_wave(settings(), WEEK) == 3  # _helpers is not a source
    store.write_json(WEEK, outcome_key("a"), {"status": "ok"})
    store.write_parquet(WEEK, raw_key("a"), pl.DataFrame({"x": [1]}))
    store.write_json(WEEK, outcome_key("b"), {"status": "failed"})
    assert first_wave(settings(), WEEK) == 2  # a is stored and complete: reused, no worker
    assert first_wave(settings(), WEEK, refresh=True) == 3
    assert first_wave(settings(), WEEK, deep=("a",)) == 3  # a shallow artifact does not answer a deep request
    assert first_wave(settings(), WEEK, sources=("a",)) == 0
    assert first_wave(settings(), WEEK, sources=("a", "b", "b")) == 1
    monkeypatch.setenv("FLEET_MAX_PARALLEL", "1")
    assert first_wave(settings(), WEEK) == 1
    monkeypatch.setenv("FLEET_WORKERS", "fresh")
    assert first_wave(settings(), WEEK) == 0  # no warm workers to start
