"""The worker watch of the Celery executor (fleet/defs/celery.py), against a stand-in for Celery's control API:
which tasks it fails and when. The real workers, killed for real, are in test_scaleout.py."""
from __future__ import annotations

import os
from types import SimpleNamespace

from dagster import DagsterEventType, DagsterInstance, job, op

from fleet.defs.celery import WorkerWatch


@op
def noop():
    pass


@job
def tiny():
    noop()


def _task(task_id: str, run_id: str, step: str) -> dict:
    return {"id": task_id, "args": [], "kwargs": {"execute_step_args_packed": {
        "__class__": "ExecuteStepArgs", "run_id": run_id, "step_keys_to_execute": [step]}}}


class FakeApp:
    """Celery's app as the watch uses it: inspect(active, reserved, stats), AsyncResult(ready), revoke, the
    backend. Every worker has ``processes`` pool processes."""

    def __init__(self, processes: int = 10):
        self.active, self.reserved, self.done = {}, {}, set()
        self.revoked, self.marked = [], []
        self.control = SimpleNamespace(inspect=lambda timeout: SimpleNamespace(
            active=lambda: dict(self.active), reserved=lambda: dict(self.reserved),
            stats=lambda: {w: {"pool": {"max-concurrency": processes}} for w in self.active}),
            revoke=self.revoked.append)
        self.backend = SimpleNamespace(mark_as_revoked=lambda task_id, reason="": self.marked.append((task_id, reason)))

    def AsyncResult(self, task_id):  # noqa: N802 - Celery's name
        return SimpleNamespace(ready=lambda: task_id in self.done)


def test_a_silent_worker_loses_its_tasks_of_the_run_and_no_other():
    instance = DagsterInstance.ephemeral()
    run = instance.get_run_by_id(tiny.execute_in_process(instance=instance).run_id)
    app = FakeApp()
    app.active = {"a@h": [_task("t1", run.run_id, "raw__one"), _task("tx", "another-run", "raw__x")],
                  "b@h": [_task("t2", run.run_id, "raw__two")]}
    app.reserved = {"a@h": [_task("t3", run.run_id, "raw__three")], "b@h": []}
    watch = WorkerWatch(app, instance, run, lost_after_s=30)
    watch.poll(now=0)
    assert set(watch.tasks) == {"t1", "t2", "t3"}  # the other run's task is not this run's to judge
    app.active.pop("a@h")
    app.reserved.pop("a@h")
    watch.poll(now=29)
    assert app.revoked == [] and app.marked == []  # silent, but not for long enough
    app.done.add("t2")  # b finished its step: no longer held
    watch.poll(now=31)
    assert sorted(app.revoked) == ["t1", "t3"] and sorted(t for t, _ in app.marked) == ["t1", "t3"]
    assert "celery worker a@h answered nothing for 31 s" in app.marked[0][1]
    assert "raw__one" in app.marked[0][1] and "raw__three" in app.marked[0][1]
    messages = [r.dagster_event.message for r in instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT)]
    assert any(m.startswith("fleet: celery worker a@h answered nothing") for m in messages), messages
    watch.poll(now=100)  # a worker declared gone is not failed twice
    assert len(app.revoked) == 2 and watch.tasks == {}
    # its `fleet worker` starts it again under the same name: it takes a task of the run, then dies for good
    app.active = {"a@h": [_task("t4", run.run_id, "raw__four")], "b@h": []}
    app.reserved = {}
    watch.poll(now=110)
    app.active = {"b@h": []}
    watch.poll(now=120)
    watch.poll(now=141)
    assert app.revoked[-1] == "t4" and "celery worker a@h answered nothing for 31 s" in app.marked[-1][1]


def test_a_task_its_worker_dropped_without_a_result_is_failed_after_the_same_wait():
    instance = DagsterInstance.ephemeral()
    run = instance.get_run_by_id(tiny.execute_in_process(instance=instance).run_id)
    app = FakeApp()
    app.active = {"a@h": [_task("t1", run.run_id, "raw__one")]}
    app.reserved = {"a@h": [_task("t2", run.run_id, "raw__two")]}
    watch = WorkerWatch(app, instance, run, lost_after_s=30)
    watch.poll(now=0)
    app.reserved = {"a@h": []}  # the broker restarted: a answers, still runs t1, and has dropped t2
    watch.poll(now=10)
    watch.poll(now=39)
    assert app.revoked == []
    watch.poll(now=41)
    assert app.revoked == ["t2"] and "dropped its task for step raw__two" in app.marked[0][1]
    assert set(watch.tasks) == {"t1"}  # still listed: left alone
    app.done.add("t1")
    app.active = {"a@h": []}
    watch.poll(now=100)  # finished with a result: not a vanished task
    assert app.revoked == ["t2"] and watch.tasks == {}


def test_a_published_task_no_worker_ever_listed_is_failed_only_while_a_worker_had_room():
    instance = DagsterInstance.ephemeral()
    run = instance.get_run_by_id(tiny.execute_in_process(instance=instance).run_id)
    app = FakeApp(processes=2)
    watch = WorkerWatch(app, instance, run, lost_after_s=30)
    body = lambda step: ((), _task("", run.run_id, step)["kwargs"], {})  # noqa: E731 - protocol 2's body
    watch.published(sender="execute_plan", headers={"id": "t1"}, body=body("raw__one"))
    watch.published(sender="execute_plan", headers={"id": "t2"}, body=body("raw__two"))
    watch.published(sender="execute_plan", headers={"id": "tx"}, body=((), _task("", "another-run", "x")["kwargs"], {}))
    assert set(watch.tasks) == {"t1", "t2"}  # another run's task is not this run's to judge
    # the worker is full with other work: t1 and t2 may wait in the queue as long as it takes
    app.active = {"a@h": [_task("o1", "another-run", "x"), _task("o2", "another-run", "y")]}
    for now in (0, 40, 80):
        watch.poll(now=now)
    assert app.revoked == []
    # a slot frees, a takes t2 and finishes it; t1 is listed nowhere while a has room: the queue lost it
    app.active = {"a@h": [_task("t2", run.run_id, "raw__two")]}
    watch.poll(now=90)
    app.done.add("t2")
    app.active = {"a@h": []}
    watch.poll(now=100)
    watch.poll(now=119)
    assert app.revoked == []
    watch.poll(now=121)
    assert app.revoked == ["t1"] and watch.tasks == {}
    assert "the celery task for step raw__one was lost before any worker took it" in app.marked[0][1]


def test_when_no_worker_answers_at_all_the_runs_waiting_tasks_are_failed():
    instance = DagsterInstance.ephemeral()
    run = instance.get_run_by_id(tiny.execute_in_process(instance=instance).run_id)
    app = FakeApp()
    watch = WorkerWatch(app, instance, run, lost_after_s=30)
    watch.published(sender="execute_plan", headers={"id": "t1"}, body=((), _task("", run.run_id, "raw__one")["kwargs"], {}))
    app.active = {"a@h": [_task("o1", "another-run", "x")]}
    watch.poll(now=0)
    app.active = {}  # every worker is gone (the broker still answers the polls)
    watch.poll(now=5)
    watch.poll(now=34)
    assert app.revoked == []
    watch.poll(now=36)
    assert app.revoked == ["t1"] and "no celery worker has answered on the broker for 31 s" in app.marked[0][1]


def test_fleet_worker_starts_its_celery_worker_again_when_it_ends_by_itself(tmp_path):
    """`fleet worker`'s supervisor, with real forked children: one that ends by itself is started again; one
    that ends cleanly is not; one that keeps ending at once is left down with its exit code."""
    from fleet.defs.celery import supervise

    starts = tmp_path / "starts"
    said = []

    def crashes_once():
        with open(starts, "a") as fh:
            fh.write("x")
        raise SystemExit(1 if starts.read_text() == "x" else 0)

    assert supervise(crashes_once, "the child", said.append) == 0
    assert starts.read_text() == "xx" and said == ["fleet: the child ended by itself (exit code 1); starting it again in 1 s"]
    said.clear()
    assert supervise(lambda: os._exit(3), "the child", said.append, quick_limit=2) == 3
    assert said[-1] == "fleet: the child ended 2 times within 30 s of its start (last exit code 3); leaving it down", said


def test_an_unreachable_brokers_refusal_names_it_without_its_password(monkeypatch):
    """check_broker's one line names FLEET_CELERY_BROKER and where it points, but never the password in it (nor
    in kombu's own error, which may repeat the URL)."""
    import pytest

    from fleet.config import settings
    from fleet.defs.celery import check_broker
    from fleet.errors import FleetError
    from fleet_tests.conftest import free_port

    url = f"redis://fleet:s3cret-pass@127.0.0.1:{free_port()}/0"
    monkeypatch.setenv("FLEET_EXECUTOR", "celery")
    monkeypatch.setenv("FLEET_CELERY_BROKER", url)
    with pytest.raises(FleetError) as refused:
        check_broker(settings())
    message = str(refused.value)
    assert message.startswith("FLEET_CELERY_BROKER=redis://***@127.0.0.1:"), message
    assert "s3cret-pass" not in message and "\n" not in message, message
