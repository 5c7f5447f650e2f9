"""From alert to fix in one screen: a failed source's line in `fleet run`'s progress says why, the end of the run names
its evidence folder and the commands to run next, and `fleet debug` lists that evidence and opens the trace viewer
only where there is a display. Through the real parts: `fleet demo` with the broken_selector fault, real Chromium."""
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from fleet.policy.status import SourceStatus
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import WEEK, run_fleet

NAME = "broken_selector"


def _headless(env: dict) -> dict:
    return {k: v for k, v in env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}


def test_a_failed_runs_end_names_the_evidence_and_the_next_commands_and_debug_lists_it(fleet_env):
    env = _headless({**fleet_env.env, "FLEET_DEMO_FAULTS": "1"})
    res = run_fleet(env, "demo", "--week", WEEK, "--force", "--source", NAME)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out[-3000:]  # its only source failed: nothing committed
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    stored = keys.read_outcome(store, WEEK, NAME)
    assert (stored["status"], stored["category"]) == ("failed", "source"), stored

    # the progress line says why, in the stored error's first line
    assert re.search(rf"^{NAME} failed 0 rows \d+\.\ds: {re.escape(stored['error'].splitlines()[0])}$",
                     res.stdout, re.M), res.stdout

    # the end of the run: one line, after the table, with the folder (relative to where fleet ran), its files and
    # both commands, each file there
    [line] = [x for x in out.splitlines() if x.startswith("next: ")]
    assert res.stdout.index(line) > res.stdout.index("\nsource "), res.stdout
    folder = f"artifacts/{WEEK}/evidence/{NAME}/"
    assert line == (f"next: {NAME} failed (source): evidence {folder} (screenshot.png, page.html, error.txt, "
                    f"trace.zip); fleet debug {NAME} --week {WEEK}; fleet doctor {NAME}"), line
    for name in ("screenshot.png", "page.html", "error.txt", "trace.zip"):
        assert (fleet_env.home / folder / name).stat().st_size > 0, name

    # `fleet debug` lists the files, which exist, and with no display only prints the viewer's command
    debug = run_fleet(env, "debug", NAME, "--week", WEEK)
    assert debug.returncode == 0, debug.stdout + debug.stderr
    listed = dict(re.findall(r"^  (screenshot|html|error|trace) +(\S+)$", debug.stdout, re.M))
    assert set(listed) == {"screenshot", "html", "error", "trace"}, debug.stdout
    assert all(Path(p).is_file() and Path(p).parent == fleet_env.home / folder for p in listed.values()), listed
    assert Path(listed["screenshot"]).read_bytes().startswith(b"\x89PNG")
    assert Path(listed["error"]).read_text().startswith(stored["error"])
    [command] = [x for x in debug.stdout.splitlines() if "show-trace" in x]
    assert command.endswith(f"show-trace {listed['trace']}"), debug.stdout
    assert "no display here" in debug.stdout and "opening it" not in debug.stdout, debug.stdout

    # with a display, it opens the viewer itself (served, for the desktop's browser), until it is ended
    shown = subprocess.Popen([sys.executable, "-m", "fleet.cli", "debug", NAME, "--week", WEEK],
                             env={**env, "DISPLAY": ":fleet-test"}, cwd=env["FLEET_HOME"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        seen = ""
        while not (url := re.search(r"Listening on (http://127\.0\.0\.1:\d+)", seen)):
            said = shown.stdout.readline()
            assert said, f"fleet debug ended without opening the viewer: {seen}"
            seen += said
        assert "opening it" in seen and f"show-trace --host 127.0.0.1 --port 0 {listed['trace']}" in seen, seen
        with urllib.request.urlopen(url.group(1) + "/", timeout=30) as page:
            assert "Playwright Trace Viewer" in page.read().decode()
            query = urllib.request.unquote(page.url.split("trace=", 1)[1])
            served = page.url.split("/trace/index.html")[0] + "/trace/" + query
        with urllib.request.urlopen(served, timeout=30) as trace:  # the viewer serves this attempt's trace
            assert trace.read() == Path(listed["trace"]).read_bytes()
    finally:
        os.killpg(shown.pid, signal.SIGTERM)
        shown.wait(30)

    # a source with nothing stored for the week: exit 1, one line saying where to look
    none = run_fleet(env, "debug", "books", "--week", WEEK)
    assert none.returncode == 1 and "nothing stored for week" in none.stdout, none.stdout + none.stderr


def _outcome(store, source: str, attempt: str, **fields) -> None:
    keys.write_outcome(store, WEEK, {"source": source, "week": WEEK, "attempt": attempt, **fields})


def test_the_next_block_says_what_each_kind_of_failure_has_and_skips_the_rest(tmp_path):
    """Unit: an S3 store's evidence is named by its s3:// prefix; a failure with none names its URL; `fleet debug`
    only with a trace, `fleet doctor` only for the source's own failure; succeeded, refused and not-run are left out."""
    from fleet.defs.report import print_next

    store = LocalArtifactStore(tmp_path / "artifacts")
    prefix = f"s3://bucket/fleet/{WEEK}/evidence/walled/20261117T000000000000-aaaaaa/"
    _outcome(store, "walled", "20261117T000000000000-aaaaaa", status="failed", category="blocked",
             evidence={"screenshot": prefix + "screenshot.png", "html": prefix + "page.html",
                       "error": prefix + "error.txt", "page_url": "https://example.com/captcha"})
    _outcome(store, "crashed", "20261117T000000000000-bbbbbb", status="failed", category="infra",
             url="https://example.com/list")
    _outcome(store, "slow", "20261117T000000000000-cccccc", status="timeout", category="source")
    rows = [SourceStatus("walled", "failed", "blocked", 0, 1.0, 1, "403"),
            SourceStatus("crashed", "failed", "infra", 0, 1.0, 1, "died"),
            SourceStatus("slow", "timeout", "source", 0, 30.0, 1, "timed out"),
            SourceStatus("fine", "ok", None, 5, 1.0, 1, None),
            SourceStatus("old", "refused", "refused", 0, 0.0, 0, "past week"),
            SourceStatus("later", "not run", None, 0, 0.0, 0, None)]
    lines = []
    print_next(store, WEEK, rows, lines.append)
    assert lines == [
        f"next: walled failed (blocked): evidence {prefix} (screenshot.png, page.html, error.txt)",
        "next: crashed failed (infra): no evidence kept; it failed at https://example.com/list",
        "next: slow timeout (source): no evidence kept; fleet doctor slow"], lines
