"""fleet's executors: Dagster's own, each of which first records the process executing the run (its run worker)
on the run, so that run monitoring can tell when that process has died (fleet/defs/runworker.py)."""
from __future__ import annotations

from dagster import Executor, ExecutorDefinition

from fleet.defs.runworker import record_run_worker


class RecordingExecutor(Executor):
    """Delegates to Dagster's executor ``inner``, after recording the run worker: the executor runs in the run
    worker (under ``fleet run``, the CLI's process), never in a step process."""

    def __init__(self, inner: Executor):
        self.inner = inner

    @property
    def retries(self):
        return self.inner.retries

    def execute(self, plan_context, execution_plan):
        record_run_worker(plan_context.instance, plan_context.run_id)
        yield from self.inner.execute(plan_context, execution_plan)


def recording(executor_def: ExecutorDefinition) -> ExecutorDefinition:
    """``executor_def``, with the same name, config and requirements, whose executor records the run worker."""
    create = executor_def.executor_creation_fn

    def creation_fn(init_context):
        return RecordingExecutor(create(init_context))

    return ExecutorDefinition(name=executor_def.name, config_schema=executor_def.config_schema,
                              requirements=executor_def.get_requirements, executor_creation_fn=creation_fn,
                              description=executor_def.description)
