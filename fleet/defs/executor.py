"""fleet's executors: Dagster's own, wrapped so that each run records the process executing it (its run worker,
fleet/defs/runworker.py) and the version of the code it was planned with (fleet/defs/codeversion.py), beats the worker's heartbeat into the instance while it executes, and,
on Celery, is watched for workers that died (fleet/defs/celery.py)."""
from __future__ import annotations

import contextlib

from dagster import Executor, ExecutorDefinition

from fleet import records
from fleet.defs import codeversion
from fleet.config import settings
from fleet.defs.runworker import beat_period, heartbeat, record_run_worker


class FleetExecutor(Executor):
    """Delegates to Dagster's executor ``inner``; ``watch(instance, run)`` is a context manager held while the
    plan executes. The executor runs in the run worker (the process the code server starts for the run),
    never in a step."""

    def __init__(self, inner: Executor, watch=None):
        self.inner = inner
        self.watch = watch

    @property
    def retries(self):
        return self.inner.retries

    def __getattr__(self, name):
        # what an executor's own loop asks of the executor in its context (dagster-celery's: app_args)
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def execute(self, plan_context, execution_plan):
        instance, run = plan_context.instance, plan_context.dagster_run
        record_run_worker(instance, run.run_id)
        records.add_tags(instance, run.run_id, {codeversion.TAG: codeversion.code_version()})
        # a heartbeat in the instance: how run monitoring on another host knows this worker lives. (A claim on the
        # scrapers pool a step never gave back, its process dead or its Celery task revoked, Dagster's run
        # monitoring frees after the run ends: free_slots_after_run_end_seconds, which fleet's instance requires.)
        with heartbeat(instance, run.run_id, beat_period(settings().run_monitor_s)), \
                self.watch(instance, run) if self.watch else contextlib.nullcontext():
            yield from self.inner.execute(plan_context, execution_plan)


def fleet_executor(executor_def: ExecutorDefinition, watch=None) -> ExecutorDefinition:
    """``executor_def``, with the same name, config and requirements, whose executor is a :class:`FleetExecutor`."""
    create = executor_def.executor_creation_fn

    def creation_fn(init_context):
        return FleetExecutor(create(init_context), watch)

    return ExecutorDefinition(name=executor_def.name, config_schema=executor_def.config_schema,
                              requirements=executor_def.get_requirements, executor_creation_fn=creation_fn,
                              description=executor_def.description)
