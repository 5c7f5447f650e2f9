"""Dagster definitions for fleet: loaded by ``workspace.yaml``, the CLI and the tests."""
from __future__ import annotations

import gc

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor, multiprocess_executor

from fleet.config import scraper_dirs, settings
from fleet.defs import executor as executor_patch
from fleet.defs import runconfig, stephosts
from fleet.defs.assets import PUBLISH_GROUP, RAW_GROUP, crash_retry_policy, partitions, publish_assets, raw_assets
from fleet.defs.automation import build_automation
from fleet.scraping.discovery import discover


# What each step process of a multiprocess run forks from (fleet/defs/warm.py).
FORKSERVER_PRELOAD = ("fleet.defs.warm",)


def build_defs() -> Definitions:
    executor_patch.install()  # the run process reads its steps' events without idle waits (fleet/defs/executor.py)
    runconfig.install()  # a process resolves a job's run config once (fleet/defs/runconfig.py)
    stephosts.install()  # a step process that ends cleanly runs the next step (fleet/defs/stephosts.py)
    s = settings()
    sources = discover(scraper_dirs())
    parts = partitions()
    retry = crash_retry_policy()
    raw = raw_assets(sources, parts, retry)
    publish = publish_assets(sources, parts)
    # Both jobs are weekly because their assets are: Dagster infers a job's partitions from them (and ignored
    # the partitions_def these used to name, deprecated since, even for a scrape job with no source to select).
    scrape_job = define_asset_job("scrape_week", selection=AssetSelection.groups(RAW_GROUP),
                                  description="Scrape every source for one week (raw/<source> assets).")
    # The publish stage is four steps in a chain, all fleet's own code on stored artifacts: they run one after
    # another in the run's process. A process per step would only add a forkserver and four step start-ups
    # to every week; a crash loses nothing, since each step's result is persisted and the raw commit lands
    # before post-processing starts.
    publish_job = define_asset_job("publish_week", selection=AssetSelection.groups(PUBLISH_GROUP),
                                   description="Consolidate, commit raw, post-process, commit processed.",
                                   executor_def=executor_patch.recording_worker(in_process_executor))
    sensors, schedules = build_automation(scrape_job, publish_job)
    executor = executor_patch.recording_worker(multiprocess_executor.configured({
        # as many as the pool admits, so no step waits on a pool claim; max_parallel of them scrape at once
        "max_concurrent": s.steps_in_flight,
        # forkserver: each step forks from a process that has already imported and resolved fleet's definitions
        # and done Dagster's one-off storage work (fleet/defs/warm.py), instead of starting cold
        "start_method": {"forkserver": {"preload_modules": list(FORKSERVER_PRELOAD)}},
    }))  # the run worker records itself on the run, for run monitoring (fleet/defs/launcher.py)
    return Definitions(assets=[*raw, *publish], jobs=[scrape_job, publish_job], sensors=sensors,
                       schedules=schedules, executor=executor)


def _load() -> Definitions:
    """``build_defs()`` for this module, with what it builds kept out of the garbage collector's reach.

    The definitions live as long as the process, and so do the modules imported before them. Each source adds
    about 75 tracked objects, and every full collection scans all of them. With 1,000 sources
    (``bench/``'s ``many_sources``) the collections during the load took about 0.3 s, and the interpreter's
    exit about 0.75 s more, collecting that whole graph. ``gc.freeze()`` moves what exists into the
    permanent generation, before the build and again after it, so a collection scans only what the process
    allocates later. A frozen object is still freed when its last reference goes; only a reference cycle
    of frozen objects is left for the operating system to reclaim at exit. Loading opens no file or
    connection that such a cycle could leave unclosed. Step processes fork from a server that froze its heap
    in the same way (``fleet/defs/warm.py``)."""
    gc.freeze()
    try:
        return build_defs()
    finally:
        gc.freeze()


defs = _load()


def start_forkserver() -> None:
    """Start this process's forkserver now, warm, before the caller creates its run.

    ``fleet run`` executes the scrape run in its own process, whose executor would start the forkserver only
    when it launches the first step, and wait for the preload then (3-4 s here). The executor finds the server
    running with the same preload list and forks its steps from it. The server is forked from this process once
    it has imported and warmed what the preload would (fleet/defs/forkserver.py); a process with threads gets a
    new interpreter that preloads instead."""
    import multiprocessing
    from multiprocessing import forkserver

    from fleet.defs.forkserver import fork_server

    multiprocessing.get_context("forkserver").set_forkserver_preload(list(FORKSERVER_PRELOAD))
    try:
        if fork_server() is not None:
            return
    except Exception as exc:  # the executor's own start still works, only later and colder
        import logging
        logging.getLogger(__name__).warning("fleet: forkserver not forked (%s: %s)", type(exc).__name__, exc)
    forkserver.ensure_running()


def scrape_week_job():
    return defs.resolve_job_def("scrape_week")


def publish_week_job():
    return defs.resolve_job_def("publish_week")
