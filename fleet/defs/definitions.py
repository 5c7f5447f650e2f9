"""Dagster definitions for fleet: its one fleet, the component in fleet/defs/fleets/fleet/defs.yaml (all its
settings from the environment), loaded by ``workspace.yaml``, ``dg``, the CLI and the tests."""
from __future__ import annotations

from dagster import load_from_defs_folder

from fleet.config import PROJECT_ROOT
# imported from here by the CLI, the tests and the benchmarks; built in fleet/defs/component.py
from fleet.defs.component import PRELOAD, build_defs, scrape_executor  # noqa: F401

defs = load_from_defs_folder(path_within_project=PROJECT_ROOT)


def scrape_week_job():
    return defs.resolve_job_def("scrape_week")


def publish_week_job():
    return defs.resolve_job_def("publish_week")
