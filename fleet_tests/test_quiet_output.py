"""`fleet run` in a pipe (a log file, cron, CI) says what fleet has to say: a line per source as it ends, then the
table. Dagster's own lines (its DEBUG step events, its INFO and WARNING lines, each carrying the run id that fleet's
messages already carry) appear only with -v."""
import re

from fleet_tests.conftest import ROOT, WEEK, run_fleet, writable_dir

STEADY_DIR = ROOT / "fleet_tests" / "scrapers_crash"

DAGSTER_LINE = re.compile(r" - dagster - (DEBUG|INFO|WARNING|ERROR|CRITICAL) - ")


def _env(fleet_env):
    d = fleet_env.tmp / "steady_and_raises"
    d.mkdir(exist_ok=True)
    for name in ("steady.py", "raises.py"):
        (d / name).write_text((STEADY_DIR / name).read_text())
    counters = writable_dir(fleet_env.home)
    return {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d), "FLEET_TEST_COUNTER_DIR": str(counters)}


def _lines(res) -> list[str]:
    return (res.stdout + res.stderr).splitlines()


def test_fleet_run_in_a_pipe_prints_its_own_lines_and_dagsters_only_with_v(fleet_env):
    env = _env(fleet_env)
    quiet = run_fleet(env, "run", "--week", WEEK, "--force")
    assert quiet.returncode == 1, quiet.stdout[-3000:] + quiet.stderr[-3000:]  # raises failed: partial
    lines = _lines(quiet)
    # fleet's lines: one per source as it ends, the table, the failed source's error in it
    assert re.search(r"^steady ok 3 rows \d+\.\ds$", quiet.stdout, re.M), quiet.stdout
    # a failed source's line says why: its stored error's first line
    assert re.search(r"^raises failed 0 rows \d+\.\ds: source raises: RuntimeError: the price column moved",
                     quiet.stdout, re.M), quiet.stdout
    assert re.search(r"^raises +failed +source .*the price column moved", quiet.stdout, re.M), quiet.stdout
    assert quiet.stdout.index("\nsource ") > quiet.stdout.index("steady ok 3 rows")
    # none of Dagster's lines (its DEBUG step events, the step's failure, the forced past week), and no line twice
    assert not [line for line in lines if "STEP_" in line or DAGSTER_LINE.search(line)], lines
    assert not [line for line in lines if "[run " in line], lines
    assert len(lines) == len(set(lines)), lines

    verbose = run_fleet(env, "run", "--week", WEEK, "--force", "-v")
    assert verbose.returncode == 1, verbose.stdout[-3000:] + verbose.stderr[-3000:]
    assert "STEP_SUCCESS" in verbose.stderr and "STEP_FAILURE" in verbose.stderr
    assert any(DAGSTER_LINE.search(line) for line in _lines(verbose))
    # a rerun reuses the stored rows of the source that succeeded, and says so in its line
    assert re.search(r"^steady ok 3 rows \d+\.\ds, reusing the stored artifact$", verbose.stdout, re.M), verbose.stdout

