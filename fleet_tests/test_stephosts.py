"""Step hosts (fleet/defs/stephosts.py): a step process that ends cleanly runs the run's next step, one at a time;
a crash still costs only the crashed step, and a host never outlives its run. Real `fleet run`s, real
forkserver processes; the bookkeeping of the run process's side also with fakes."""
import os
import shutil
import signal
import textwrap

import pytest
from dagster._core.executor.child_process_executor import ChildProcessCommand

from fleet.defs import stephosts
from fleet_tests.conftest import ROOT, WEEK, run_fleet

CHEAP = textwrap.dedent('''
    import polars as pl

    from fleet import Scraper


    class Cheap(Scraper):
        """One row from inline HTML: a step whose cost is all Dagster and fleet."""

        name = "{name}"
        schema = {{"id": pl.Int64}}
        key = ("id",)
        timeout_s = 60

        async def scrape(self, page, ctx):
            await page.set_content("<p>1</p>")
            yield {{"id": int(await page.locator("p").inner_text())}}
''')


def _sources(tmp_path, names, crash=False):
    d = tmp_path / "scrapers"
    d.mkdir()
    for name in names:
        (d / f"{name}.py").write_text(CHEAP.format(name=name))
    if crash:  # sorts after the cheap ones: Dagster launches it once hosts have run steps
        shutil.copy(ROOT / "fleet_tests" / "scrapers_crash" / "crash_once.py", d / "crash_once.py")
    return d


def _attempts(home):
    """(step key, pid, start, end, how it ended) of every step attempt of the week's scrape run."""
    from dagster import DagsterEventType, DagsterInstance, RunsFilter

    ends = {DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE, DagsterEventType.STEP_UP_FOR_RETRY}
    with DagsterInstance.from_config(str(home / "dagster")) as instance:
        run = next(r for r in instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
                   if r.tags.get("fleet/kind") == "scrape")
        open_, done = {}, []
        for e in instance.all_logs(run.run_id):
            ev = e.dagster_event
            if ev is None or not ev.step_key:
                continue
            if ev.event_type in (DagsterEventType.STEP_START, DagsterEventType.STEP_RESTARTED):
                open_[ev.step_key] = (ev.pid, e.timestamp)
            elif ev.event_type in ends and ev.step_key in open_:
                pid, start = open_.pop(ev.step_key)
                done.append((ev.step_key, pid, start, e.timestamp, ev.event_type.value))
    assert not open_, open_
    return done


def _one_step_at_a_time(attempts):
    by_pid = {}
    for step, pid, start, end, _ in attempts:
        by_pid.setdefault(pid, []).append((start, end, step))
    for pid, spans in by_pid.items():
        spans.sort()
        for (_, end, step), (start, _, nxt) in zip(spans, spans[1:]):
            assert end <= start, f"process {pid} ran {nxt} while {step} was still running"
    return by_pid


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_hosts_run_one_step_after_another_and_a_crash_in_one_costs_only_its_step(fleet_env, tmp_path):
    """Two steps in flight (cap 1, headroom 1) over four cheap sources and crash_once, which SIGKILLs its step
    process on its first attempt. The cheap steps share two processes, one step at a time; crash_once's first
    attempt runs in a process that had already run a step, its death is a crash that Dagster re-executes, and
    the week is complete. No step process outlives `fleet run`."""
    counters = tmp_path / "counters"
    counters.mkdir()
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(_sources(tmp_path, ["a0", "a1", "a2", "a3"], crash=True)),
           "FLEET_MAX_PARALLEL": "1", "FLEET_STEP_HEADROOM": "1", "FLEET_TEST_COUNTER_DIR": str(counters)}
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    attempts = _attempts(fleet_env.home)
    by_pid = _one_step_at_a_time(attempts)
    assert sorted(s for s, *_ in attempts) == ["raw__a0", "raw__a1", "raw__a2", "raw__a3", "raw__crash_once",
                                               "raw__crash_once"]
    assert len(by_pid) < len(attempts), "no step process ran a second step"
    crashed = [a for a in attempts if a[4] == "STEP_UP_FOR_RETRY"]
    assert [a[0] for a in crashed] == ["raw__crash_once"]
    pid, start = crashed[0][1], crashed[0][2]
    assert any(p == pid and end <= start for _, p, _, end, _ in attempts), \
        "crash_once's first attempt did not run in a process that had run a step before"
    assert not any(p == pid and s > start for _, p, s, _, _ in attempts), "a crashed process ran another step"
    assert (counters / "crash_once").read_text() == "xx"  # killed once, re-executed once
    assert sorted(a[4] for a in attempts).count("STEP_SUCCESS") == 5
    assert all(_gone(p) for p in by_pid), "a step process outlived its run"


def test_step_reuse_1_gives_every_step_a_process_of_its_own(fleet_env, tmp_path):
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(_sources(tmp_path, ["a0", "a1", "a2"])),
           "FLEET_MAX_PARALLEL": "1", "FLEET_STEP_HEADROOM": "1", "FLEET_STEP_REUSE": "1"}
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    attempts = _attempts(fleet_env.home)
    assert len(attempts) == 3 and len({a[1] for a in attempts}) == 3


class FakeProcess:
    def __init__(self, alive=True):
        self.alive = alive

    def is_alive(self):
        return self.alive


class FakeHost(stephosts.Host):
    def __init__(self, steps=1, max_steps=3, alive=True):
        self.steps, self.max_steps, self.process, self.retired = steps, max_steps, FakeProcess(alive), False
        self.ends_after_step = False

    def retire(self):
        self.retired = True

    def end_after_step(self):
        self.ends_after_step = True


@pytest.fixture
def one_open_run(monkeypatch):
    monkeypatch.setattr(stephosts, "_idle", [])
    monkeypatch.setattr(stephosts, "_busy", set())
    monkeypatch.setattr(stephosts, "_open_runs", {"count": 1})
    return stephosts


def test_a_host_is_reused_only_after_a_clean_end_within_its_budget_and_its_run(one_open_run):
    hs = one_open_run
    clean, error, spent, dead = FakeHost(), FakeHost(), FakeHost(steps=3), FakeHost(alive=False)
    hs._give_back(clean, clean=True)
    hs._give_back(error, clean=False)  # a system error or an interrupt: the host's last step
    hs._give_back(spent, clean=True)  # FLEET_STEP_REUSE steps done
    hs._give_back(dead, clean=True)
    assert hs._idle == [clean] and not clean.retired
    assert error.retired and spent.retired and dead.retired
    assert hs._take(ctx=None) is clean and hs._idle == [] and hs._busy == {clean}
    hs._give_back(clean, clean=True)
    assert hs._busy == set()
    interrupted = FakeHost()
    hs._idle.append(interrupted)
    assert hs._take(ctx=None) is interrupted  # and its step is still running when the executor gives up:
    hs.close_run()  # the run is done: idle hosts exit, a busy one once its step is done (not waiting for another)
    assert clean.retired and hs._idle == []
    assert interrupted.ends_after_step and not interrupted.retired  # its last events can still be read
    hs._give_back(interrupted, clean=True)  # and a step that ends after the run is not kept
    assert interrupted.retired and hs._idle == [] and hs._busy == set()


def test_outside_a_run_of_fleets_executor_dagster_starts_a_process_per_step(one_open_run, monkeypatch):
    """Only a forkserver context inside an open run goes to hosts; anything else is Dagster's own function."""
    calls = []
    monkeypatch.setitem(stephosts._original, "execute_child_process_command",
                        lambda ctx, command: iter([calls.append((ctx, command)) or "dagster's"]))

    class Ctx:
        def __init__(self, method):
            self.method = method

        def get_start_method(self):
            return self.method

    assert list(stephosts.execute_child_process_command(Ctx("spawn"), "cmd")) == ["dagster's"]
    monkeypatch.setenv("FLEET_STEP_REUSE", "1")
    assert list(stephosts.execute_child_process_command(Ctx("forkserver"), "cmd")) == ["dagster's"]
    monkeypatch.delenv("FLEET_STEP_REUSE")
    hs = one_open_run
    hs.close_run()
    assert list(stephosts.execute_child_process_command(Ctx("forkserver"), "cmd")) == ["dagster's"]
    assert len(calls) == 3


def test_a_commands_termination_event_goes_to_a_running_host_but_no_descriptor_does():
    import multiprocessing
    import pickle

    ctx = multiprocessing.get_context("forkserver")
    event = ctx.Event()
    assert isinstance(pickle.loads(stephosts._dumps({"term_event": event}))["term_event"], type(event))
    with pytest.raises(RuntimeError):  # outside _dumps, multiprocessing refuses, as it always has
        pickle.dumps(event)
    r, w = ctx.Pipe(duplex=False)
    with pytest.raises(TypeError, match="file descriptor"):
        stephosts._dumps({"conn": r})
    r.close()
    w.close()


class EchoCommand(ChildProcessCommand):
    """Yields its pid twice, raising in between when asked to."""

    def __init__(self, n, boom=False):
        self.n, self.boom = n, boom

    def execute(self):
        yield ("pid", os.getpid(), self.n)
        if self.boom:
            raise ValueError(f"boom {self.n}")
        yield ("pid", os.getpid(), self.n + 1)


def test_a_real_host_runs_commands_one_after_another_and_exits_when_its_pipe_closes():
    """A host process (a forkserver child, as the executor starts it) runs each command it is sent with Dagster's
    own wrapper, in order, in the same process; a command that raises, or that cannot be read, is reported on the
    queue as a system error, and the host exits cleanly once the pipe closes (or after a command it cannot read)."""
    import multiprocessing

    from dagster._core.executor.child_process_executor import (ChildProcessDoneEvent, ChildProcessStartEvent,
                                                               ChildProcessSystemErrorEvent)

    def events(host):
        got = []
        while not got or not isinstance(got[-1], (ChildProcessDoneEvent, ChildProcessSystemErrorEvent)):
            got.append(host.queue.get(timeout=60))
        return got

    host = stephosts.Host(multiprocessing.get_context("forkserver"), max_steps=5)
    try:
        host.send(EchoCommand(1))
        host.send(EchoCommand(10))  # queued behind the first: a host runs one at a time
        first, second = events(host), events(host)
        pid = host.process.pid
        assert [type(e) for e in first] == [ChildProcessStartEvent, tuple, tuple, ChildProcessDoneEvent]
        assert first[1:3] == [("pid", pid, 1), ("pid", pid, 2)] and second[1:3] == [("pid", pid, 10), ("pid", pid, 11)]
        host.send(EchoCommand(20, boom=True))
        third = events(host)
        assert third[1] == ("pid", pid, 20) and isinstance(third[-1], ChildProcessSystemErrorEvent)
        assert "boom 20" in third[-1].error_info.message
        assert host.steps == 3 and host.reusable()
        os.kill(pid, signal.SIGINT)  # between steps (Ctrl-C reaches the process group): ignored, not fatal
        host.send(EchoCommand(30))
        assert events(host)[1:3] == [("pid", pid, 30), ("pid", pid, 31)]
        host.commands.send_bytes(b"not a command")  # reported as that step's error; the host then exits
        assert isinstance(host.queue.get(timeout=60), ChildProcessSystemErrorEvent)
    finally:
        host.retire()
        host.process.join(30)
    assert host.process.exitcode == 0
