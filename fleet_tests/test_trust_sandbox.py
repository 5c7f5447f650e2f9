"""The browser sandbox through real workers and Chromium, as root: the scraper's code and Chromium run as an
unprivileged user, with Chromium's sandbox on (no --no-sandbox, renderers under seccomp), in warm workers and in
workers of their own; the data repository's token never reaches a worker; a FLEET_HOME and scrapers under a 0700
folder still sandbox (a process sampler over a whole week sees nothing of fleet's attempts as root). Where the
sandbox cannot be had, fleet refuses to scrape (exit 2, one line), unless FLEET_SANDBOX=off, which it says at start
and tags the run with."""
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from fleet.engine import pool, sandbox
from fleet.scraping.discovery import discover
from fleet.engine.runner import EngineSettings, run_source
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import SOURCE, ROOT, WEEK, committed_rows, run_fleet

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the user switch is for fleet running as root")

PROBE = '''
import json, os
import polars as pl
from fleet import Scraper


def _chromium_of(me):
    """Chromium processes under this worker: their uid, whether --no-sandbox is on, their seccomp mode."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            chain, p = [], int(pid)
            while p > 1:
                p = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
                chain.append(p)
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
            status = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status").read().splitlines() if ":" in l)
        except (OSError, ValueError, IndexError):
            continue
        if me in chain and (b"headless" in cmd[0] or b"chrom" in cmd[0]):
            found.append({"uid": int(status["Uid"].split()[0]), "no_sandbox": b"--no-sandbox" in cmd,
                          "seccomp": int(status.get("Seccomp", "0").strip())})
    return found


class Probe(Scraper):
    name = "NAME"
    schema = {"id": pl.Int64, "info": pl.String}
    key = ("id",)
    timeout_s = 60
    OWN

    async def scrape(self, page, ctx):
        await page.set_content("<p>probe</p>")
        info = {"uid": os.getuid(), "token": os.environ.get("FLEET_GIT_TOKEN"), "chromium": _chromium_of(os.getpid())}
        yield {"id": 1, "info": json.dumps(info)}
'''


@pytest.fixture
def open_home(monkeypatch):
    """A FLEET_HOME and scrapers folder the sandbox's user can reach (pytest's own tmp folder is root's alone)."""
    top = Path(tempfile.mkdtemp(prefix="fleet-sbx-", dir="/tmp"))
    top.chmod(0o755)
    for name in list(os.environ):
        if name.startswith("FLEET_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLEET_HOME", str(top / "home"))
    monkeypatch.setenv("FLEET_GIT_TOKEN", "s3cr3t-token")
    (top / "home").mkdir()
    yield top
    pool.stop(top / "home" / "browser-hosts")
    shutil.rmtree(top, ignore_errors=True)


def _probe(top: Path, name: str, own_process: bool):
    d = top / "scrapers"
    d.mkdir(exist_ok=True)
    (d / f"{name}.py").write_text(PROBE.replace("NAME", name).replace("OWN", f"own_process = {own_process}"))
    (src,) = [s for s in discover([d]) if s.name == name]
    store = LocalArtifactStore(top / "home" / "artifacts")
    out = run_source(src, WEEK, store=store, run_id="sbx", settings=EngineSettings.from_env())
    import json

    import polars as pl
    assert out.status == "ok", out
    return json.loads(store.read_parquet(WEEK, keys.rows_key(keys.read_outcome(store, WEEK, name)))["info"][0])


@pytest.mark.parametrize("own_process", [False, True], ids=["warm", "own-process"])
def test_scraper_code_and_chromium_run_unprivileged_with_the_sandbox_on(open_home, own_process):
    info = _probe(open_home, f"probe_{'own' if own_process else 'warm'}", own_process)
    assert info["uid"] == 65534, info           # the scraper's code: not root
    assert info["token"] is None, info          # the data repository's token stays with the processes that commit
    procs = info["chromium"]
    assert procs and all(p["uid"] == 65534 for p in procs), procs
    assert not any(p["no_sandbox"] for p in procs), procs
    assert any(p["seccomp"] == 2 for p in procs), procs  # the renderer, in its seccomp-bpf sandbox


NO_USER = ("fleet: error: fleet refuses to scrape: the browser sandbox cannot run: there is no user 'no-such-user-here' "
           "(FLEET_SANDBOX_USER) to run attempt processes as; create it (useradd --system no-such-user-here) or name "
           "another in FLEET_SANDBOX_USER, or set FLEET_SANDBOX=off to scrape without the sandbox")
OFF_LINE = ("fleet: the browser sandbox is off (FLEET_SANDBOX=off); attempt processes and Chromium run as root with "
            "--no-sandbox")


def _books(fleet_env) -> dict:
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir(exist_ok=True)
    (scrapers / "books.py").write_text((ROOT / "scrapers" / "books.py").read_text())
    return {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_SANDBOX_USER": "no-such-user-here"}


def test_an_impossible_sandbox_refuses_to_scrape_in_one_line(fleet_env, monkeypatch):
    """No such user: `fleet demo` and `fleet test` (the engine's own check) stop with exit 2 and the one line."""
    env = _books(fleet_env)
    res = run_fleet(env, "demo", "--week", WEEK, "--force")
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-3000:]
    assert res.stderr.strip().splitlines() == [NO_USER], res.stderr[-3000:]
    assert "scraping week" not in res.stdout + res.stderr
    res = run_fleet(env, "test", "books")
    assert (res.returncode, res.stderr.strip().splitlines()) == (2, [NO_USER]), res.stdout + res.stderr[-3000:]
    monkeypatch.setenv("FLEET_SANDBOX_USER", "no-such-user-here")
    with pytest.raises(sandbox.SandboxRefused, match="no user 'no-such-user-here'"):  # the engine, without the CLI
        sandbox.for_attempt(EngineSettings.under(fleet_env.home, chromium="/usr/bin/true"), ROOT / "scrapers" / "books.py")


def test_with_fleet_sandbox_off_fleet_says_so_once_runs_and_tags_the_run(fleet_env, monkeypatch):
    from fleet.config import settings
    from fleet.defs.instance import get_instance
    from fleet import records

    env = {**_books(fleet_env), "FLEET_SANDBOX": "off"}
    res = run_fleet(env, "demo", "--week", WEEK, "--force")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    lines = [l for l in res.stderr.splitlines() if "browser sandbox" in l]
    assert lines == [OFF_LINE], res.stderr[-3000:]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    instance = get_instance(settings())
    scraped = [r for r in records.runs(instance) if r.tags.get("fleet/kind") == "scrape"]
    assert scraped and all(r.tags.get(sandbox.TAG) == "off" for r in scraped), [r.tags for r in scraped]


def test_fleet_ui_says_the_sandbox_is_off_once_at_start(fleet_env):
    """The UI's runs scrape on this host too: `fleet ui` says the same line once, as it starts."""
    from fleet_tests.conftest import start_ui, stop_ui

    ui, _port = start_ui(fleet_env, {**fleet_env.env, "FLEET_SANDBOX": "off"}, ticked=False)
    stop_ui(ui)
    seen = (fleet_env.tmp / "ui.log").read_text().splitlines()
    said = [ln for ln in seen if "browser sandbox" in ln]
    assert said == [OFF_LINE], seen


class Sampler(threading.Thread):
    """Polls /proc until stopped, for the processes of one FLEET_HOME (their environment names it, or they descend
    from ``root_pid``): each Chromium and each attempt process or browser host (``python -m fleet.engine.attempt``
    or ``.host``) it sees, with its uids and whether its command line has ``--no-sandbox``."""

    def __init__(self, home: Path, root_pid: int):
        super().__init__(daemon=True)
        self.marker, self.root_pid = f"FLEET_HOME={home}".encode(), root_pid
        self.seen: dict[tuple, dict] = {}
        self.done = threading.Event()

    def _ours(self, pid: str) -> bool:
        try:
            if self.marker in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
                return True
            p = int(pid)
            while p > 1:
                p = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
                if p == self.root_pid:
                    return True
        except (OSError, ValueError, IndexError):
            pass
        return False

    def run(self):
        while not self.done.is_set():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
                    status = open(f"/proc/{pid}/status").read()
                except OSError:
                    continue
                chromium = "chrom" in os.path.basename(argv[0]) or "headless_shell" in argv[0]
                attempt = argv[1:3] in (["-m", "fleet.engine.attempt"], ["-m", "fleet.engine.host"])
                if (chromium or attempt or "--no-sandbox" in argv) and self._ours(pid):
                    uids = [int(u) for u in next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1:]]
                    self.seen[(pid, argv[0])] = {"kind": "chromium" if chromium else "attempt", "uids": uids,
                                                 "no_sandbox": "--no-sandbox" in argv, "argv": " ".join(argv)[:200]}
            time.sleep(0.01)


# A scraper module that notes the user each run of its code runs as: its top level and its class body, run by every
# process that imports it (discovery, attempts), and its scrape. Each note is a file named after where and the pid.
SPY = '''
import os
from pathlib import Path
import polars as pl
from fleet import Scraper

NOTES = Path(__file__).resolve().parent.parent / "home" / "uids"


def note(where):
    (NOTES / f"{where}-{os.getpid()}").write_text(str(os.geteuid()))


note("module")


class Spy(Scraper):
    name = "spy"
    schema = {"id": pl.Int64}
    key = ("id",)
    note("class")

    async def scrape(self, page, ctx):
        note("scrape")
        yield {"id": 1}
'''


def _uids_noted(home: Path) -> dict[str, set[int]]:
    noted: dict[str, set[int]] = {}
    for f in (home / "uids").iterdir():
        noted.setdefault(f.name.split("-")[0], set()).add(int(f.read_text()))
    return noted


def test_a_week_under_a_0700_folder_scrapes_only_inside_the_sandbox(tmp_path):
    """`fleet demo` as root, with FLEET_HOME and the scrapers under a fresh 0700 folder (mktemp -d), the interpreter
    under /root (0700 here): the week is scraped in the sandbox all the same. A sampler polling /proc over the whole
    week sees Chromium and attempt processes, none as root and none with --no-sandbox; a scraper module that notes
    its user wherever its code runs (its top level and class body, imported by discovery in the CLI, the
    forkserver and the steps, and its scrape) is never run as root; the week is committed (by root, with the token
    the attempt processes never saw); the 0700 folder keeps its mode."""
    from fleet_tests.gitremote import make_remote
    from fleet_tests.conftest import SOURCE, committed_rows

    top = Path(tempfile.mkdtemp(prefix="fleet-0700-"))
    try:
        assert top.stat().st_mode & 0o777 == 0o700
        (top / "scrapers").mkdir()
        for name in ("books", "jobs"):
            shutil.copy(ROOT / "scrapers" / f"{name}.py", top / "scrapers")
        (top / "scrapers" / "spy.py").write_text(SPY)
        remote = make_remote(tmp_path)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "DAGSTER_HOME"}
        env.update(FLEET_HOME=str(top / "home"), FLEET_SCRAPERS_DIR=str(top / "scrapers"), FLEET_DATA_REMOTE=str(remote),
                   FLEET_DEMO_LATENCY_MS="10", FLEET_GIT_TOKEN="s3cr3t-token", PYTHONPATH=str(ROOT))
        (top / "home").mkdir()
        (top / "home" / "uids").mkdir(mode=0o777)
        (top / "home" / "uids").chmod(0o777)
        sampler = Sampler(top / "home", os.getpid())
        sampler.start()
        try:
            res = run_fleet(env, "demo", "--week", WEEK, "--force")
        finally:
            sampler.done.set()
            sampler.join()
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        assert "browser sandbox" not in res.stderr, res.stderr[-2000:]
        seen = list(sampler.seen.values())
        assert any(p["kind"] == "chromium" for p in seen) and any(p["kind"] == "attempt" for p in seen), seen
        assert not [p for p in seen if 0 in p["uids"]], seen
        assert not [p for p in seen if p["no_sandbox"]], seen
        assert top.stat().st_mode & 0o777 == 0o700  # no mode of the operator's was changed
        assert sorted(set(committed_rows(remote, WEEK)[SOURCE])) == ["books", "jobs", "spy"]
        assert _uids_noted(top / "home") == {"module": {65534}, "class": {65534}, "scrape": {65534}}
    finally:
        pool.stop(top / "home" / "browser-hosts")
        shutil.rmtree(top, ignore_errors=True)


def test_a_local_artifact_store_outside_fleet_home_is_in_the_sandboxs_view(tmp_path, monkeypatch):
    """FLEET_ARTIFACTS may name a folder outside FLEET_HOME (the benches do): the attempts write their spool and
    evidence there, so the view makes it writable as it does FLEET_HOME."""
    store = tmp_path / "elsewhere" / "artifacts"
    store.mkdir(parents=True)
    monkeypatch.setenv("FLEET_ARTIFACTS", str(store))
    writable = [p for p, w in sandbox.needed(tmp_path / "home", [tmp_path / "scrapers"], None) if w]
    assert writable == [tmp_path / "home", store.resolve()]
    monkeypatch.setenv("FLEET_ARTIFACTS", "s3://bucket/prefix")  # nothing of the machine's to put back
    assert [p for p, w in sandbox.needed(tmp_path / "home", [], None) if w] == [tmp_path / "home"]


def test_discovery_imports_as_the_sandboxs_user_and_survives_a_module_that_hangs_or_exits(open_home, monkeypatch):
    """As root, discovery imports the scraper modules in a sandboxed process: their code runs as the sandbox's user.
    A module whose import hangs is killed with that process after ``IMPORT_S`` and one that ends the process fails
    as a source saying so; the others are found. A clean answer is kept, keyed on the scrapers' code: asked again,
    no module is imported; a changed module is imported again."""
    from fleet.scraping import sandboxed

    monkeypatch.setattr(sandboxed, "IMPORT_S", 3.0)
    d = open_home / "scrapers"
    d.mkdir()
    (open_home / "home" / "uids").mkdir(mode=0o777)
    (open_home / "home" / "uids").chmod(0o777)
    (d / "spy.py").write_text(SPY)
    (d / "hangs.py").write_text("import time\ntime.sleep(600)\n")
    (d / "exits.py").write_text("import os\nos._exit(3)\n")
    found = {s.name: s for s in discover([d])}
    assert not found["spy"].broken and found["spy"].key == ("id",), found["spy"]
    assert "its import did not finish within 3 s" in found["hangs"].error, found["hangs"].error
    assert "its import ended the process that imported it (exit code 3" in found["exits"].error, found["exits"].error
    assert _uids_noted(open_home / "home") == {"module": {65534}, "class": {65534}}
    (d / "hangs.py").unlink()
    (d / "exits.py").unlink()
    for f in (open_home / "home" / "uids").iterdir():
        f.unlink()
    assert set(s.name for s in discover([d])) == {"spy"}  # asked: the answer without a hang is kept
    sandboxed._memo.clear()
    for f in (open_home / "home" / "uids").iterdir():
        f.unlink()
    assert [s.name for s in discover([d])] == ["spy"]
    assert not list((open_home / "home" / "uids").iterdir())  # read from what was kept: nothing imported
    (d / "spy.py").write_text(SPY.replace('name = "spy"', 'name = "spy2"'))
    assert [s.name for s in discover([d])] == ["spy2"]


def test_as_root_where_the_sandbox_is_refused_no_scraper_module_is_imported(open_home, monkeypatch):
    """No sandbox as root: discovery imports nothing; each module fails as a source naming why and the fix."""
    monkeypatch.setenv("FLEET_SANDBOX_USER", "no-such-user-here")
    d = open_home / "scrapers"
    d.mkdir()
    (open_home / "home" / "uids").mkdir(mode=0o777)
    (d / "spy.py").write_text(SPY)
    (src,) = discover([d])
    assert src.broken and "fleet imports no scraper as root without the sandbox" in src.error, src.error
    assert "no user 'no-such-user-here'" in src.error, src.error
    assert not list((open_home / "home" / "uids").iterdir())
