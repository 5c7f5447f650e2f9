"""The distributed executor: dagster-celery's, with Redis as broker and result backend, plus what it lacks.

Stock dagster-celery never notices a worker that died: the executor polls each step's Celery result, a dead
worker's results never come, and the run waits for ever holding its pool slots. :class:`WorkerWatch` supplies
the detection from the run's side, through Celery's public control API: it pings the workers, learns which of
them hold this run's tasks (active or prefetched), and when one holding tasks has answered nothing for
``FLEET_WORKER_LOST_S``, it revokes those tasks and records them as revoked in the result backend. So it does
for a task that a worker still answering stopped listing without a result (a broker restart drops a task a
worker had taken but not started, and Redis redelivers it only after its visibility timeout). The executor
then sees them end, the run finishes with those steps interrupted or never started (``infra``), and fleet's
follow-up re-executes them on the workers that live, within ``FLEET_CRASH_RERUNS``. Tasks on other workers are
left alone.

``fleet worker`` (:func:`worker_main`) starts a Celery worker with the same app settings as the executor.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

from fleet.config import Settings
from fleet.errors import FleetError

# One place for the settings both sides of the queue must agree on (the executor's app and `fleet worker`'s).
CELERY_CONF = {
    # A worker takes only what it can run now: a step it acknowledges late (when done) and never prefetches
    # beyond its free processes, so a busy worker does not sit on steps another could run.
    "task_acks_late": True,
    "worker_prefetch_multiplier": 1,
    # A Redis restart is a pause, not the end of the run: the executor's result polls and the worker's result
    # writes retry while it comes back.
    "result_backend_always_retry": True,
    "result_backend_max_retries": 60,
    "broker_connection_retry_on_startup": True,
    "broker_connection_max_retries": 60,
    "result_expires": 7 * 24 * 3600,
    "worker_cancel_long_running_tasks_on_connection_loss": False,
    "task_default_queue": "dagster",
}
QUEUE = "dagster"
POLL_S = 2.0


def app_args(s: Settings) -> dict:
    """The Celery app arguments of dagster-celery's executor for ``s``."""
    from dagster_celery.executor import CeleryExecutor

    return CeleryExecutor.for_cli(broker=s.celery_broker, backend=s.celery_backend,
                                  config_source=dict(CELERY_CONF)).app_args()


def executor_config(s: Settings) -> dict:
    """dagster-celery's executor config (``celery_executor.configured``) for ``s``."""
    return {"broker": s.celery_broker, "backend": s.celery_backend, "config_source": dict(CELERY_CONF)}


def control_app(s: Settings):
    """A plain Celery app on the same broker and backend: for pings, inspection and revocation."""
    from celery import Celery

    app = Celery("fleet-control", broker=s.celery_broker, backend=s.celery_backend)
    app.conf.update(CELERY_CONF)
    return app


def check_broker(s: Settings) -> None:
    """Refuse, in one line naming the setting, a broker that cannot be reached."""
    try:
        with control_app(s).connection_for_write() as conn:
            conn.ensure_connection(max_retries=2, interval_start=0.2, interval_step=0.5, timeout=5)
    except Exception as exc:
        raise FleetError(f"FLEET_CELERY_BROKER={s.celery_broker} cannot be reached: {exc}") from None


def check_workers(s: Settings) -> list[str]:
    """The names of the `fleet worker`s answering on the broker; refused in one line when none does (a run's
    steps would wait in the queue for ever)."""
    replies = control_app(s).control.ping(timeout=3.0) or []
    names = sorted(name for reply in replies for name in reply)
    if not names:
        raise FleetError(f"no `fleet worker` answers on FLEET_CELERY_BROKER={s.celery_broker}: start one (README, "
                         "\"Running on more than one machine\") before running a week with FLEET_EXECUTOR=celery")
    return names


def _step_of(task: dict, run_id: str) -> str | None:
    """The step key of an inspected task of run ``run_id``, or None when the task is another run's."""
    blob = json.dumps([task.get("args"), task.get("kwargs")], default=str)
    if run_id not in blob:
        return None
    packed = (task.get("kwargs") or {}).get("execute_step_args_packed") or {}
    keys = packed.get("step_keys_to_execute") if isinstance(packed, dict) else None
    return ",".join(keys) if keys else "?"


class WorkerWatch:
    """Watches the workers holding run ``run_id``'s tasks, and fails the tasks of one that is gone (module
    docstring). Runs as a thread beside dagster-celery's execution loop, in the run's own process."""

    def __init__(self, app, instance, run, lost_after_s: float, poll_s: float = POLL_S):
        self.app, self.instance, self.run = app, instance, run
        self.lost_after_s, self.poll_s = lost_after_s, poll_s
        self.held: dict[str, tuple[str, str]] = {}   # task id -> (worker, step key)
        self.last_seen: dict[str, float] = {}
        self.missing_since: dict[str, float] = {}  # task id -> when its worker, still answering, stopped listing it
        self.lost: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"fleet-worker-watch-{run.run_id[:8]}", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            with contextlib.suppress(Exception):  # a broker blip is a missed poll, never the end of the run
                self.poll()

    def poll(self, now: float | None = None) -> None:
        inspect = self.app.control.inspect(timeout=min(3.0, self.lost_after_s / 3))
        now = time.monotonic() if now is None else now
        answered: set[str] = set()
        listing_ids: list[str] = []
        for listing in (inspect.active(), inspect.reserved()):
            for worker, tasks in (listing or {}).items():
                answered.add(worker)
                listing_ids += [t.get("id") for t in tasks or ()]
                for task in tasks or ():
                    step = _step_of(task, self.run.run_id)
                    if step is not None and task.get("id") and worker not in self.lost:
                        self.held[task["id"]] = (worker, step)
        for worker in answered:
            self.last_seen[worker] = now
        for task_id in [t for t in self.held if self.app.AsyncResult(t).ready()]:
            del self.held[task_id]
            self.missing_since.pop(task_id, None)
        for worker in {w for w, _ in self.held.values()} - answered:
            silent = now - self.last_seen.get(worker, now)
            if silent >= self.lost_after_s:
                self.fail_worker(worker, silent)
        # A worker that answers but no longer lists a task it held, whose result never came: the task is gone.
        # A broker restart does this to a task a worker had taken but not started: the worker drops it, and
        # Redis gives it back only after its visibility timeout (an hour).
        listed = set(listing_ids)
        for task_id, (worker, step) in list(self.held.items()):
            if worker not in answered or task_id in listed:
                self.missing_since.pop(task_id, None)
                continue
            since = self.missing_since.setdefault(task_id, now)
            if now - since >= self.lost_after_s:
                self.fail_tasks({task_id: step}, f"celery worker {worker} dropped its task for step {step} without a "
                                f"result (gone from its tasks for {now - since:.0f} s, FLEET_WORKER_LOST_S="
                                f"{self.lost_after_s:g}; a broker restart does this): infra")

    def fail_worker(self, worker: str, silent: float) -> None:
        tasks = {t: step for t, (w, step) in self.held.items() if w == worker}
        self.lost.add(worker)
        self.fail_tasks(tasks, f"celery worker {worker} answered nothing for {silent:.0f} s (FLEET_WORKER_LOST_S="
                               f"{self.lost_after_s:g}): it is gone, and so are its steps "
                               f"{', '.join(sorted(tasks.values()))} (infra)")

    def fail_tasks(self, tasks: dict[str, str], why: str) -> None:
        for task_id in tasks:
            # revoked for every worker (a redelivered message is dropped), and ended in the backend, which is
            # what the executor polls
            self.app.control.revoke(task_id)
            self.app.backend.mark_as_revoked(task_id, reason=why)
            self.held.pop(task_id, None)
            self.missing_since.pop(task_id, None)
        with contextlib.suppress(Exception):
            self.instance.report_engine_event(f"fleet: {why}", self.run)


@contextlib.contextmanager
def watching(s: Settings, instance, run):
    with WorkerWatch(control_app(s), instance, run, s.worker_lost_s):
        yield


def worker_name(name: str | None) -> str:
    return name or f"fleet-{os.getpid()}@{socket.gethostname()}"


def worker_main(s: Settings, concurrency: int, node: str, queues: str = QUEUE, loglevel: str = "INFO") -> None:
    """Run a Celery worker for fleet's definitions until it is stopped (``fleet worker``, which loads the
    definitions first, so the pool's processes fork with them in memory)."""
    from dagster_celery.make_app import make_app
    from dagster_celery.tasks import create_task

    app = make_app(app_args(s))
    create_task(app)
    app.worker_main(argv=["worker", f"--concurrency={concurrency}", "-n", node, "-Q", queues,
                          f"--loglevel={loglevel}", "--without-gossip", "--without-mingle", "-P", "prefork"])
