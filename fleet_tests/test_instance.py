"""The instance is the user's: fleet writes dagster.yaml only where there is none, and refuses at start an instance
that lacks what it relies on, in one line naming the key (exit code 2 for `fleet run` and `fleet ui`)."""
import subprocess
import sys

import pytest

from fleet_tests.conftest import WEEK, free_port, run_fleet


def _yaml(fleet_env):
    return fleet_env.home / "dagster" / "dagster.yaml"


def _first_instance(fleet_env, monkeypatch):
    for k, v in fleet_env.env.items():
        if k.startswith("FLEET_"):
            monkeypatch.setenv(k, v)
    from fleet.config import settings
    from fleet.defs.instance import get_instance
    return get_instance(settings())


def test_fleet_writes_dagster_yaml_once_and_never_overwrites_it(fleet_env, monkeypatch):
    instance = _first_instance(fleet_env, monkeypatch)
    assert instance.run_monitoring_enabled
    text = _yaml(fleet_env).read_text()
    assert "QueuedRunCoordinator" in text and "default_limit: 20" in text  # 2 steps per source of the cap (10)
    edited = text.replace("max_concurrent_runs: 8", "max_concurrent_runs: 3") + "# the user's own line\n"
    _yaml(fleet_env).write_text(edited)
    monkeypatch.setenv("FLEET_RUN_MONITOR_S", "7")  # a setting that once rewrote the file
    _first_instance(fleet_env, monkeypatch)
    assert _yaml(fleet_env).read_text() == edited


@pytest.mark.parametrize("edit, named", [
    (lambda t: t.replace("  enabled: true\n  start_timeout", "  enabled: false\n  start_timeout"),
     "run_monitoring.enabled is not true"),
    (lambda t: t.replace("key: dagster/partition", "key: dagster/backfill"),
     "concurrency.runs.tag_concurrency_limits has no limit of 1 per unique value of dagster/partition"),
    (lambda t: t.replace("    default_limit: 20\n", ""), "concurrency.pools.default_limit is missing"),
    (lambda t: t.replace("  free_slots_after_run_end_seconds: 1\n", ""),
     "run_monitoring.free_slots_after_run_end_seconds is not set"),
])
def test_a_missing_key_is_refused_by_fleet_run_and_fleet_ui_in_one_line(fleet_env, monkeypatch, edit, named):
    _first_instance(fleet_env, monkeypatch)
    _yaml(fleet_env).write_text(edit(_yaml(fleet_env).read_text()))
    env = {**fleet_env.env, "FLEET_DEMO_URL": "http://127.0.0.1:9"}
    res = run_fleet(env, "run", "--week", WEEK, "--force", timeout=180)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stderr.count("\n") == 1 and named in res.stderr and "dagster.yaml" in res.stderr, res.stderr
    ui = subprocess.run([sys.executable, "-m", "fleet.cli", "ui", "--no-demo", "--port", str(free_port())], env=env,
                        cwd=fleet_env.home, capture_output=True, text=True, timeout=180)
    assert ui.returncode == 2 and ui.stderr.count("\n") == 1 and named in ui.stderr, ui.stderr[-2000:]


def test_the_pool_limit_and_fleet_max_parallel_must_agree(fleet_env, monkeypatch):
    """The instance's scrapers pool admits 2 steps per source of the cap (fleet's own slots hold the cap around each
    scrape); FLEET_MAX_PARALLEL that says otherwise is refused, naming both and the limit to set."""
    _first_instance(fleet_env, monkeypatch)
    env = {**fleet_env.env, "FLEET_MAX_PARALLEL": "4", "FLEET_DEMO_URL": "http://127.0.0.1:9"}
    res = run_fleet(env, "run", "--week", WEEK, "--force", timeout=180)
    assert res.returncode == 2
    assert res.stderr.strip() == ("fleet: error: the instance's 'scrapers' pool limit is 20 but FLEET_MAX_PARALLEL "
                                  "is 4; the pool admits 2 steps per source of the cap on sources scraping at once: "
                                  "set it to 8 (`dagster instance concurrency set scrapers 8`)")
