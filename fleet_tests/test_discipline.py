"""Run discipline: one run per week, kill -9 at any point then rerun, reprocess, refusal of past weeks."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from fleet_tests.conftest import ROOT, SOURCE, WEEK, committed_rows, run_fleet, start_ui, writable_dir
from fleet_tests.gitremote import log

STEADY_DIR = ROOT / "fleet_tests" / "scrapers_crash"


def _steady_env(fleet_env):
    d = fleet_env.tmp / "steady_only"
    d.mkdir(exist_ok=True)
    (d / "steady.py").write_text((STEADY_DIR / "steady.py").read_text())
    (d / "steady_two.py").write_text((STEADY_DIR / "steady.py").read_text()
                                     .replace('name = "steady"', 'name = "steady_two"')
                                     .replace("class Steady", "class SteadyTwo"))
    return {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d)}


def test_two_concurrent_runs_of_a_week_make_one_week_of_commits(fleet_env):
    env = _steady_env(fleet_env)
    before = len(log(fleet_env.remote))
    cmd = [sys.executable, "-m", "fleet.cli", "run", "--week", WEEK, "--force"]
    procs = [subprocess.Popen(cmd, env=env, cwd=fleet_env.home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    assert any("is already being run by" in o for o in outs), outs
    assert len(log(fleet_env.remote)) == before + 2


def test_kill_9_at_any_point_then_rerun_gives_the_uninterrupted_result(fleet_env):
    env = _steady_env(fleet_env)
    for delay in (1.5, 4.0, 7.0):
        p = subprocess.Popen([sys.executable, "-m", "fleet.cli", "run", "--week", WEEK, "--force"], env=env,
                             cwd=fleet_env.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(delay)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(frame.select(SOURCE, "id", "week").rows()) == sorted((src, i, __import__("datetime").date(2026, 11, 16))
                                          for src in ("steady", "steady_two") for i in (1, 2, 3))
    subjects = [c["subject"] for c in log(fleet_env.remote) if c["subject"].startswith("fleet:")]
    assert subjects == [f"fleet: processed rows for week {WEEK}", f"fleet: raw rows for week {WEEK}"]
    # nothing is left "in progress" for the week
    status = run_fleet(env, "status", "--week", WEEK)
    assert "steady " in status.stdout and " ok " in status.stdout


def test_reprocess_and_past_weeks(fleet_env):
    env = _steady_env(fleet_env)
    refused = run_fleet(env, "run", "--week", "2026-W10")
    assert refused.returncode == 2 and "older than the last complete week" in refused.stderr
    assert run_fleet(env, "run", "--week", WEEK, "--force").returncode == 0
    n = len(log(fleet_env.remote))
    again = run_fleet(env, "reprocess", "--week", WEEK)
    assert again.returncode == 0 and "up_to_date" in again.stdout
    assert len(log(fleet_env.remote)) == n
    # a stored week runs without --force and without scraping
    rerun = run_fleet(env, "backfill", "--from", WEEK, "--to", WEEK)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "reusing the stored artifact" in rerun.stdout + rerun.stderr
    assert len(log(fleet_env.remote)) == n


def test_west_of_utc_late_on_sunday_the_default_week_is_the_one_the_past_week_guard_accepts(fleet_env):
    """Sunday 2026-11-29 23:30 in Los Angeles is Monday 07:30 in UTC: the week of 2026-11-23 is complete. The
    default week is judged in UTC, as "past" is; judged in local time it was 2026-11-16, which the guard refused
    as past. The command alone runs at the faked time (libfaketime; the week's runs would be the daemon's, on the
    real clock): the guard accepts the default week, so the command goes on to its next check, which refuses the
    unknown source; and `fleet status` names that week."""
    if shutil.which("faketime") is None:
        pytest.fail("faketime is not installed (Debian's faketime package; .ci/setup installs it)")
    env = {**_steady_env(fleet_env), "TZ": "America/Los_Angeles"}

    def fleet(*args):
        return subprocess.run(["faketime", "-f", "@2026-11-29 23:30:00", sys.executable, "-m", "fleet.cli", *args],
                              env=env, cwd=fleet_env.home, capture_output=True, text=True, timeout=420)

    res = fleet("run", "--source", "no_such_source")
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stderr.count("\n") == 1 and "unknown source(s): no_such_source; known: steady" in res.stderr, res.stderr
    assert fleet("status").stdout.startswith("week 2026-11-23\n")
    later = fleet("run", "--week", "2026-11-16", "--source", "no_such_source")  # the week before: past, refused first
    assert later.returncode == 2 and "2026-11-16" in later.stderr and "--force" in later.stderr, later.stderr


def test_a_past_week_with_a_failed_source_is_not_scraped_now_without_force(fleet_env):
    """A past week whose raw rows are stored for some sources only: running it again would scrape the others
    from today's web and commit that as the old week. Refused without --force, naming them; the stored sources
    alone still run, from their artifacts."""
    d = fleet_env.tmp / "with_a_bug"
    d.mkdir()
    for name in ("steady.py", "raises.py"):
        (d / name).write_text((STEADY_DIR / name).read_text())
    counters = writable_dir(fleet_env.home)
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d), "FLEET_TEST_COUNTER_DIR": str(counters)}
    first = run_fleet(env, "run", "--week", WEEK, "--force")
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]  # partial: raises failed
    commits, scraped = log(fleet_env.remote), {p.name: p.read_text() for p in counters.iterdir()}

    refused = run_fleet(env, "run", "--week", WEEK)
    assert refused.returncode == 2
    assert "1 of its 2 source(s) have no complete stored rows for it and would be scraped now: raises" in refused.stderr
    assert "--force" in refused.stderr
    assert run_fleet(env, "run", "--week", WEEK, "--refresh").returncode == 2
    backfill = run_fleet(env, "backfill", "--from", WEEK, "--to", WEEK)
    assert backfill.returncode == 2 and "would be scraped now: raises" in backfill.stderr

    stored = run_fleet(env, "run", "--week", WEEK, "--source", "steady")
    assert stored.returncode == 0, stored.stdout[-2000:] + stored.stderr[-2000:]
    assert "reusing the stored artifact" in stored.stdout + stored.stderr
    assert {p.name: p.read_text() for p in counters.iterdir()} == scraped  # nothing was scraped
    assert log(fleet_env.remote) == commits


def test_bad_command_lines_are_one_clear_line(fleet_env):
    deep = run_fleet(fleet_env.env, "run", "--week", WEEK, "--source", "books", "--deep", "shops")
    assert deep.returncode == 2 and "shops not among --source books" in deep.stderr
    hostile = run_fleet(fleet_env.env, "history", "../../../../etc/passwd")
    assert hostile.returncode == 2 and "is not a source name" in hostile.stderr and "Traceback" not in hostile.stderr
    bad = run_fleet({**fleet_env.env, "FLEET_CRASH_RERUNS": "two"}, "status", "--week", WEEK)
    assert bad.returncode == 2 and "FLEET_CRASH_RERUNS" in bad.stderr and "Traceback" not in bad.stderr
    branch = run_fleet({**fleet_env.env, "FLEET_DATA_BRANCH": "a..b"}, "run", "--week", WEEK, "--force")
    assert branch.returncode == 2 and "not a usable branch name (FLEET_DATA_BRANCH): 'a..b'" in branch.stderr
    assert "scraping week" not in branch.stdout  # refused before anything ran
    since = run_fleet(fleet_env.env, "backfill", "--from", "2026-W99", "--to", WEEK)
    assert since.returncode == 2 and "--from" in since.stderr
    early = run_fleet(fleet_env.env, "run", "--week", "2025-12-01", "--force")  # FLEET_START_WEEK is 2026-01-05
    assert early.returncode == 2 and "before the first weekly partition, 2026-01-05" in early.stderr, early.stderr
    assert "scraping week" not in early.stdout


def test_fleet_ui_hands_its_home_to_the_dagster_it_starts(fleet_env, tmp_path, monkeypatch):
    """`fleet ui` run from any directory: the `dagster dev` it starts (in the checkout) and its code server must
    use the same FLEET_HOME as the Dagster instance it set up, not the checkout's `.fleet`."""
    from click.testing import CliRunner

    import dagster  # noqa: F401  before Popen is replaced below: its first import runs `file` through subprocess
    import fleet.cli as cli

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seen = {}

    class Dev:  # instead of starting `dagster dev`
        def __init__(self, cmd, cwd=None):
            seen.update(cmd=cmd, cwd=cwd, home=os.environ.get("FLEET_HOME"), dagster=os.environ.get("DAGSTER_HOME"))

        def wait(self):
            return 0

    real_popen = subprocess.Popen

    def popen(cmd, *args, **kwargs):  # other commands (the sandbox's probe of its user) run for real
        if "dagster" in cmd and "dev" in cmd:
            return Dev(cmd, *args, **kwargs)
        return real_popen(cmd, *args, **kwargs)

    monkeypatch.chdir(elsewhere)
    for var in ("FLEET_HOME", "DAGSTER_HOME"):  # set first, so that what the command sets is undone afterwards
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setattr(subprocess, "Popen", popen)
    handler = signal.getsignal(signal.SIGTERM)
    res = CliRunner().invoke(cli.main, ["ui", "--no-demo"])
    assert signal.getsignal(signal.SIGTERM) is handler  # the forwarding to `dagster dev` is undone
    assert res.exit_code == 0, res.output
    assert seen["home"] == str(elsewhere / ".fleet")
    assert seen["dagster"].startswith(str(elsewhere / ".fleet"))
    assert "dev" in seen["cmd"]


def test_fleet_ui_stopped_by_sigterm_stops_the_dagster_it_started(fleet_env):
    """`kill PID` of `fleet ui` alone (a service manager, a user): `dagster dev`, its webserver, daemon and code
    servers used to keep running, orphaned, holding the port."""
    ui, _ = start_ui(fleet_env, _steady_env(fleet_env), ticked=False)

    def group():
        return subprocess.run(["pgrep", "-g", str(ui.pid)], capture_output=True, text=True).stdout.split()

    try:
        assert len(group()) >= 3  # fleet ui, dagster dev, its webserver and daemon (and code servers)
        ui.send_signal(signal.SIGTERM)
        assert ui.wait(60) == 0
        deadline = time.monotonic() + 30
        while group():
            assert time.monotonic() < deadline, f"left running: {group()}"
            time.sleep(0.5)
    finally:
        if group():
            os.killpg(ui.pid, signal.SIGKILL)


def test_bad_settings_are_refused_naming_the_setting_before_anything_runs(fleet_env):
    """Each of these used to pass the checks and fail inside the week (every source failing as infra, with the
    cause in a traceback), be silently clamped or ignored, or end in a traceback; now each is one line naming the
    setting, exit 2, before a worker or a run exists."""
    env = _steady_env(fleet_env)
    file = fleet_env.tmp / "a-file"
    file.write_text("x")
    not_git = fleet_env.tmp / "not-git"
    not_git.mkdir()
    (not_git / "notes.txt").write_text("x")
    cases = {
        "FLEET_CHROMIUM": (str(fleet_env.tmp), "is not an executable file"),  # a folder passes os.access(X_OK)
        "FLEET_BROWSER_HOST_IDLE_S": ("abc", "must be a number, got 'abc'"),
        "FLEET_BROWSER_HOST_MAX_SOURCES": ("0", "must be at least 1, got 0"),
        "FLEET_BROWSER_STARTUP_S": ("0", "must be at least 1, got 0"),
        "FLEET_BROWSER_HOSTS": ("tepid", "must be 'warm' or 'fresh', got 'tepid'"),
        "FLEET_COMPUTE_LOGS": ("maybe", "must be 1 or 0, got 'maybe'"),
        "FLEET_MAX_PARALLEL": ("0", "must be at least 1, got 0"),
        "FLEET_RUN_MONITOR_S": ("0", "must be at least 1, got 0"),
        "FLEET_HOME": (str(file), f"{file} exists and is not a folder"),
        "FLEET_SCRAPERS_DIR": (str(fleet_env.tmp / "nope"), "names no folder at"),
        "FLEET_DATA_REMOTE": (str(not_git), "exists and is not a git repository"),
        "FLEET_ALERT_WEBHOOK": ("hooks.example/alerts", "must be an http:// or https:// URL"),
    }
    for name, (value, says) in cases.items():
        res = subprocess.run([sys.executable, "-m", "fleet.cli", "run", "--week", WEEK, "--force"],
                             env={**env, name: value}, cwd=fleet_env.tmp, capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, (name, res.stdout[-1000:], res.stderr[-2000:])
        assert name in res.stderr and says in res.stderr, (name, res.stderr[-2000:])
        assert "Traceback" not in res.stderr and "scraping week" not in res.stdout, (name, res.stderr[-2000:])
    assert not (fleet_env.home / "browser-hosts").exists() and not (fleet_env.home / "dagster").exists()

    demo = run_fleet({k: v for k, v in env.items() if k != "FLEET_SCRAPERS_DIR"}, "run", "--week", WEEK, "--force")
    assert demo.returncode == 2 and "the bundled demo scrapers need the demo sites" in demo.stderr, demo.stderr[-2000:]
    empty = run_fleet(env, "run", "--week", "")
    assert empty.returncode == 2 and "not a week: ''" in empty.stderr  # not the default week
    hostile = run_fleet(env, "run", "--week", WEEK, "--force", "--source", "../../x")
    assert hostile.returncode == 2 and "a source's name matches" in hostile.stderr and "Traceback" not in hostile.stderr
    # an unknown source is found once the definitions load, before any worker starts
    unknown = run_fleet(env, "run", "--week", WEEK, "--force", "--source", "nonexistent")
    assert unknown.returncode == 2 and "unknown source(s): nonexistent; known: steady, steady_two" in unknown.stderr
    assert not list((fleet_env.home / "browser-hosts").rglob("*.pid"))


def test_a_failed_steps_line_quotes_its_own_error_not_dagsters_wrapper():
    from dagster._utils.error import SerializableErrorInfo

    from fleet.defs.report import step_error

    cause = SerializableErrorInfo("fleet.errors.CommitError: data remote /x exists and is not a directory\n", [],
                                  "CommitError")
    wrapped = SerializableErrorInfo('dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while '
                                    'executing op "raw_commit":\n', [], "DagsterExecutionStepExecutionError", cause)
    assert step_error(wrapped) == cause.message.strip()
    assert step_error(cause) == cause.message.strip() and step_error(None) == "failed"


def test_the_demo_latency_the_ui_port_and_an_empty_branch_are_settings_like_the_others(fleet_env, monkeypatch):
    latency = run_fleet({**fleet_env.env, "FLEET_DEMO_LATENCY_MS": "abc"}, "demo", "--week", WEEK, "--force")
    assert latency.returncode == 2 and "FLEET_DEMO_LATENCY_MS must be a number, got 'abc'" in latency.stderr
    assert "Traceback" not in latency.stderr
    port = run_fleet(fleet_env.env, "ui", "--port", "70000")
    assert port.returncode == 2 and "70000 is not in the range 1<=x<=65535" in port.stderr
    from fleet.config import settings

    monkeypatch.setenv("FLEET_HOME", str(fleet_env.home))
    monkeypatch.setenv("FLEET_DATA_BRANCH", " ")
    assert settings().branch == "main"  # empty means the default, as for every other setting
