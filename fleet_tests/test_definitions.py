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
    expected = sorted([f"raw/{n}" for n in DEMO] + ["consolidated_raw_rows", "raw_commit", "post_processed", "processed_commit"])
    assert eval(keys) == expected
    weekly = "Weekly, starting 2026-01-05 UTC. End offsetted by 1 partition."  # from the assets (FLEET_START_WEEK)
    assert eval(jobs) == [("publish_week", weekly), ("scrape_week", weekly)]
    assert "fleet_after_failed_run" in automation and "weekly_fleet" in automation
    assert description.startswith("Book prices")


def test_fault_sources_are_opt_in_and_a_syntax_error_is_its_own_asset():
    keys = eval(_load({"FLEET_DEMO_FAULTS": "1"}).splitlines()[0])
    for name in ["broken_selector", "hang_async", "hang_blocking", "empty_feed", "flaky_503", "wrong_type", "syntax_error"]:
        assert f"raw/{name}" in keys
    assert all(f"raw/{n}" in keys for n in DEMO)


def test_the_loaded_definitions_are_out_of_the_collectors_reach():
    """Every full collection of a process that loaded the definitions (the CLI, the run, the code server)
    would scan all of them: with 1,000 sources that cost about 0.3 s of the load and 0.75 s of the exit.
    They are frozen; what the process allocates afterwards is still collected."""
    code = ("import gc\n"
            "from dagster import AssetsDefinition\n"
            "from fleet.defs.definitions import defs\n"
            "scanned = [o for o in gc.get_objects() if isinstance(o, AssetsDefinition)]\n"
            "class Cycle: pass\n"
            "c = Cycle(); c.me = c; del c\n"
            "print(len(scanned), len(defs.assets), gc.get_freeze_count() > 0, gc.collect() >= 1)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    scanned, assets, frozen, collected = out.split()
    assert (scanned, frozen, collected) == ("0", "True", "True"), out
    assert int(assets) == len(DEMO) + 4


FORKSERVER_PROBE = """import gc, multiprocessing, os, sys, threading, time
from multiprocessing import forkserver
def child(q):
    q.put(('fleet.defs.warm' in sys.modules, os.getppid(), gc.get_freeze_count()))
if __name__ == '__main__':
    from fleet.defs import definitions as d
    if sys.argv[1] == 'threaded':  # another thread: the server must be a new interpreter, not a fork
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    d.start_forkserver()
    server = forkserver._forkserver._forkserver_pid
    ctx = multiprocessing.get_context('forkserver')
    ctx.set_forkserver_preload(list(d.FORKSERVER_PRELOAD))  # as Dagster's executor does
    q = ctx.SimpleQueue()
    p = ctx.Process(target=child, args=(q,)); p.start(); p.join(60)
    warm, parent, frozen = q.get()
    # read once the server has served a fork: a new interpreter's cmdline reads b'' while it is still in execve
    cmdline = open(f'/proc/{server}/cmdline', 'rb').read()
    forked = cmdline == open('/proc/self/cmdline', 'rb').read()
    assert forked != (b'forkserver import main' in cmdline), cmdline
    print(forked, 'fleet.defs.warm' in sys.modules, warm, parent == server,
          forkserver._forkserver._forkserver_pid == server, frozen > 10000, p.exitcode)
"""


@pytest.mark.parametrize("mode, expected", [
    # `fleet run`: the server is a fork of the caller, once the caller has warmed itself
    ("single", "True True True True True True 0"),
    # with a second thread a fork is unsafe: a new interpreter preloads fleet.defs.warm, as Python would
    ("threaded", "False False True True True True 0"),
])
def test_fleet_runs_forkserver_is_started_early_with_the_executors_preload(tmp_path, mode, expected):
    """`fleet run` starts its forkserver before it creates the run; the executor then forks every step from that
    same server, already warm (fleet.defs.warm imported), instead of starting and preloading one itself. The
    server's heap is frozen (gc.freeze), so a step's garbage collections never walk what it inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    path = tmp_path / "forkserver_probe.py"  # a file: forkserver children import the main module by its path
    path.write_text(FORKSERVER_PROBE)
    out = subprocess.run([sys.executable, str(path), mode], env=env, capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == expected, out.stdout + out.stderr[-2000:]


def _shape(a) -> dict:
    """Everything Dagster knows of a raw asset, but its compute function's identity."""
    import inspect
    op = a.op
    attrs = {k: v for k, v in a.get_attributes_dict().items() if k != "node_def"}
    attrs["specs"] = list(attrs["specs"])
    return {**attrs, "op": (op.name, op.description, dict(op.tags), op.pool, op.retry_policy, op.required_resource_keys,
                            op.config_schema.as_field().config_type.key, [i.name for i in op.input_defs],
                            [(o.name, o.dagster_type.key, o.is_required, o.description, o.metadata, o.code_version,
                              o.io_manager_key, o.is_dynamic) for o in op.output_defs]),
            "source": inspect.getclosurevars(op.compute_fn.decorated_fn).nonlocals["source"],
            "partitions": a.partitions_def, "groups": a.group_names_by_key, "tags": a.tags_by_key,
            "descriptions": a.descriptions_by_key, "kinds": a.specs_by_key[a.key].kinds}


def test_a_raw_asset_built_as_a_copy_is_the_one_asset_builds():
    """raw_assets() builds the first source's asset through @asset and copies it for the rest (loading 1,000
    sources); each copy equals what @asset builds for its source, down to its outputs and its own compute
    function, and a Dagster that refuses the copy gets @asset's."""
    from unittest import mock

    from fleet.defs import assets as A
    from fleet.scraping.discovery import discover
    sources = discover([ROOT / "scrapers"])
    assert len(sources) >= 3
    parts, retry = A.partitions(), A.crash_retry_policy()
    built = A.raw_assets(sources, parts, retry)
    for source, copy in zip(sources, built):
        assert _shape(copy) == _shape(A.raw_asset(source, parts, retry)), source.name
    assert _shape(built[1]) != _shape(built[2])
    with mock.patch.object(A, "raw_asset_copier", side_effect=TypeError("moved")):
        slow = A.raw_assets(sources, parts, retry)
    assert [_shape(a) for a in slow] == [_shape(a) for a in built]


START_WEEK_PROBE = ("from fleet.defs.assets import partitions\n"
                    "try:\n"
                    "    print(partitions().get_first_partition_key())\n"
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

    from dagster._core.definitions.partitions.context import partition_loading_context

    from fleet.defs.assets import partitions
    from fleet.errors import FleetError
    from fleet.weeks import check_week_in_partitions

    monkeypatch.setenv("FLEET_START_WEEK", "2026-W02")
    utc = dt.timezone.utc
    for now in (dt.datetime(2026, 12, 6, 23, 59, 59, tzinfo=utc), dt.datetime(2026, 12, 7, 0, 0, tzinfo=utc),
                dt.datetime(2026, 12, 9, 12, 0, tzinfo=utc), dt.datetime(2026, 1, 7, tzinfo=utc),
                dt.datetime(2025, 12, 31, tzinfo=utc)):
        with partition_loading_context(now):
            keys = set(partitions().get_partition_keys())
        for i in range(-3, 60):
            week = dt.date(2026, 1, 5) + dt.timedelta(weeks=i)
            try:
                held = check_week_in_partitions(week, now=now) == week.isoformat()
            except FleetError:
                held = False
            assert held == (week.isoformat() in keys), (now, week)
    now = dt.datetime(2026, 12, 9, tzinfo=utc)
    with pytest.raises(FleetError, match=r"week 2025-12-29 is before the first weekly partition, 2026-01-05 \(FLEET_START_WEEK\)"):
        check_week_in_partitions("2026-W01", now=now)
    with pytest.raises(FleetError, match="week 2026-12-14 has not started: the last weekly partition is 2026-12-07"):
        check_week_in_partitions("2026-W51", now=now)
    assert check_week_in_partitions("2026-W50", now=now) == "2026-12-07"


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
