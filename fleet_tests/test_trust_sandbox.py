"""The browser sandbox through real workers and Chromium, as root: the scraper's code and Chromium run as an
unprivileged user, with Chromium's sandbox on (no --no-sandbox, renderers under seccomp), in warm workers and in
workers of their own; the data repository's token never reaches a worker. Where the sandbox cannot be had, fleet
says so once, in one line, and runs as today."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from fleet.engine import pool
from fleet.scraping.discovery import discover
from fleet.engine.runner import EngineSettings, run_source
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import ROOT, WEEK, run_fleet

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


def test_without_a_sandbox_user_fleet_says_so_once_and_runs_as_today(fleet_env):
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    (scrapers / "books.py").write_text((ROOT / "scrapers" / "books.py").read_text())
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_SANDBOX_USER": "no-such-user-here"}
    res = run_fleet(env, "demo", "--week", WEEK, "--force")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    lines = [l for l in res.stderr.splitlines() if "browser sandbox" in l]
    assert lines == ["fleet: the browser sandbox is off (there is no user 'no-such-user-here' (FLEET_SANDBOX_USER) "
                     "to run attempt processes as); attempt processes and Chromium run as root with --no-sandbox"], lines


def test_fleet_ui_says_the_sandbox_is_off_once_at_start(fleet_env):
    """The UI's runs scrape on this host too: `fleet ui` says the same line once, as it starts."""
    from fleet_tests.conftest import start_ui, stop_ui

    ui, _port = start_ui(fleet_env, {**fleet_env.env, "FLEET_SANDBOX_USER": "no-such-user-here"}, settle_s=0)
    stop_ui(ui)
    seen = (fleet_env.tmp / "ui.log").read_text().splitlines()
    said = [ln for ln in seen if "browser sandbox" in ln]
    assert said == ["fleet: the browser sandbox is off (there is no user 'no-such-user-here' (FLEET_SANDBOX_USER) to "
                    "run attempt processes as); attempt processes and Chromium run as root with --no-sandbox"], seen


def test_a_sandboxed_week_runs_end_to_end(open_home, tmp_path):
    """`fleet demo` as root, with FLEET_HOME where the sandbox's user can reach it: no "sandbox is off" line, the
    warm workers are that user's, and the week is committed (by root, with the token the workers never saw)."""
    from fleet_tests.gitremote import make_remote
    from fleet_tests.conftest import committed_frame

    remote = make_remote(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env.update(FLEET_DATA_REMOTE=str(remote), FLEET_DEMO_LATENCY_MS="10", PYTHONPATH=str(ROOT))
    res = run_fleet(env, "demo", "--week", WEEK, "--force", "--source", "books", "--source", "jobs")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "browser sandbox is off" not in res.stderr, res.stderr[-2000:]
    workers = open_home / "home" / "browser-hosts"
    assert {p.stat().st_uid for p in workers.glob("*.pid")} == {65534}
    assert sorted(set(committed_frame(remote, f"data/{WEEK}/raw.parquet")["source"])) == ["books", "jobs"]
