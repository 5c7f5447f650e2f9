"""`fleet run`'s live progress: one plain line per source as it finishes (in a pipe), Dagster's DEBUG lines only with -v,
and a final table as wide as a 63-character name."""
import re
import shlex
import subprocess
import sys

from fleet_tests.conftest import run_fleet


def test_demo_run_in_a_pipe_prints_a_line_per_source_as_it_finishes(fleet_env):
    res = run_fleet(fleet_env.env, "demo", "--week", "2026-W47", "--force", "--source", "books", "--source", "jobs")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    lines = {m.group(1): m for m in re.finditer(r"^(books|jobs) (ok) (\d+) rows (\d+\.\d)s$", out, re.M)}
    assert set(lines) == {"books", "jobs"}, out
    assert lines["books"].group(3) == "24" and lines["jobs"].group(3) == "35"
    # each completion line comes before the final table
    table = out.index("\nsource ")
    assert all(m.start() < table for m in lines.values())
    # Dagster's step events (DEBUG) stay out of the console
    assert "STEP_START" not in res.stderr and "STEP_SUCCESS" not in res.stderr

    verbose = run_fleet(fleet_env.env, "demo", "--week", "2026-W47", "--force", "--source", "books", "-v")
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert "STEP_SUCCESS" in verbose.stderr
    # a rerun reuses the stored rows: it still reports the source, with its stored count
    assert re.search(r"^books ok 24 rows ", verbose.stdout, re.M), verbose.stdout


def test_final_table_fits_63_character_names():
    from fleet.defs.report import print_status
    from fleet.policy.status import SourceStatus

    long = "s" * 63
    lines = []
    print_status([SourceStatus(long, "ok", None, 5, 1.0, 1, None), SourceStatus("books", "failed", "source", 0, 2.0, 1, "boom")],
                 lines.append)
    header, first, second = lines
    assert first.startswith(long + " ok")
    # columns line up: status starts at the same offset on every line
    assert header.index("status") == first.index(" ok") + 1 == second.index("failed")


def test_on_a_terminal_a_live_view_counts_sources_done_running_and_failed(fleet_env):
    """Under a terminal (util-linux `script` gives the command one), the view that rich redraws in place."""
    out = fleet_env.tmp / "tty.txt"
    cmd = shlex.join([sys.executable, "-m", "fleet.cli", "demo", "--week", "2026-W47", "--force",
                      "--source", "books", "--source", "jobs"])
    res = subprocess.run(["script", "-qec", cmd, str(out)], env=fleet_env.env, cwd=fleet_env.home,
                         capture_output=True, text=True, timeout=420)
    text = out.read_text(errors="replace")
    assert res.returncode == 0, text[-3000:]
    assert re.search(r"week 2026-11-16: 0/2 done, [12] running, 0 failed, 0:\d\d elapsed", text), text[-3000:]
    assert "week 2026-11-16: 2/2 done, 0 running, 0 failed" in text, text[-3000:]
    assert re.search(r"books ok 24 rows \d+\.\ds", text) and re.search(r"jobs ok 35 rows \d+\.\ds", text)
