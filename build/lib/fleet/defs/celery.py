"""The distributed executor: dagster-celery's, with Redis as broker and result backend, plus what it lacks.

Stock dagster-celery never notices a worker that died: the executor polls each step's Celery result, a dead
worker's results never come, and the run waits for ever holding its pool slots. :class:`WorkerWatch` supplies
the detection from the run's side, through Celery's public signal and control APIs: it records each task the
executor publishes, inspects the workers for the tasks they hold (active or reserved), and fails a task that is
gone: its worker has answered nothing for ``FLEET_WORKER_LOST_S``, or no worker has listed it for as long while
a worker had room to take it (a broker restart drops a task in flight or taken but not started; Redis gives a
taken one back only after its visibility timeout, an hour). Failing is revoking (a redelivered message is
dropped) and recording the task as revoked in the result backend. The executor then sees them end, the run
finishes with those steps interrupted or never started (``infra``), and fleet's follow-up re-executes them on
the workers that live, within ``FLEET_CRASH_RERUNS``. Tasks on other workers are left alone.

``fleet worker`` (:func:`worker_main`) starts a Celery worker with the same app settings as the executor.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

from fleet import records
from fleet.config import Settings
from fleet.errors import FleetError, without_credentials

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
        # the URL (and kombu's error, which may repeat it) without the broker's password
        raise FleetError(without_credentials(f"FLEET_CELERY_BROKER={s.celery_broker} cannot be reached: {exc}")) from None


def check_workers(s: Settings) -> list[str]:
    """The names of the `fleet worker`s answering on the broker; refused in one line when none does (a run's
    steps would wait in the queue for ever)."""
    replies = control_app(s).control.ping(timeout=3.0) or []
    names = sorted(name for reply in replies for name in reply)
    if not names:
        raise FleetError(without_credentials(
            f"no `fleet worker` answers on FLEET_CELERY_BROKER={s.celery_broker}: start one (README, \"Running on "
            "more than one machine\") before running a week with FLEET_EXECUTOR=celery"))
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
    """Watches the tasks of run ``run``, and fails those that are gone (module docstring). Runs as a thread
    beside dagster-celery's execution loop, in the run's own process.

    It learns the run's tasks twice over: as the executor publishes them (Celery's ``after_task_publish``
    signal, in this process) and as workers list them. A task is gone when:

    - the worker last listing it has answered nothing for ``lost_after_s``; or
    - no worker has listed it for ``lost_after_s`` and it has no result, while some answering worker had room
      (fewer active and reserved tasks than processes) at every poll meanwhile. A worker with room takes the
      next message of the queue at once, so such a task is in no queue: a broker restart dropped it, before or
      after a worker took it; or
    - no worker at all has answered a reachable broker for ``lost_after_s``: every worker is gone.
    """

    def __init__(self, app, instance, run, lost_after_s: float, poll_s: float = POLL_S):
        self.app, self.instance, self.run = app, instance, run
        self.lost_after_s, self.poll_s = lost_after_s, poll_s
        self.tasks: dict[str, str] = {}            # task id -> step key, for this run's unfinished tasks
        self.where: dict[str, str] = {}            # task id -> the worker that last listed it
        self.last_seen: dict[str, float] = {}
        self.capacity: dict[str, int] = {}         # worker -> its pool's processes
        self.unlisted_since: dict[str, float] = {}
        self.nobody_since: float | None = None     # since when no worker has answered
        self.lost: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"fleet-worker-watch-{run.run_id[:8]}", daemon=True)

    def __enter__(self):
        from celery.signals import after_task_publish

        after_task_publish.connect(self.published, weak=False)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        from celery.signals import after_task_publish

        after_task_publish.disconnect(self.published)
        # The run has ended: the thread stops at its next wait, and a poll it is in the middle of (two broadcasts
        # of up to 3 s each) fails nothing once the run has ended. Waiting for that poll would add seconds to every
        # run's end.
        self._stop.set()
        self._thread.join(timeout=0.1)

    def published(self, sender=None, headers=None, body=None, **_kw) -> None:
        """Celery's ``after_task_publish`` receiver: a task this process published (protocol 2: the id in the
        headers, ``(args, kwargs, embed)`` as the body)."""
        with contextlib.suppress(Exception):
            task_id = (headers or {}).get("id")
            args, kwargs = (tuple(body) + ((), {}))[:2] if isinstance(body, (tuple, list)) else ((), {})
            step = _step_of({"args": args, "kwargs": kwargs}, self.run.run_id)
            if task_id and step is not None:
                with self._lock:
                    self.tasks.setdefault(task_id, step)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            with contextlib.suppress(Exception):  # a broker blip is a missed poll, never the end of the run
                self.poll()

    def poll(self, now: float | None = None) -> None:
        inspect = self.app.control.inspect(timeout=min(3.0, self.lost_after_s / 3))
        now = time.monotonic() if now is None else now
        listed: dict[str, str] = {}   # task id -> worker, over every task of every answering worker
        load: dict[str, int] = {}
        for listing in (inspect.active(), inspect.reserved()):
            for worker, tasks in (listing or {}).items():
                load[worker] = load.get(worker, 0) + len(tasks or ())
                for task in tasks or ():
                    if task.get("id"):
                        listed[task["id"]] = worker
                    step = _step_of(task, self.run.run_id)
                    if step is not None and task.get("id"):
                        with self._lock:
                            self.tasks.setdefault(task["id"], step)
        answered = set(load)
        self.lost -= answered  # one declared gone that answers again is back (`fleet worker` restarted it): watched anew
        for worker in answered:
            self.last_seen[worker] = now
        if answered - set(self.capacity):
            for worker, stats in (inspect.stats() or {}).items():
                with contextlib.suppress(Exception):
                    self.capacity[worker] = int(stats["pool"]["max-concurrency"])
        with self._lock:
            tasks = dict(self.tasks)
        for task_id in [t for t in tasks if self.app.AsyncResult(t).ready()]:
            self.forget(task_id)
            del tasks[task_id]
        for task_id, worker in listed.items():
            if task_id in tasks:
                self.where[task_id] = worker
                self.unlisted_since.pop(task_id, None)
        # a worker that holds tasks of the run and has answered nothing for long enough is gone
        for worker in {self.where[t] for t in tasks if t in self.where and t not in listed} - answered - self.lost:
            silent = now - self.last_seen.get(worker, now)
            if silent >= self.lost_after_s:
                self.fail_worker(worker, silent)
        # no worker at all has answered for long enough (the broker answers: a poll that cannot reach it raises):
        # the run's steps wait for workers that are gone
        tasks = {t: step for t, step in tasks.items() if t in self.tasks}
        if answered:
            self.nobody_since = None
        elif tasks:
            self.nobody_since = self.nobody_since if self.nobody_since is not None else now
            if now - self.nobody_since >= self.lost_after_s:
                self.fail_tasks(tasks, f"no celery worker has answered on the broker for {now - self.nobody_since:.0f} s "
                                f"(FLEET_WORKER_LOST_S={self.lost_after_s:g}): the steps {', '.join(sorted(tasks.values()))} "
                                "wait for workers that are gone (infra); start `fleet worker`s")
                self.nobody_since = None
                return
        # a task no worker lists, with no result, while a worker had room: in no queue any more
        room = [w for w in answered if load[w] < self.capacity.get(w, 0)]
        for task_id, step in tasks.items():
            if task_id in listed or task_id not in self.tasks or self.where.get(task_id) not in (None, *answered):
                continue
            if not room:
                self.unlisted_since.pop(task_id, None)
                continue
            since = self.unlisted_since.setdefault(task_id, now)
            if now - since < self.lost_after_s:
                continue
            worker = self.where.get(task_id)
            held = (f"celery worker {worker} dropped its task for step {step}" if worker else
                    f"the celery task for step {step} was lost before any worker took it")
            self.fail_tasks({task_id: step}, f"{held} without a result: no worker has listed it for "
                            f"{now - since:.0f} s while {', '.join(sorted(room))} had room, so no queue holds it "
                            f"(FLEET_WORKER_LOST_S={self.lost_after_s:g}; a broker restart does this): infra")

    def forget(self, task_id: str) -> None:
        with self._lock:
            self.tasks.pop(task_id, None)
        self.where.pop(task_id, None)
        self.unlisted_since.pop(task_id, None)

    def fail_worker(self, worker: str, silent: float) -> None:
        tasks = {t: step for t, step in dict(self.tasks).items() if self.where.get(t) == worker}
        self.lost.add(worker)
        self.fail_tasks(tasks, f"celery worker {worker} answered nothing for {silent:.0f} s (FLEET_WORKER_LOST_S="
                               f"{self.lost_after_s:g}): it is gone, and so are its steps "
                               f"{', '.join(sorted(tasks.values()))} (infra)")

    def fail_tasks(self, tasks: dict[str, str], why: str) -> None:
        if self._stop.is_set():  # the run has ended: nothing of it is left to fail
            return
        for task_id in tasks:
            # revoked for every worker (a redelivered message is dropped), and ended in the backend, which is
            # what the executor polls
            self.app.control.revoke(task_id)
            self.app.backend.mark_as_revoked(task_id, reason=why)
            self.forget(task_id)
        with contextlib.suppress(Exception):
            records.engine_event(self.instance, self.run, f"fleet: {why}")


@contextlib.contextmanager
def watching(s: Settings, instance, run):
    with WorkerWatch(control_app(s), instance, run, s.worker_lost_s):
        yield


def worker_name(name: str | None) -> str:
    return name or f"fleet-{os.getpid()}@{socket.gethostname()}"


def supervise(run, what: str, echo, quick_s: float = 30.0, quick_limit: int = 5) -> int:
    """Run ``run`` in a forked child, and start it again whenever it ends without being asked to: what ``fleet
    worker`` does for its Celery worker. Celery's Redis transport can end a worker on a broker restart
    ("Unrecoverable error" while it restores its unacknowledged messages, kombu 5.x), and a week must not wait for
    someone to restart it. A child that ends by itself within ``quick_s`` of its start ``quick_limit`` times in a row
    is left down (something is wrong that a restart will not mend), and its exit code returned. SIGTERM (forwarded
    to the child) and SIGINT (which a terminal sends the child itself) stop it for good."""
    import multiprocessing
    import signal

    child = None
    stopping = False

    def stop(signum, _frame):
        nonlocal stopping
        stopping = True
        if signum == signal.SIGTERM and child is not None and child.pid and child.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        quick, delay = 0, 1.0
        while True:
            started = time.monotonic()
            # named as a process of its own would be: Celery's logs label the worker's own lines "MainProcess"
            child = multiprocessing.get_context("fork").Process(target=run, name="MainProcess")
            child.start()
            child.join()
            code = child.exitcode
            if stopping or code == 0:
                return code or 0
            quick = quick + 1 if time.monotonic() - started < quick_s else 1
            if quick >= quick_limit:
                echo(f"fleet: {what} ended {quick} times within {quick_s:g} s of its start (last exit code {code}); "
                     "leaving it down")
                return code
            delay = delay * 2 if quick > 1 else 1.0
            echo(f"fleet: {what} ended by itself (exit code {code}); starting it again in {delay:g} s")
            if not stopping:
                time.sleep(delay)
            if stopping:
                return code
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def worker_main(s: Settings, concurrency: int, node: str, queues: str = QUEUE, loglevel: str = "INFO") -> None:
    """Run a Celery worker for fleet's definitions until it is stopped (``fleet worker``, which loads the
    definitions first, so the pool's processes fork with them in memory, and supervises it: :func:`supervise`)."""
    from dagster_celery.make_app import make_app
    from dagster_celery.tasks import create_task

    app = make_app(app_args(s))
    create_task(app)
    app.worker_main(argv=["worker", f"--concurrency={concurrency}", "-n", node, "-Q", queues,
                          f"--loglevel={loglevel}", "--without-gossip", "--without-mingle", "-P", "prefork"])
