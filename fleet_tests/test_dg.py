"""fleet as a `dg` project and a component, through the real `dg` (the dg extra): `dg check defs`, `dg list defs`,
`dg list components`, `dg launch` and `dg dev` in the checkout, and `dg scaffold defs` into another project."""
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fleet_tests.conftest import ROOT

COMPONENT = "fleet.defs.component.FleetComponent"
WEEK = "2026-11-30"  # a complete week: `dg launch` scrapes it today (an older one is refused as past)
PUBLISH = ["consolidated_raw_rows", "post_processed", "processed_commit", "raw_commit"]
REQUESTS = "fleet/requests"  # the external asset of fleet's run requests (fleet/defs/requests.py), not materialized
NO_PAGE = '''import polars as pl

from fleet import Scraper


class {cls}(Scraper):
    """{name}: a page fleet writes itself."""

    name = "{name}"
    schema = {{"id": pl.Int64, "title": pl.String}}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await page.set_content("<title>{name}</title>")
        yield {{"id": 1, "title": await page.title()}}
'''


def _dg() -> str:
    dg = Path(sys.executable).parent / "dg"
    assert dg.exists(), f"no dg beside {sys.executable}: pip install -e '.[dg]'"
    # dg finds component types through installed entry points: metadata from before pyproject.toml declared
    # fleet's would list none of fleet's, and the failure would look like a bug in the component
    found = [e.value for e in importlib.metadata.entry_points(group="dagster_dg_cli.registry_modules")
             if e.name == "fleet"]
    assert found == ["fleet.defs.component"], "fleet's installed metadata has no dg entry point: pip install -e '.[dg]'"
    return str(dg)


def _env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "DAGSTER_HOME"}
    (tmp_path / "dagster").mkdir(exist_ok=True)
    env.update(FLEET_HOME=str(tmp_path / "home"), DAGSTER_HOME=str(tmp_path / "dagster"), PYTHONPATH=str(ROOT),
               **extra)
    return env


def dg(env: dict, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    out = subprocess.run([_dg(), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"dg {' '.join(args)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out


def _scrapers(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"{name}.py").write_text(NO_PAGE.format(cls=name.title(), name=name))
    return folder


def _bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def _commits(remote: Path) -> list[str]:
    return subprocess.run(["git", "-C", str(remote), "log", "--format=%s", "main"], capture_output=True,
                          text=True, check=True).stdout.splitlines()


def _listed(env: dict, cwd: Path) -> dict:
    return json.loads(dg(env, cwd, "list", "defs", "--json").stdout)


def test_the_checkout_is_a_dg_project_whose_defs_check_list_and_launch(tmp_path):
    remote = _bare(tmp_path / "data.git")
    env = _env(tmp_path, FLEET_SCRAPERS_DIR=str(_scrapers(tmp_path / "scrapers", "alpha", "beta")),
               FLEET_DATA_REMOTE=str(remote))
    assert "All definitions loaded successfully." in dg(env, ROOT, "check", "defs").stdout
    listed = _listed(env, ROOT)
    assert sorted(a["asset_key"] for a in listed["assets"]) == sorted(["raw/alpha", "raw/beta", *PUBLISH, REQUESTS])
    assert sorted(c["key"] for c in listed["asset_checks"]) == ["raw/alpha:fresh_week", "raw/alpha:quality",
                                                               "raw/beta:fresh_week", "raw/beta:quality"]
    assert sorted(s["name"] for s in listed["sensors"]) == ["fleet_after_failed_run", "fleet_after_scrape_run",
                                                               "fleet_requests"]
    assert {s["name"]: s["cron_schedule"] for s in listed["schedules"]} == {
        "weekly_fleet": "0 6 * * 1", "fleet_canary_daily": "0 6 * * *", "fleet_freshness_weekly": "0 12 * * 1"}
    assert {"scrape_week", "publish_week", "fleet_canary", "fleet_freshness"} <= {j["name"] for j in listed["jobs"]}
    # one way to define a fleet: what dg lists comes from the component instance in fleet's own defs folder
    assert all(s["source"].startswith("fleet/defs/fleets/fleet/defs.yaml") for s in listed["sensors"])

    dg(env, ROOT, "launch", "--assets", "*", "--partition", WEEK)
    assert _commits(remote) == [f"fleet: processed rows for week {WEEK}", f"fleet: raw rows for week {WEEK}"]


def test_dg_lists_fleets_component():
    out = json.loads(dg({**os.environ, "PYTHONPATH": str(ROOT)}, ROOT, "list", "components", "--json").stdout)
    assert COMPONENT in [item["key"] for item in out["items"]]


PROJECT = """[project]
name = "other"
version = "0.1.0"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "other"
"""
DEFINITIONS = """from pathlib import Path

import dagster as dg


@dg.definitions
def defs():
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def _project(root: Path) -> Path:
    """The smallest dg project there is, written by hand: `dg scaffold project` wants uv and the network."""
    (root / "other" / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PROJECT)
    (root / "other" / "__init__.py").write_text("")
    (root / "other" / "defs" / "__init__.py").write_text("")
    (root / "other" / "definitions.py").write_text(DEFINITIONS)
    return root


def test_scaffolded_into_another_project_it_lists_and_its_yaml_settings_reach_the_run(tmp_path):
    project = _project(tmp_path / "other")
    env = _env(tmp_path)  # no FLEET_SCRAPERS_DIR nor FLEET_DATA_REMOTE: the defs.yaml says where
    dg(env, project, "scaffold", "defs", COMPONENT, "weekly")
    defs_yaml = project / "other" / "defs" / "weekly" / "defs.yaml"
    assert defs_yaml.read_text().count(f"type: {COMPONENT}") == 1
    assert "All definitions loaded successfully." in dg(env, project, "check", "defs").stdout
    listed = _listed(env, project)
    assert sorted(a["asset_key"] for a in listed["assets"]) == sorted(["raw/example", *PUBLISH, REQUESTS])
    assert sorted(c["key"] for c in listed["asset_checks"]) == ["raw/example:fresh_week", "raw/example:quality"]

    # attributes over the environment: the schedule and the data repository from YAML reach the definitions and
    # the run; a second scrapers folder adds its sources
    remote = _bare(tmp_path / "data.git")
    _scrapers(project / "other" / "defs" / "weekly" / "more", "gamma")
    defs_yaml.write_text(defs_yaml.read_text().replace("scrapers: [scrapers]", "scrapers: [scrapers, more]") + (
        f"  data_remote: {remote}\n  schedule: '0 7 * * 2'\n  crash_reruns: 0\n"))
    listed = _listed(env, project)
    assert sorted(a["asset_key"] for a in listed["assets"]) == sorted(["raw/example", "raw/gamma", *PUBLISH, REQUESTS])
    assert {s["name"]: s["cron_schedule"] for s in listed["schedules"]}["weekly_fleet"] == "0 7 * * 2"
    dg(env, project, "launch", "--assets", "*", "--partition", WEEK)
    assert _commits(remote) == [f"fleet: processed rows for week {WEEK}", f"fleet: raw rows for week {WEEK}"]


def test_a_bad_attribute_is_one_line_naming_it_and_its_file(tmp_path):
    project = _project(tmp_path / "other")
    env = _env(tmp_path)
    dg(env, project, "scaffold", "defs", COMPONENT, "weekly")
    defs_yaml = project / "other" / "defs" / "weekly" / "defs.yaml"
    defs_yaml.write_text(defs_yaml.read_text() + "  start_week: 2026-01-07\n")
    out = subprocess.run([_dg(), "check", "defs"], env=env, cwd=project, capture_output=True, text=True, timeout=600)
    assert out.returncode != 0
    assert (f"{defs_yaml}: start_week must be a Monday (2026-01-05) or an ISO week (2026-W02), got '2026-01-07', "
            "a Wednesday") in out.stdout + out.stderr


def test_dg_dev_serves_fleets_definitions_and_stops_on_ctrl_c(tmp_path):
    env = _env(tmp_path, FLEET_SCRAPERS_DIR=str(_scrapers(tmp_path / "scrapers", "alpha")))
    with socket.socket() as s:  # a free port, not one another test's server may hold
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # a new session with SIGINT restored: a background process ignores it otherwise (GUIDE, field notes)
    proc = subprocess.Popen([_dg(), "dev", "--port", str(port)], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    query = json.dumps({"query": "{ assetNodes { assetKey { path } } }"}).encode()
    try:
        deadline, keys = time.monotonic() + 240, None
        while keys is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=query,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=10) as resp:
                    keys = sorted("/".join(n["assetKey"]["path"]) for n in json.load(resp)["data"]["assetNodes"])
            except (OSError, KeyError, TypeError):
                time.sleep(2)
        assert keys == sorted(["raw/alpha", *PUBLISH, REQUESTS]), f"dg dev did not serve fleet's assets (exit {proc.poll()})"
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail("dg dev did not stop within 90 s of Ctrl-C")


def test_attributes_win_over_the_environment_which_gives_the_rest_and_is_not_written(tmp_path, monkeypatch):
    from fleet.defs.component import FleetComponent

    for k in [k for k in os.environ if k.startswith("FLEET_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLEET_CRASH_RERUNS", "5")
    monkeypatch.setenv("FLEET_MAX_PARALLEL", "7")
    monkeypatch.setenv("FLEET_DATA_REMOTE", "/srv/env.git")
    _scrapers(tmp_path / "mine", "alpha")
    component = FleetComponent(scrapers=["mine"], max_parallel=3, data_remote="/srv/yaml.git", data_prefix="feeds",
                               alert_routes={"team:data": "https://hooks.example.com/data"})
    before = dict(os.environ)
    spec = component.spec(tmp_path)
    assert dict(os.environ) == before
    s = spec.settings
    assert (s.max_parallel, s.crash_reruns, s.data_remote, s.prefix) == (3, 5, "/srv/yaml.git", "feeds/")
    assert spec.scrapers == ((tmp_path / "mine").resolve(),)
    assert spec.alert_routes == {"team:data": "https://hooks.example.com/data"}
    with pytest.raises(Exception, match=r"defs\.yaml: scrapers names no folder at .*/nowhere$"):
        FleetComponent(scrapers=["nowhere"]).spec(tmp_path)


def test_the_readmes_defs_yaml_loads_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## As a dg project / component"):readme.index("## Commands")]
    block = section[section.index("```yaml\n") + 8:section.index("```", section.index("```yaml\n") + 8)]
    project = _project(tmp_path / "other")
    env = _env(tmp_path)
    dg(env, project, "scaffold", "defs", COMPONENT, "weekly")
    (project / "other" / "defs" / "weekly" / "defs.yaml").write_text(block)
    listed = _listed(env, project)
    assert sorted(a["asset_key"] for a in listed["assets"]) == sorted(["raw/example", *PUBLISH, REQUESTS])
    assert {s["name"]: s["cron_schedule"] for s in listed["schedules"]}["weekly_fleet"] == "0 6 * * 1"
