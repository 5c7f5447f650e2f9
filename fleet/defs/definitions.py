"""Dagster definitions for fleet: loaded by ``workspace.yaml``, the CLI and the tests."""
from __future__ import annotations

import atexit
import gc

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor, multiprocess_executor

from fleet.config import Settings, freshness_deadline, scraper_dirs, settings
from fleet.defs.assets import PUBLISH_GROUP, RAW_GROUP, partitions, publish_assets, raw_assets
from fleet.defs.automation import build_automation
from fleet.defs.canary import build_canary
from fleet.defs.executor import fleet_executor
from fleet.defs.freshness import freshness_checks
from fleet.defs.resources import from_settings
from fleet.scraping.discovery import discover

# What each step process of a multiprocess run is forked from: a server that has imported these once, so a step
# starts with Dagster, Playwright, polars and fleet's definitions already in memory (Dagster's documented
# ``start_method: forkserver: preload_modules``).
PRELOAD = ("fleet.defs.definitions", "fleet.defs.preloaded")  # the last freezes what the first imported


def build_defs(s: Settings | None = None) -> Definitions:
    s = s or settings()
    sources = discover(scraper_dirs())
    parts = partitions(s.start_week)
    raw = raw_assets(sources, parts, s.crash_reruns)
    fresh, fresh_job, fresh_schedule = freshness_checks([a.key for a in raw], freshness_deadline(), s.start_week)
    publish = publish_assets(sources, parts)
    # the freshness checks judge the due week on their own schedule, never inside a week's scrape
    scrape_job = define_asset_job("scrape_week", selection=AssetSelection.groups(RAW_GROUP) - AssetSelection.checks(fresh),
                                  description="Scrape every source for one week (raw/<source> assets).")
    # The publish stage is four steps in a chain on stored artifacts: they run one after another in the run's
    # process. A crash loses nothing, since each step's result is persisted and the raw commit lands before
    # post-processing starts.
    publish_job = define_asset_job("publish_week", selection=AssetSelection.groups(PUBLISH_GROUP),
                                   description="Consolidate, commit raw, post-process, commit processed.",
                                   executor_def=fleet_executor(in_process_executor))
    resources = from_settings(s)
    sensors, schedules = build_automation(scrape_job, publish_job, s.crash_reruns, resources["artifacts"])
    canary_job, canary_schedule = build_canary(sources)
    return Definitions(assets=[*raw, *publish], asset_checks=[fresh], jobs=[scrape_job, publish_job, canary_job, fresh_job],
                       sensors=sensors, schedules=[*schedules, canary_schedule, fresh_schedule],
                       executor=scrape_executor(s), resources=resources)


def scrape_executor(s: Settings):
    """The executor of the scrape job, chosen by FLEET_EXECUTOR. ``multiprocess`` (the default): a process per
    source step on this machine, as many at once as the scrapers pool admits (fleet/defs/instance.py checks its
    limit is ``pool_limit(FLEET_MAX_PARALLEL)``, above the cap: fleet's own slots hold the cap around each scrape,
    fleet/engine/slot.py). ``celery``: each step is a task for the `fleet worker`s on FLEET_CELERY_BROKER, the
    same pool and slots (in the broker's Redis) across all hosts (fleet/defs/celery.py)."""
    from fleet.defs.instance import pool_limit

    if s.executor == "celery":
        from dagster_celery import celery_executor

        from fleet.defs.celery import executor_config, watching

        return fleet_executor(celery_executor.configured(executor_config(s)),
                              watch=lambda instance, run: watching(s, instance, run))
    return fleet_executor(multiprocess_executor.configured({
        "max_concurrent": pool_limit(s.max_parallel),
        "start_method": {"forkserver": {"preload_modules": list(PRELOAD)}},
    }))


defs = build_defs()
# Every process that loads the definitions (Dagster's code server and run workers, `dg`, fleet's commands) keeps
# them until it exits; the interpreter's collections of them at exit (Dagster, sqlalchemy, polars, an asset per
# source) took 0.5-0.7 s of a core, as fleet/cli.py found for its commands. Frozen at exit, they are skipped.
atexit.register(gc.freeze)


def scrape_week_job():
    return defs.resolve_job_def("scrape_week")


def publish_week_job():
    return defs.resolve_job_def("publish_week")
