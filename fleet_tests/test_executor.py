"""fleet's poll of step events in the run process (fleet/defs/executor.py), with fakes for Dagster's step queues,
and the check that a real run uses it."""
import queue

from fleet.defs import executor

DEAD = "PROCESS_DEAD_AND_QUEUE_EMPTY"


class FakeQueue:
    def __init__(self, events=()):
        self.events = list(events)
        self.waits = 0

    def get(self, block=True, timeout=None):
        if block:
            self.waits += 1
        if not self.events:
            raise queue.Empty
        return self.events.pop(0)


class FakeProcess:
    def __init__(self, alive=True):
        self.alive = alive

    def is_alive(self):
        return self.alive


def test_a_busy_step_is_drained_without_waiting_on_the_idle_ones():
    poll = executor.make_poll(0.0, DEAD)
    idle = [FakeQueue() for _ in range(9)]
    busy = FakeQueue([f"event-{i}" for i in range(12)])
    procs = [FakeProcess() for _ in range(10)]
    got = []
    for _ in range(12):  # one pass: every step once, as Dagster's executor polls them
        for proc, q in zip(procs, [busy, *idle]):
            event = poll(proc, q)
            if event is not None:
                got.append(event)
    assert got == [f"event-{i}" for i in range(12)]  # in order, one per pass
    assert sum(q.waits for q in idle) == 0, "waited on an idle step while another had events"


def test_an_idle_pass_waits_once_and_a_dead_step_is_drained_then_reported():
    poll = executor.make_poll(0.0, DEAD)
    queues = [FakeQueue() for _ in range(5)]
    procs = [FakeProcess() for _ in range(5)]
    for _ in range(3):
        for proc, q in zip(procs, queues):
            assert poll(proc, q) is None
    assert sum(q.waits for q in queues) == 3  # once per idle pass, not once per step
    last = FakeQueue(["late"])
    dead = FakeProcess(alive=False)
    assert poll(dead, last) == "late"
    assert poll(dead, last) == DEAD


def test_definitions_install_the_poll_into_dagsters_executor():
    import fleet.defs.definitions  # noqa: F401
    from dagster._core.executor import child_process_executor as cpe
    assert getattr(cpe, "_fleet_poll", False) and cpe._poll_for_event.__qualname__.startswith("make_poll")
