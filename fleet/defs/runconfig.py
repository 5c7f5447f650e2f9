"""Each process resolves a job's run config once, not once per use; `fleet run`'s steps inherit it resolved.

Dagster's ``ResolvedRunConfig.build(job_def, run_config)`` validates the run config against the whole job's
config schema and fills in every op's defaults. That is every source's op, even in a step process that runs
only one of them. A step builds it twice: once to plan its step (``create_execution_plan``) and once to create
its execution context. Each build grows with the number of sources (timed warm: 3.4 ms at 40, 15.6 ms at 200,
73 ms at 1,000; BENCHMARKS.md), so the week's total grows with their square. At 40 sources that is only
~10-15 ms of a step's ~0.23 CPU-s; at 1,000 it is ~150 ms of every step.

:func:`install` memoises the build per job definition object and run config, in every process that loads
fleet's definitions. The result is a function of those two only: the job's config schema is fixed once the
job is built, and Dagster treats both the run config and the resolved config as immutable. A config that does
not validate is never cached, so each caller gets the same error as before. :func:`prime` resolves a run's
config in the process that will fork the week's steps (`fleet run`, before its forkserver), so a step forked
from it builds none. It is fleet's third patch of a library's internals (the others are in
fleet/defs/warm.py and fleet/defs/executor.py); if Dagster's layout moves, Dagster's own build stays.
"""
from __future__ import annotations

import json
import logging
import threading

log = logging.getLogger(__name__)
MAX_ENTRIES = 16  # a process sees a few jobs and configs; a subset job is a new object, and new objects come and go

_lock = threading.Lock()
_cache: dict[tuple[int, str], tuple[object, object]] = {}  # (id(job_def), config key) -> (job_def, resolved)


def _config_key(run_config) -> str | None:
    try:
        return json.dumps(run_config or {}, sort_keys=True)
    except (TypeError, ValueError):  # not plain data: resolve it every time, as Dagster does
        return None


def make_build(original):
    """The memoised ``build(job_def, run_config=None)`` around Dagster's ``original``."""

    def build(job_def, run_config=None):
        key = _config_key(run_config)
        if key is None:
            return original(job_def, run_config)
        cache_key = (id(job_def), key)
        hit = _cache.get(cache_key)
        if hit is not None and hit[0] is job_def:  # the entry holds its job, so its id is never reused meanwhile
            return hit[1]
        resolved = original(job_def, run_config)
        with _lock:
            if len(_cache) >= MAX_ENTRIES:
                _cache.pop(next(iter(_cache)))
            _cache[cache_key] = (job_def, resolved)
        return resolved

    build.__wrapped__ = original
    return build


def install() -> None:
    try:
        from dagster._core.system_config.objects import ResolvedRunConfig
        original = ResolvedRunConfig.build
    except (ImportError, AttributeError) as exc:  # pragma: no cover - only if Dagster's layout changes
        log.warning("fleet: run configs are resolved by Dagster on every use (%s)", exc)
        return
    if getattr(original, "__wrapped__", None) is not None:
        return
    ResolvedRunConfig.build = staticmethod(make_build(original))


def prime(job_def, run_config) -> None:
    """Resolve ``run_config`` for ``job_def`` now, in this process, for the steps it will fork. Never raises: a
    config that does not validate fails the run where Dagster checks it, with Dagster's own error."""
    try:
        from dagster._core.system_config.objects import ResolvedRunConfig
        ResolvedRunConfig.build(job_def, run_config)
    except Exception:  # noqa: BLE001
        pass
