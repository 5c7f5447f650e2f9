"""Prints pip constraints that hold each of pyproject.toml's requirements (dependencies and extras) at the lowest
version its range allows: `name==X` for every `>=X` bound. Used by .ci/run for its lowest-versions leg."""
import re
import sys
import tomllib
from pathlib import Path

pyproject = Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml")
project = tomllib.loads(pyproject.read_text())["project"]
requirements = list(project.get("dependencies", []))
for extra in project.get("optional-dependencies", {}).values():
    requirements += extra
for requirement in requirements:
    spec = requirement.split(";")[0]  # an environment marker has no bound of its own
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    lower = re.search(r">=\s*([^,\s]+)", spec)
    if not name:
        sys.exit(f"lowest_constraints: cannot read the requirement {requirement!r} in {pyproject}")
    if not lower:
        # A range with no lower end cannot be tested at its lowest: say so rather than test something else.
        sys.exit(f"lowest_constraints: {name.group(1)} has no '>=' lower bound in {pyproject} ({requirement!r})")
    print(f"{name.group(1)}=={lower.group(1)}")
