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


def _sleeper(seconds):
    import time
    time.sleep(seconds)


def test_an_idle_pass_wakes_on_any_steps_event_or_death_with_real_queues_and_processes():
    """With multiprocessing's own queues and processes, the idle pass waits on all the steps at once: an event
    queued by another step, or another step's death, ends the wait at once, not at the wait's limit (60 s here);
    a step whose queue Dagster closed (it finished) is left out of the wait."""
    import multiprocessing
    import threading
    import time

    ctx = multiprocessing.get_context("fork")
    poll = executor.make_poll(60.0, DEAD, idle_wait=60.0)
    queues = [ctx.Queue() for _ in range(3)]
    procs = [ctx.Process(target=_sleeper, args=(120,)) for _ in range(4)]
    for proc in procs:
        proc.start()

    def passes_until(expected):
        """Passes over the three steps, as Dagster makes them, until one returns ``expected``: each pass that has
        nothing waits once, in the poll of whichever step finds the pass idle. A killed process's sentinel can be
        ready a moment before ``is_alive()`` can reap it, so a few passes may go by; none may wait out its limit."""
        started = time.monotonic()
        while time.monotonic() - started < 10:
            got = [poll(p, q) for p, q in zip(procs, queues)]
            if got == expected:
                break
        assert got == expected
        assert time.monotonic() - started < 10, "a wait ran to its limit"

    def put_now(q, event):  # a queue's put goes through a feeder thread: wait until it can be read
        q.put(event)
        assert q._reader.poll(5)

    try:
        put_now(queues[0], "first")
        passes_until(["first", None, None])
        finished = ctx.Queue()
        put_now(finished, "done")
        assert poll(procs[3], finished) == "done"
        finished.close()  # as Dagster does when a step has finished; the next wait must leave it out
        threading.Timer(0.3, queues[2].put, ("event",)).start()
        passes_until([None, None, "event"])  # a wait in another step's poll ends when the third step queues it
        threading.Timer(0.3, procs[1].kill).start()
        passes_until([None, DEAD, None])  # and when the second step dies
    finally:
        for proc in procs:
            proc.kill()
            proc.join()
