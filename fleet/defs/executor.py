"""How the run process reads its steps' events: without waiting on one step while another has events queued.

Dagster's multiprocess executor loops over its running steps and takes one event from each per pass.
``_poll_for_event`` waits up to 20 ms on every step that has nothing to say, so a pass over 15 running steps
costs up to 0.3 s when most of them are idle (scraping), and a finishing step's last dozen events (its outputs
and check evaluations, then its success) reach the run process one pass at a time: seconds, during which
Dagster still counts the step as running and does not start the next one. Measured in a 40-source week at
15 steps in flight: 3.9 s from one step's success to the launch of the next.

:func:`install` replaces that poll with one that takes an event without waiting when there is one, and waits
only once per pass in which no step had anything, so an idle run process still sleeps, and a busy one drains
its steps' events as fast as it can handle them. That one wait is on every step of the pass at once
(``multiprocessing.connection.wait`` on their queues' reading ends and their processes' sentinels), so it ends
as soon as any step queues an event or dies, and can last up to ``IDLE_WAIT_S`` (0.1 s) instead of Dagster's 20 ms
tick: a run whose steps are all scraping makes ~10 passes a second, not ~50, each of which costs Dagster's
loop and two selector-building syscalls per step. Measured in full-size weeks (40 sources of 10 one-second
pages, cap 10; 3 alternating pairs against the previous poll): `fleet run`'s own process used 4.7-5.9 CPU-s
instead of 6.1-8.2, for the same walls. What the executor does with each event, and the order within a step,
are unchanged. It is fleet's second patch of a library (the other is in fleet/defs/warm.py); if Dagster's
internals move, it leaves Dagster's own poll in place, and it falls back to Dagster's wait on one step for
queues or processes that are not multiprocessing's.

:func:`recording_worker` wraps an executor definition so that the process executing a run's plan (the run
worker) records itself on the run first (fleet/defs/launcher.py), for run monitoring to check it is alive.
"""
from __future__ import annotations

import logging
import queue
import time

log = logging.getLogger(__name__)
_RECENT_S = 1.0  # a step polled within this long is one of the current pass
IDLE_WAIT_S = 0.1  # a pass in which no step had anything waits this long at most for any of them


def make_poll(tick: float, dead_marker, wait=None, idle_wait: float = IDLE_WAIT_S):
    """The replacement ``_poll_for_event(process, event_queue)``; ``dead_marker`` is Dagster's
    ``PROCESS_DEAD_AND_QUEUE_EMPTY``, ``wait`` is ``multiprocessing.connection.wait`` (a test passes a fake)."""
    if wait is None:
        from multiprocessing.connection import wait
    polled: dict[int, float] = {}  # id(event queue) -> when it was last polled
    since_wait: dict[int, tuple] = {}  # id(event queue) -> (process, event queue), polled since the last wait
    idle = {"count": 0}

    def wait_for_any(process, event_queue):
        """Wait until any step polled since the last wait has an event or has died, up to ``idle_wait``; Dagster's
        own wait (on this step alone, for ``tick``) if a queue or process lacks what that takes."""
        since_wait[id(event_queue)] = (process, event_queue)
        steps = list(since_wait.values())  # held until the wait is over (see _waitables)
        since_wait.clear()
        handles = _waitables(steps)
        if handles is not None:
            wait(handles, idle_wait)
            return _get_now(event_queue)
        try:
            return event_queue.get(block=True, timeout=tick)
        except queue.Empty:
            return None

    def poll_for_event(process, event_queue):
        now = time.monotonic()
        polled[id(event_queue)] = now
        if len(polled) > 256:
            for key in [k for k, t in polled.items() if now - t > _RECENT_S]:
                del polled[key]
        event = _get_now(event_queue)
        if event is not None:
            idle["count"] = 0
            since_wait[id(event_queue)] = (process, event_queue)
            return event
        idle["count"] += 1
        in_pass = sum(1 for t in polled.values() if now - t <= _RECENT_S)
        if idle["count"] >= in_pass:  # nobody had anything this pass: wait here, once
            idle["count"] = 0
            event = wait_for_any(process, event_queue)
            if event is not None:
                return event
        else:
            since_wait[id(event_queue)] = (process, event_queue)
        if not process.is_alive():
            # after the last get the process may have queued one more event and died: drain it first
            since_wait.pop(id(event_queue), None)  # its sentinel stays ready: it must not end every wait at once
            event = _get_now(event_queue)
            return dead_marker if event is None else event
        return None

    return poll_for_event


def _get_now(event_queue):
    try:
        return event_queue.get(block=False)
    except queue.Empty:
        return None


def _waitables(steps) -> list | None:
    """What ``multiprocessing.connection.wait`` can wait on for the ``(process, event queue)`` of each step: the
    queue's reading end (readable once the step has queued an event) and the process's sentinel (readable once
    it has died). A step whose queue Dagster has closed (it finished) is left out. None if a queue or process
    is not one of multiprocessing's (no ``_reader`` or ``sentinel``). The processes are held until the wait is
    over, so no sentinel's descriptor is closed and reused meanwhile."""
    handles = []
    for process, event_queue in steps:
        reader = getattr(event_queue, "_reader", None)
        if reader is None or not hasattr(reader, "closed"):
            return None
        if reader.closed:
            continue
        try:
            sentinel = process.sentinel
        except (AttributeError, ValueError):  # not a multiprocessing process, or one already closed
            return None
        handles += [reader, sentinel]
    return handles


def install() -> None:
    try:
        from dagster._core.executor import child_process_executor as cpe
        tick, dead = cpe.TICK, cpe.PROCESS_DEAD_AND_QUEUE_EMPTY
        cpe._poll_for_event  # noqa: B018  (it must exist to be replaced)
    except (ImportError, AttributeError) as exc:  # pragma: no cover - only if Dagster's layout changes
        log.warning("fleet: keeping Dagster's own step event poll (%s)", exc)
        return
    if getattr(cpe, "_fleet_poll", False):
        return
    cpe._poll_for_event = make_poll(tick, dead)
    cpe._fleet_poll = True


def recording_worker(executor_def):
    """``executor_def`` whose executor, as it starts executing a run's plan, records the process doing it as the
    run's worker (``fleet/run_worker``, fleet/defs/launcher.py). That process is the run worker: the executor
    runs there (under ``fleet run``, in the CLI's process), never in a step process. It is the first thing it
    does, right after the run's RUN_START; the launcher's check allows a run that long without the tag."""
    from dagster import ExecutorDefinition

    from fleet.defs import stephosts
    from fleet.defs.launcher import record_run_worker

    create = executor_def.executor_creation_fn

    def creation_fn(init_context):
        executor = create(init_context)
        execute = executor.execute

        def execute_recorded(plan_context, execution_plan):
            record_run_worker(plan_context.instance, plan_context.run_id)
            stephosts.open_run()  # its steps may run in step hosts until it is done (fleet/defs/stephosts.py)
            try:
                yield from execute(plan_context, execution_plan)
            finally:
                stephosts.close_run()

        executor.execute = execute_recorded
        return executor

    return ExecutorDefinition(name=executor_def.name, config_schema=executor_def.config_schema,
                              requirements=executor_def.get_requirements, executor_creation_fn=creation_fn,
                              description=executor_def.description)
