"""Refuse early and cleanly (issue 51, part 5): an unknown FLEET_* setting, a data remote that is not there or does
not answer, and a second run of a week are each refused in one line, exit 2, before anything is scraped."""
import re
import subprocess
import sys

import pytest

from fleet import config
from fleet.errors import FleetError
from fleet_tests.conftest import ROOT, WEEK, run_fleet

NAME = re.compile(r"\bFLEET_[A-Z0-9_]*[A-Z0-9]\b")
# FLEET_ words in the tests and benchmarks that are no variable: a file in a clone's .git, a Python constant
# (and this file's deliberate typos)
NOT_VARIABLES = {"FLEET_COMMIT_MSG", "FLEET_DIR", "FLEET_MAX_PARALEL", "FLEET_ZORK"}


def test_an_unknown_setting_is_refused_naming_the_closest_known_one(monkeypatch):
    monkeypatch.setenv("FLEET_MAX_PARALEL", "3")
    with pytest.raises(FleetError, match=r"^unknown setting FLEET_MAX_PARALEL \(did you mean FLEET_MAX_PARALLEL\?\)$"):
        config.settings()
    monkeypatch.delenv("FLEET_MAX_PARALEL")
    monkeypatch.setenv("FLEET_ZORK", "1")
    with pytest.raises(FleetError, match=r"^unknown setting FLEET_ZORK: no setting of fleet's is near it; unset it"):
        config.check_names()
    monkeypatch.delenv("FLEET_ZORK")
    # the test suite's own variables, and an old name (refused with its new name instead)
    monkeypatch.setenv("FLEET_TEST_COUNTER_DIR", "/tmp")
    monkeypatch.setenv("FLEET_WORKERS", "warm")
    config.check_names()
    with pytest.raises(FleetError, match="FLEET_WORKERS is now called FLEET_BROWSER_HOSTS"):
        config.settings()


def test_every_name_fleet_its_tests_and_benchmarks_set_is_known():
    """What fleet sets for its children (FLEET_GIT_TOKEN_FILE, FLEET_DEMO_URL, FLEET_WORKER_NAME,
    FLEET_CHROMIUM_SANDBOX ...) and what the tests and benchmarks set must never be refused."""
    found = {}
    for folder in ("fleet", "fleet_tests", "bench", "scrapers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in NAME.findall(path.read_text()):
                found.setdefault(name, str(path.relative_to(ROOT)))
    assert {"FLEET_GIT_TOKEN_FILE", "FLEET_DEMO_URL", "FLEET_WORKER_NAME", "FLEET_CHROMIUM_SANDBOX",
            "FLEET_TEST_COUNTER_DIR", "FLEET_BENCH_CRASH"} <= set(found), found  # the scan sees them
    unknown = {n: where for n, where in found.items() if n not in config.known_settings()
               and not n.startswith(config.RESERVED_PREFIXES) and n not in NOT_VARIABLES}
    assert not unknown, unknown


def test_fleet_refuses_an_unknown_setting_in_one_line_before_anything(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("FLEET_")}
    env.update(FLEET_HOME=str(tmp_path), FLEET_MAX_PARALEL="3", PYTHONPATH=str(ROOT))
    res = run_fleet(env, "run", "--week", WEEK, "--force", timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    assert res.stderr == "fleet: error: unknown setting FLEET_MAX_PARALEL (did you mean FLEET_MAX_PARALLEL?)\n"
    assert list(tmp_path.iterdir()) == []  # nothing made under FLEET_HOME
