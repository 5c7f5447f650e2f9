"""One clock (issue 43, item 6): "today", "the last complete week" and "past" are judged in UTC, so a host west of
UTC late on a Sunday runs the week the past-week guard accepts. The time is set for a child process by libfaketime
(Debian's faketime, which .ci/setup installs): nothing in fleet is patched."""
import json
import shutil
import subprocess
import sys

import pytest

from fleet_tests.conftest import ROOT

# Sunday 2026-11-22 23:30 in Los Angeles is Monday 2026-11-23 07:30 UTC: the week of 2026-11-16 is complete in UTC,
# and still in progress on the local calendar.
LOCAL_TIME, TZ = "2026-11-22 23:30:00", "America/Los_Angeles"
REPORT = """
import datetime as dt, json
from fleet.policy.pastweek import is_past, oldest_week
from fleet.weeks import last_complete_week, utc_now
now = utc_now()
report = {"local_today": dt.date.today().isoformat(), "utc_now": now.isoformat(),
          "clock": last_complete_week().isoformat(), "guard": oldest_week(now).isoformat()}
"""


def at_sunday_night_west_of_utc(tmp_path, code: str) -> dict:
    if shutil.which("faketime") is None:
        pytest.fail("faketime is not installed (Debian's faketime package; .ci/setup installs it)")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TZ": TZ, "FLEET_HOME": str(tmp_path / "home"),
           "FLEET_START_WEEK": "2026-01-05"}
    res = subprocess.run(["faketime", "-f", f"@{LOCAL_TIME}", sys.executable, "-c", REPORT + code + "\n"
                          "print(json.dumps(report))"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout.splitlines()[-1])
    # The fake time took: local Sunday, UTC Monday morning. Otherwise the rest would prove nothing.
    assert report["local_today"] == "2026-11-22" and report["utc_now"].startswith("2026-11-23T07:3"), report
    return report


def test_the_clock_and_the_past_week_guard_agree_west_of_utc(tmp_path):
    report = at_sunday_night_west_of_utc(tmp_path, "")
    assert report["clock"] == report["guard"] == "2026-11-16", report


# The driver's side, end to end (`fleet run` with no --week under the same fake clock, scraping and committing):
# fleet_tests/test_discipline.py::test_west_of_utc_late_on_sunday_the_default_week_is_the_one_the_past_week_guard_accepts
