"""Dagster definitions for fleet: its one fleet, the component in fleet/defs/fleets/fleet/defs.yaml (all its
settings from the environment), loaded by ``workspace.yaml``, ``dg``, the CLI and the tests."""
from __future__ import annotations

import atexit
import gc
import warnings

from dagster import BetaWarning, load_from_defs_folder

from fleet.config import PROJECT_ROOT
from fleet.errors import FleetError
# imported from here by the CLI, the tests and the benchmarks; built in fleet/defs/component.py
from fleet.defs.component import PRELOAD, build_defs, scrape_executor  # noqa: F401

# Dagster 1.13 warns, as it resolves the definitions, that a parameter its own code passes for the freshness
# multi-asset check (``AssetsDefinition(execution_type=...)``) is beta: a line on every command's stderr about
# nothing fleet chose. (Set here: the component's own module is imported inside Dagster's warnings context.)
warnings.filterwarnings("ignore", message="Parameter `execution_type` of function `AssetsDefinition.__init__`",
                        category=BetaWarning)


def _load():
    """fleet's own fleet through its component; a bad setting stays fleet's one line (FleetError), not Dagster's
    tree of the component that failed to load around it."""
    try:
        return load_from_defs_folder(path_within_project=PROJECT_ROOT)
    except Exception as exc:
        cause = exc
        while cause is not None and not isinstance(cause, FleetError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from None


if (PROJECT_ROOT / "pyproject.toml").is_file():  # a checkout (or an editable install): the dg project
    defs = _load()
else:
    # an installed fleet has no project around it for dg to find; its own fleet is the same component with an
    # empty defs.yaml, which is what build_defs makes from the environment's settings
    defs = build_defs()
# Every process that loads the definitions (Dagster's code server and run workers, `dg`, fleet's commands) keeps
# them until it exits; the interpreter's collections of them at exit (Dagster, sqlalchemy, polars, an asset per
# source) took 0.5-0.7 s of a core, as fleet/cli.py found for its commands. Frozen at exit, they are skipped.
atexit.register(gc.freeze)


def scrape_week_job():
    return defs.resolve_job_def("scrape_week")


def publish_week_job():
    return defs.resolve_job_def("publish_week")
