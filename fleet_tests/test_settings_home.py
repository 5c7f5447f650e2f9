"""One home for settings (issue 43, item 3): only fleet/config.py reads the environment, every FLEET_* variable it
reads is in README's settings table, every third-party library fleet imports is declared, and a missing optional
one is refused in one line naming the extra that brings it."""
import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from fleet_tests.conftest import ROOT

FLEET = ROOT / "fleet"
CONFIG = FLEET / "config.py"
ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
# Import name -> distribution, where they differ; the rest are their own distribution (``_`` read as ``-``).
DISTRIBUTION = {"git": "gitpython", "yaml": "pyyaml"}


def environment_uses(path: Path) -> list[str]:
    """``file:line what`` for every read or write of the process environment in ``path``."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        what = None
        if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES and isinstance(node.value, ast.Name) \
                and node.value.id == "os":
            what = f"os.{node.attr}"
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            what = next((f"from os import {a.name}" for a in node.names if a.name in ENV_NAMES), None)
        elif isinstance(node, ast.Name) and node.id in ENV_NAMES:
            what = node.id
        if what:
            hits.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{node.lineno} {what}")
    return hits


def test_environment_scan_sees_every_form(tmp_path):
    """The scan below finds each way a module could reach the environment, so its empty answer means something."""
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom os import environ, getenv\n"
                     "a = os.environ['X']\nb = os.getenv('X')\nos.putenv('X', '1')\nc = environ.get('X')\n")
    found = environment_uses(probe)
    assert [h.split(" ", 1)[1] for h in found] == \
        ["from os import environ", "os.environ", "os.getenv", "os.putenv", "environ"], found


def test_only_config_reads_the_environment():
    offending = [hit for path in sorted(FLEET.rglob("*.py")) if path != CONFIG
                 for hit in sorted(set(environment_uses(path)), key=lambda h: int(h.split(" ")[0].rsplit(":", 1)[1]))]
    assert not offending, ("the environment is read or written outside fleet/config.py (use a getter of "
                           "fleet.config, config.process_env for a child's environment, config.export to set "
                           "one):\n  " + "\n  ".join(offending))


def readme_settings() -> set[str]:
    """The variables of README's settings table: the first column of its rows under "## Configuration"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_every_setting_config_reads_is_in_the_readme_table():
    names = set(re.findall(r"\bFLEET_[A-Z0-9_]*[A-Z0-9]\b", CONFIG.read_text()))
    assert {"FLEET_HOME", "FLEET_ALERT_SLACK", "FLEET_SLACK_TOKEN", "FLEET_WORKER_NAME"} <= names, names
    table = readme_settings()
    assert "FLEET_HOME" in table and len(table) > 20, table  # the table was found
    missing = sorted(names - table)
    assert not missing, f"read in fleet/config.py but not in README's settings table: {', '.join(missing)}"


def test_every_setting_fleet_names_is_in_the_readme_table():
    """Any FLEET_* name in fleet's strings (a message, an environment given to a child, a docstring) is a setting
    the table explains; FLEET_COMMIT_MSG is a file in the clone's .git, not a variable."""
    named = {}
    for path in sorted(FLEET.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in re.findall(r"\bFLEET_[A-Z0-9_]*[A-Z0-9]\b", node.value):
                    named.setdefault(name, f"{path.relative_to(ROOT)}:{node.lineno}")
    assert "FLEET_CHROMIUM_SANDBOX" in named, named  # the scan sees names outside config.py
    missing = {n: where for n, where in named.items() if n not in readme_settings() and n != "FLEET_COMMIT_MSG"}
    assert not missing, f"named in fleet/ but not in README's settings table: {missing}"


def third_party_imports() -> dict[str, str]:
    """Top-level module -> the first ``file:line`` importing it, for every module fleet/ imports that is neither the
    standard library nor fleet itself."""
    found: dict[str, str] = {}
    for path in sorted(FLEET.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                if top not in sys.stdlib_module_names and top != "fleet":
                    found.setdefault(top, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def declared() -> dict[str, str]:
    """Declared distribution (normalised) -> where: ``dependencies`` or the extra's name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for where, reqs in [("dependencies", project["dependencies"]), *project["optional-dependencies"].items()]:
        for req in reqs:
            name = re.match(r"[A-Za-z0-9._-]+", req).group(0)
            out.setdefault(re.sub(r"[-_.]+", "-", name).lower(), where)
    return out


def test_every_imported_library_is_declared():
    imports, known = third_party_imports(), declared()
    assert {"dagster", "playwright", "dagster_slack", "s3fs"} <= set(imports), imports  # the scan sees them
    undeclared = [f"{mod} (distribution {DISTRIBUTION.get(mod, mod.replace('_', '-'))}, imported at {where})"
                  for mod, where in sorted(imports.items())
                  if DISTRIBUTION.get(mod, mod.replace("_", "-")).lower() not in known]
    assert not undeclared, "imported by fleet/ but in neither pyproject's dependencies nor an extra: " + \
        "; ".join(undeclared)
    assert known["dagster-slack"] == "slack", known


def refusal(env: dict, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_slack_without_its_extra_is_refused_in_one_line(tmp_path):
    """FLEET_ALERT_SLACK needs dagster-slack: settings() refuses it, naming the extra, whether or not this machine
    has it (the child hides it as an uninstalled module)."""
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "FLEET_HOME": str(tmp_path / "home")}
    code = ("import sys\nsys.modules['dagster_slack'] = None\nfrom fleet.config import settings\n"
            "from fleet.errors import FleetError\ntry:\n    settings()\nexcept FleetError as exc:\n    print(exc)\n"
            "else:\n    print('accepted')\n")
    res = refusal({**base, "FLEET_ALERT_SLACK": "#scrapers", "FLEET_SLACK_TOKEN": "xoxb-1"}, code)
    assert res.stdout == ("FLEET_ALERT_SLACK needs dagster-slack, which is not installed: "
                          "pip install 'fleet[slack]'\n"), res.stdout + res.stderr
    assert refusal(base, code).stdout == "accepted\n"  # no Slack channel: nothing needed


def test_slack_without_a_token_is_refused(tmp_path):
    """With dagster-slack importable (a package of that name on the child's path), the token is what is missing."""
    site = tmp_path / "site" / "dagster_slack"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{site.parent}", "FLEET_HOME": str(tmp_path / "home"),
           "FLEET_ALERT_SLACK": "#scrapers"}
    code = ("from fleet.config import settings\nfrom fleet.errors import FleetError\ntry:\n    settings()\n"
            "except FleetError as exc:\n    print(exc)\nelse:\n    print('accepted')\n")
    res = refusal(env, code)
    assert res.stdout.startswith("FLEET_ALERT_SLACK needs FLEET_SLACK_TOKEN"), res.stdout + res.stderr
    assert refusal({**env, "FLEET_SLACK_TOKEN": "xoxb-1"}, code).stdout == "accepted\n"


def test_process_env_copies_and_overrides(monkeypatch):
    from fleet import config

    monkeypatch.setenv("FLEET_TEST_PROBE_A", "a")
    monkeypatch.setenv("FLEET_TEST_PROBE_B", "b")
    env = config.process_env(FLEET_TEST_PROBE_B=None, FLEET_TEST_PROBE_C=3)
    assert env["FLEET_TEST_PROBE_A"] == "a" and "FLEET_TEST_PROBE_B" not in env and env["FLEET_TEST_PROBE_C"] == "3"
    env["FLEET_TEST_PROBE_A"] = "changed"
    assert config.process_env()["FLEET_TEST_PROBE_A"] == "a"  # a copy: the child's changes are its own


def test_export_and_replace_env_change_what_config_and_children_see(monkeypatch):
    from fleet import config

    monkeypatch.setenv("FLEET_DEMO_URL", "http://127.0.0.1:1")
    monkeypatch.delenv("FLEET_TEST_PROBE_D", raising=False)
    saved = config.process_env()
    try:
        config.export(FLEET_DEMO_URL="http://127.0.0.1:2", FLEET_TEST_PROBE_D="d")
        assert config.demo_url() == "http://127.0.0.1:2" and config.process_env()["FLEET_TEST_PROBE_D"] == "d"
        config.export(overwrite=False, FLEET_DEMO_URL="http://127.0.0.1:3")
        assert config.demo_url() == "http://127.0.0.1:2"  # already set: kept
        config.export(FLEET_DEMO_URL=None)
        assert config.demo_url() == ""
        config.replace_env({"FLEET_WORKER_NAME": "w@h"})
        assert config.process_env() == {"FLEET_WORKER_NAME": "w@h"} and config.worker_name() == "w@h"
    finally:
        config.replace_env(saved)
