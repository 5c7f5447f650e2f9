"""The definitions load, with the expected asset keys, jobs, sensors and schedule."""
import os
import subprocess
import sys

import pytest

from fleet_tests.conftest import ROOT

DEMO = ["books", "catalog", "jobs", "parts", "shops", "stocks"]


def _load(env_extra: dict) -> str:
    code = ("from fleet.defs.definitions import defs\n"
            "print(sorted(k.to_user_string() for k in defs.resolve_all_asset_keys()))\n"
            "print(sorted((j.name, str(defs.resolve_job_def(j.name).partitions_def)) for j in defs.jobs\n"
            "             if not j.name.startswith('__')))\n"
            "print(sorted(s.name for s in defs.sensors), sorted(s.name for s in defs.schedules))\n"
            "from dagster import AssetKey\n"
            "a = defs.resolve_assets_def(AssetKey(['raw', 'books']))\n"
            "print(a.descriptions_by_key[a.key])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT).stdout


def test_definitions_have_demo_assets_and_automation():
    keys, jobs, automation, description = _load({}).splitlines()
    expected = sorted([f"raw/{n}" for n in DEMO] + ["consolidated_raw_rows", "raw_commit", "post_processed", "processed_commit",
                                                     "fleet/requests"])  # run requests' external asset (defs/requests.py)
    assert eval(keys) == expected
    weekly = "Weekly, starting 2026-01-05 UTC. End offsetted by 1 partition."  # from the assets (FLEET_START_WEEK)
    # the daily canary (fleet/defs/canary.py) is not partitioned by week
    assert eval(jobs) == [("fleet_canary", "None"), ("fleet_freshness", "None"), ("publish_week", weekly),
                          ("scrape_week", weekly)]
    assert "fleet_after_failed_run" in automation and "weekly_fleet" in automation and "fleet_requests" in automation
    assert "fleet_canary_daily" in automation
    assert description.startswith("Book prices")


def test_fault_sources_are_opt_in_and_a_syntax_error_is_its_own_asset():
    keys = eval(_load({"FLEET_DEMO_FAULTS": "1"}).splitlines()[0])
    for name in ["broken_selector", "hang_async", "hang_blocking", "empty_feed", "flaky_503", "wrong_type", "syntax_error"]:
        assert f"raw/{name}" in keys
    assert all(f"raw/{n}" in keys for n in DEMO)


def test_definitions_carry_fleets_settings_as_resources_and_the_token_as_an_env_var():
    """The data repository, the artifact store, the browser and the alerts are Dagster resources, built from the
    FLEET_* variables; the git token is an EnvVar, so neither the UI nor the resource's config holds its value."""
    code = ("from fleet.defs.definitions import defs\n"
            "r = defs.resources\n"
            "print(sorted(r))\n"
            "print(r['data_repo'].remote, r['data_repo'].branch, r['data_repo'].prefix)\n"
            "print(repr(r['data_repo'].token))\n"
            "print(r['artifacts'].root.endswith('/artifacts'))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(FLEET_DATA_REMOTE="/tmp/somewhere.git", FLEET_DATA_BRANCH="weekly", FLEET_DATA_PREFIX="feeds",
               FLEET_GIT_TOKEN="s3cr3t-value")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    keys, repo, token, artifacts = out.stdout.strip().splitlines()
    assert eval(keys) == ["alerts", "artifacts", "browser", "data_repo"]
    assert repo == "/tmp/somewhere.git weekly feeds/"
    assert "FLEET_GIT_TOKEN" in token and "s3cr3t" not in token
    assert artifacts == "True"


def test_no_private_internals_in_what_fleet_installs():
    """fleet/ and scrapers/ import no private module of Dagster, Playwright, alembic or multiprocessing, and assign
    no attribute of a library's module; the one exception is fleet/records.py, the adapter that lists every
    non-public Dagster member fleet uses, under 200 lines."""
    import re
    private = re.compile(r"^\s*(from|import)\s+(dagster\._|playwright\._|alembic|"
                         r"multiprocessing\.(forkserver|popen_|context|util|reduction|connection))", re.M)
    patched = re.compile(r"^\s*(dagster|playwright|multiprocessing|alembic|git|polars)(\.\w+)+\s*=[^=]", re.M)
    found = []
    for folder in ("fleet", "scrapers"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == ROOT / "fleet" / "records.py":
                continue
            text = path.read_text()
            found += [f"{path.relative_to(ROOT)}: {m.group(0).strip()}" for m in private.finditer(text)]
            found += [f"{path.relative_to(ROOT)}: {m.group(0).strip()}" for m in patched.finditer(text)]
    assert found == []
    assert not list(ROOT.glob("*.pth")) and not (ROOT / "sitecustomize.py").exists()
    assert len((ROOT / "fleet" / "records.py").read_text().splitlines()) < 200


START_WEEK_PROBE = ("from fleet.config import settings\n"
                    "from fleet.defs.assets import partitions\n"
                    "try:\n"
                    "    print(partitions(settings().start_week).get_first_partition_key())\n"
                    "except Exception as exc:\n"
                    "    print(type(exc).__name__, exc)\n")


@pytest.mark.parametrize("value, expected", [
    ("2026-01-05", "2026-01-05"),
    ("2026-W02", "2026-01-05"),     # an ISO week, as `--week` takes it (README)
    ("", "2026-01-05"),             # unset: the default
    ("garbage", "FleetError FLEET_START_WEEK must be a Monday (2026-01-05) or an ISO week (2026-W02), got 'garbage'"),
    # a Tuesday is refused: Dagster's weekly partitions would have started on the Monday after it (2026-01-12)
    ("2026-01-06", "FleetError FLEET_START_WEEK must be a Monday (2026-01-05) or an ISO week (2026-W02), "
                   "got '2026-01-06', a Tuesday"),
])
def test_start_week_takes_a_monday_or_an_iso_week_and_names_itself_otherwise(value, expected):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env["FLEET_START_WEEK"] = value
    out = subprocess.run([sys.executable, "-c", START_WEEK_PROBE], env=env, capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.stdout.strip() == expected, out.stdout + out.stderr[-2000:]


def test_fleet_run_reports_a_bad_start_week_by_name(fleet_env):
    from fleet_tests.conftest import WEEK, run_fleet
    res = run_fleet({**fleet_env.env, "FLEET_START_WEEK": "2026-W99"}, "run", "--week", WEEK, "--force", timeout=120)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-3000:]
    assert res.stderr.strip() == ("fleet: error: FLEET_START_WEEK must be a Monday (2026-01-05) or an ISO week "
                                  "(2026-W02), got '2026-W99'"), res.stderr[-3000:]


def test_the_weeks_in_partitions_are_dagsters(monkeypatch):
    """weeks.check_week_in_partitions (for `--week`, without importing Dagster) holds exactly the weeks of the
    assets' partitions definition: from FLEET_START_WEEK to the week in progress in UTC, at its edges."""
    import datetime as dt

    from dagster._core.definitions.partitions.context import partition_loading_context  # Dagster's clock, pinned

    from fleet.config import settings
    from fleet.defs.assets import partitions
    from fleet.errors import FleetError
    from fleet.weeks import check_week_in_partitions

    monkeypatch.setenv("FLEET_START_WEEK", "2026-W02")
    utc = dt.timezone.utc
    for now in (dt.datetime(2026, 12, 6, 23, 59, 59, tzinfo=utc), dt.datetime(2026, 12, 7, 0, 0, tzinfo=utc),
                dt.datetime(2026, 12, 9, 12, 0, tzinfo=utc), dt.datetime(2026, 1, 7, tzinfo=utc),
                dt.datetime(2025, 12, 31, tzinfo=utc)):
        with partition_loading_context(now):
            keys = set(partitions(settings().start_week).get_partition_keys())
        for i in range(-3, 60):
            week = dt.date(2026, 1, 5) + dt.timedelta(weeks=i)
            try:
                held = check_week_in_partitions(week, "2026-W02", now=now) == week.isoformat()
            except FleetError:
                held = False
            assert held == (week.isoformat() in keys), (now, week)
    now = dt.datetime(2026, 12, 9, tzinfo=utc)
    with pytest.raises(FleetError, match=r"week 2025-12-29 is before the first weekly partition, 2026-01-05 \(FLEET_START_WEEK\)"):
        check_week_in_partitions("2026-W01", "2026-W02", now=now)
    with pytest.raises(FleetError, match="week 2026-12-14 has not started: the last weekly partition is 2026-12-07"):
        check_week_in_partitions("2026-W51", "2026-W02", now=now)
    assert check_week_in_partitions("2026-W50", "2026-W02", now=now) == "2026-12-07"


SCHEDULE_PROBE = """import datetime as dt, json
from dagster import build_schedule_context
from fleet.config import settings
from fleet.defs.definitions import defs
from fleet.defs.instance import get_instance

schedule = defs.get_schedule_def("weekly_fleet")
out = {"cron": [schedule.job_name, schedule.cron_schedule, schedule.execution_timezone, str(schedule.default_status)],
       "ticks": {}}
with get_instance(settings()) as instance:
    for tick in ("2026-11-23T06:00:00+00:00", "2027-01-04T06:00:00+00:00", "2026-01-12T06:00:00+00:00"):
        context = build_schedule_context(instance=instance, scheduled_execution_time=dt.datetime.fromisoformat(tick),
                                         repository_def=defs.get_repository_def())
        data = schedule.evaluate_tick(context)
        out["ticks"][tick] = [[r.partition_key, r.run_key, r.tags.get("dagster/partition"), r.tags.get("fleet/kind")]
                              for r in data.run_requests]
print(json.dumps(out))
"""


def test_the_weekly_schedule_scrapes_the_week_its_tick_ended(fleet_env):
    """Evaluated by Dagster at a tick's time, on a real instance: Monday 06:00 UTC asks for the week that just
    ended (the tick's own date, not the wall clock), as a partition of scrape_week, once per week (run_key)."""
    import json
    out = subprocess.run([sys.executable, "-c", SCHEDULE_PROBE], env=fleet_env.env, capture_output=True, text=True,
                         cwd=fleet_env.home, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["cron"] == ["scrape_week", "0 6 * * 1", "UTC", "DefaultScheduleStatus.STOPPED"]
    assert got["ticks"] == {
        "2026-11-23T06:00:00+00:00": [["2026-11-16", "weekly:2026-11-16", "2026-11-16", "scrape"]],
        "2027-01-04T06:00:00+00:00": [["2026-12-28", "weekly:2026-12-28", "2026-12-28", "scrape"]],  # ISO 2026-W53
        "2026-01-12T06:00:00+00:00": [["2026-01-05", "weekly:2026-01-05", "2026-01-05", "scrape"]],  # the first
    }
