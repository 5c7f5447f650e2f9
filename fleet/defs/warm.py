"""Preloaded into the forkserver of fleet's multiprocess executor, so each step process starts warm.

Every source is its own Dagster step process, forked from one forkserver per run. Whatever that server
has imported or computed before it forks is free for all the steps of the run. Profiling a step with py-spy
on this machine (``bench/`` has the numbers) showed that a step process spent:

- about 40% of its CPU in ``check_alembic_revision``. Each sqlite storage the step connects to (the run's
  event shard, the index shard, runs, schedules) builds a new alembic ``ScriptDirectory`` and loads every
  migration script from disk, just to learn the head revision of the installed Dagster. That never changes
  while a process runs, so :func:`cache_alembic_heads` builds each script directory once, here, before the
  fork. The check of the database's own revision still runs in every step.
- a further slice importing modules lazily: the sqlite storages, ``upath``, and fleet's runner and worker.
  Those are imported here.
- some time resolving the job from ``fleet.defs.definitions``. Resolving it here caches it on the shared
  ``Definitions`` object. Each step then also built the job's run config schema, which covers every source's
  op (0.13 s of a step under cProfile, at 40 sources, and it grows with them); it is built here too, once, and
  cached on the job (a subset run builds its own).
- importing, lazily and in every step, the modules Dagster needs to rebuild the instance from its ref and to
  read the run config (secrets loading with ``dotenv``, the storages' wrappers, fleet's event log). They are
  listed in ``STEP_IMPORTS``; the list is what ``sys.modules`` gained during a step's ``execute()``.
- a full (generation 2) garbage collection over everything it inherited: about 225,000 objects of Dagster,
  Playwright, polars and fleet's definitions, 0.14-0.15 CPU-s of a step's ~0.4 (measured with
  ``gc.callbacks`` in 10 zero-page steps; whether a step hits one depends on the allocation counts it forks
  with). A collection also writes to every object it visits, so each forked step copied the pages of the
  whole inherited heap. :func:`freeze_inherited_heap` moves what the server holds out of the collector's
  reach once, before the first fork (``gc.freeze``); a step then collects only what it allocated itself.

Nothing here changes what a step does. It only moves one-off work to before the fork.
"""
from __future__ import annotations

import logging

from fleet.defs import stepinstance as _stepinstance

log = logging.getLogger(__name__)


def cache_alembic_heads() -> None:
    """Memoise ``alembic.script.ScriptDirectory.from_config`` per script location and prime the head revision
    of Dagster's sqlite storages.

    This is fleet's only patch of a library. It is safe because a script directory depends only on the files
    of the installed package. Every ``Config`` with the same script and version locations gets the same,
    already-scanned directory. If alembic's or Dagster's internals move, the priming step fails and this
    logs a warning and does nothing more."""
    try:
        from alembic.script import ScriptDirectory
        from dagster._core.storage.event_log.sqlite import sqlite_event_log
        from dagster._core.storage.runs.sqlite import sqlite_run_storage
        from dagster._core.storage.schedules.sqlite import sqlite_schedule_storage
        from dagster._core.storage.sql import get_alembic_config
    except ImportError as exc:  # pragma: no cover - only if Dagster's layout changes
        log.warning("fleet: not caching alembic script directories (%s)", exc)
        return
    if getattr(ScriptDirectory, "_fleet_cached", False):
        return
    original = ScriptDirectory.from_config.__func__
    cache: dict[tuple, ScriptDirectory] = {}

    def from_config(cls, config):
        key = (cls, str(config.get_alembic_option("script_location")), tuple(config.get_version_locations_list() or ()))
        directory = cache.get(key)
        if directory is None:
            directory = cache[key] = original(cls, config)
        return directory

    ScriptDirectory.from_config = classmethod(from_config)
    ScriptDirectory._fleet_cached = True
    try:
        for module in (sqlite_event_log, sqlite_run_storage, sqlite_schedule_storage):
            ScriptDirectory.from_config(get_alembic_config(module.__file__)).as_revision_number("head")
    except Exception as exc:  # pragma: no cover
        log.warning("fleet: could not prime alembic head revisions (%s)", exc)


# What a step imported during its execute() when these were not preloaded (dagster 1.13; a name that moves is
# skipped).
STEP_IMPORTS = (
    "dagster._core.instance.factory", "dagster._core.secrets.env_file", "dagster._core.storage.legacy_storage",
    "dagster._core.storage.sqlite_storage", "dagster._core.storage.root",
    "dagster._core.storage.noop_compute_log_manager", "dagster._core.system_config.composite_descent",
    "dagster._core.workspace.autodiscovery", "dagster._core.utility_ops", "dagster._utils.temp_file",
    "dagster._utils.test", "fleet.defs.storage", "polars._utils.parquet", "upath.implementations.local",
)


def warm() -> None:
    """Never raises: the forkserver only tolerates ImportError from a preloaded module, and a step that
    starts cold is slower, not wrong."""
    cache_alembic_heads()
    try:
        import playwright.async_api  # noqa: F401  (a worker forked from a step starts with Playwright imported)
        import upath.core  # noqa: F401  (imported lazily by Dagster's defs-state storage in every step)

        import fleet.scraping.runner  # noqa: F401
        import fleet.scraping.worker  # noqa: F401
        from fleet.defs.definitions import defs
        for job in ("scrape_week", "publish_week"):
            defs.resolve_job_def(job).run_config_schema  # noqa: B018  (built once and cached on the job)
    except Exception as exc:  # the step will report the real problem itself, with its source named
        log.warning("fleet: step processes start cold (%s: %s)", type(exc).__name__, exc)
    import importlib
    for name in STEP_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # a module a later Dagster moved: the step imports what it needs itself
            pass


def freeze_inherited_heap() -> None:
    """``gc.freeze()`` everything the forkserver has built, so forked steps never scan or dirty it.

    Frozen objects are never collected. That is what they should be: modules, definitions and caches
    that live as long as the server. The server itself allocates next to nothing between forks. There is no
    collection first: after these imports it found 48 unreachable objects among 168,000, and took 0.10 s of
    ``fleet run``'s start, which imports this module before it creates its run."""
    import gc

    gc.freeze()


warm()
if _stepinstance.preloaded_by_forkserver():  # Dagster's forkserver (a UI-launched run): its steps fork from here
    _stepinstance.prebuild()
freeze_inherited_heap()
