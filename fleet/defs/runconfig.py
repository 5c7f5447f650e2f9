"""Each process resolves a job's run config and plans the whole job once, not once per use; `fleet run`'s steps
inherit both.

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

Planning is the same story. To plan its one step, a step has Dagster build the plan of the whole job (every
source's step) and then take the subset of its own step: 3 ms warm at 40 sources, 91 ms at 1,000 (timed
in one process, 20 steps each), and 11-12 ms of a step's CPU at 40 in a real week. :func:`make_plan_build`
keeps the whole plan per job definition object and resolved config, and serves a step's request with Dagster's
own ``build_subset_plan`` of it (with the request's known state: a retry's count); :func:`prime` plans the
job in `fleet run` before its forkserver. Equal, snapshot for snapshot, to what Dagster builds (test_runconfig).
A plan with dynamic outputs depends on the known state, so Dagster builds each of those as before.
"""
from __future__ import annotations

import json
import logging
import threading

log = logging.getLogger(__name__)
MAX_ENTRIES = 16  # a process sees a few jobs and configs; a subset job is a new object, and new objects come and go

_lock = threading.Lock()
_cache: dict[tuple[int, str], tuple[object, object]] = {}  # (id(job_def), config key) -> (job_def, resolved)
_plans: dict[tuple[int, int], tuple] = {}  # (id(job_def), id(resolved)) -> (job_def, resolved, whole plan or None)


def _config_key(run_config) -> str | None:
    try:
        return json.dumps(run_config or {}, sort_keys=True)
    except (TypeError, ValueError):  # not plain data: resolve it every time, as Dagster does
        return None


def _remember(cache: dict, key, entry) -> None:
    """Keep ``entry`` under ``key``, the oldest entry going once ``cache`` holds MAX_ENTRIES."""
    with _lock:
        if len(cache) >= MAX_ENTRIES:
            cache.pop(next(iter(cache)))
        cache[key] = entry


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
        _remember(_cache, cache_key, (job_def, resolved))
        return resolved

    build.__wrapped__ = original
    return build


def make_plan_build(original):
    """The memoised ``ExecutionPlan.build`` around Dagster's ``original``: the job's whole plan is built once per
    job definition object and resolved run config, and a request for some of its steps (a step process plans
    only its own) is Dagster's own ``build_subset_plan`` of it, with the request's known state. Only plain
    requests are served so (no instance ref, tags or repository load data, no dynamic outputs in the plan or
    mappings in the known state); any other goes to Dagster's build every time."""

    def build(job_def, resolved_run_config, step_keys_to_execute=None, known_state=None, instance_ref=None,
              tags=None, repository_load_data=None):
        def dagster_build():
            return original(job_def, resolved_run_config, step_keys_to_execute=step_keys_to_execute,
                            known_state=known_state, instance_ref=instance_ref, tags=tags,
                            repository_load_data=repository_load_data)

        if (instance_ref is not None or tags or repository_load_data is not None
                or (known_state is not None and known_state.dynamic_mappings)):
            return dagster_build()
        cache_key = (id(job_def), id(resolved_run_config))
        hit = _plans.get(cache_key)
        if hit is None or hit[0] is not job_def or hit[1] is not resolved_run_config:
            full = original(job_def, resolved_run_config)
            hit = (job_def, resolved_run_config, None if full.resolvable_map else full)
            _remember(_plans, cache_key, hit)
        full = hit[2]
        if full is None:  # dynamic outputs: the plan depends on the known state, so Dagster builds each
            return dagster_build()
        plan = full if known_state is None else full._replace(known_state=known_state)
        if step_keys_to_execute is not None and list(step_keys_to_execute) != plan.step_keys_to_execute:
            plan = plan.build_subset_plan(step_keys_to_execute, job_def, resolved_run_config)
        return plan

    build.__wrapped__ = original
    return build


def install() -> None:
    try:
        from dagster._core.execution.plan.plan import ExecutionPlan
        from dagster._core.system_config.objects import ResolvedRunConfig
        original = ResolvedRunConfig.build
        original_plan = ExecutionPlan.build
    except (ImportError, AttributeError) as exc:  # pragma: no cover - only if Dagster's layout changes
        log.warning("fleet: run configs are resolved by Dagster on every use (%s)", exc)
        return
    if getattr(original, "__wrapped__", None) is None:
        ResolvedRunConfig.build = staticmethod(make_build(original))
    if getattr(original_plan, "__wrapped__", None) is None:
        ExecutionPlan.build = staticmethod(make_plan_build(original_plan))


def prime(job_def, run_config) -> None:
    """Resolve ``run_config`` for ``job_def``, and plan the whole job with it, now, in this process, for the steps
    it will fork. Never raises: a config that does not validate fails the run where Dagster checks it, with
    Dagster's own error."""
    try:
        from dagster._core.execution.plan.plan import ExecutionPlan
        from dagster._core.system_config.objects import ResolvedRunConfig
        ExecutionPlan.build(job_def, ResolvedRunConfig.build(job_def, run_config))
    except Exception:  # noqa: BLE001
        pass
