"""Step hosts: a step process that finished a step cleanly runs the run's next step, one step at a time.

Dagster's multiprocess executor starts a new process for every step (``execute_child_process_command``: a
fork of the forkserver, which has fleet's definitions, Dagster and Playwright loaded; fleet/defs/warm.py). A
forked step pays for being new: it copies every page of the inherited heap it touches (Python writes
reference counts, ~7,700 page faults at ~3 us each on the 2-core machine of BENCHMARKS.md), builds its
Dagster instance, opens its event log connection and fills SQLAlchemy's statement cache, then exits and
returns it all. Measured with ``getrusage`` around each step's execution, 40 zero-page sources: 155 ms of CPU
(114 user, 41 system); the same command executed again in the same process used 88 ms (78 user, 10 system, 430
page faults), and 71 ms once the host also kept its instance and connection (BENCHMARKS.md).

So a process that ran a step here goes on to run the next one Dagster launches, up to ``FLEET_STEP_REUSE``
steps (20 by default; 1 = a new process for every step, Dagster's own way). The guarantees of one process per
step hold because a host runs one step at a time and is reused only after a clean end:

- A step whose process crashes (SIGKILL, OOM) takes down only that process, which was running that step
  alone. Dagster sees its process die with the step unfinished and reports a crash, as before; the retry
  policy re-executes the step, in another host.
- A step that ends in a system error (an exception outside the step's own handling, or an interrupt when the
  run is terminated) is the host's last: its process exits, and the next step gets a fresh fork.
- Scrapers never run in a host: they run in workers (fleet/scraping), so a scraper that leaks threads,
  patches modules or corrupts the interpreter cannot reach the next source's step. What a host runs is
  Dagster and fleet's runner, which Dagster's in-process executor also runs step after step in one process.
- The next step's command carries the same objects Dagster would give a new process: the run, the step key,
  the known state and the step's own termination event (pickled as multiprocessing does at a process's start).

A host is a forkserver child, started as Dagster starts a step (``ctx.Process``) with a pipe it reads
commands from and a queue it puts every step's events on; Dagster's loop reads that queue through
:func:`execute_child_process_command` exactly as it reads a new process's queue. It exits when the pipe
closes: at the end of the executor's run (:func:`close_run`, called by fleet's executor wrapper), or when the
run process exits. It is one more of fleet's patches of Dagster's internals (the others are in
fleet/defs/warm.py, executor.py, stepinstance.py and runconfig.py); it applies only inside a run of fleet's
executor, with the forkserver start method, and falls back to Dagster's own function otherwise.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading

from fleet.config import step_reuse

log = logging.getLogger(__name__)

_lock = threading.Lock()
_idle: list["Host"] = []
_busy: set["Host"] = set()  # running a step now
_open_runs = {"count": 0}
_original = {}


class _CommandSpawning:
    """Stands in for the spawning ``Popen`` while a step's command is pickled for a host that is already
    running: multiprocessing lets a process's start pickle its semaphores (the step's termination event is
    shared by name, as at a process's start), and refuses it otherwise. A command never carries a file
    descriptor; one that did is refused here, not passed."""

    def duplicate_for_child(self, fd):
        raise TypeError("a step's command for a step host cannot carry a file descriptor")

    DupFd = duplicate_for_child  # multiprocessing.reduction.DupFd looks this up first


def _dumps(command) -> bytes:
    from multiprocessing import context, reduction

    context.set_spawning_popen(_CommandSpawning())
    try:
        return bytes(reduction.ForkingPickler.dumps(command))
    finally:
        context.set_spawning_popen(None)


class Host:
    """A step host as seen from the run process: its process, the pipe its commands go down, its event queue."""

    def __init__(self, ctx, max_steps: int):
        self.queue = ctx.Queue()
        reader, self.commands = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=host_main, args=(reader, self.queue), name="fleet-step-host")
        self.process.start()
        reader.close()
        self.steps = 0
        self.max_steps = max_steps

    def send(self, command) -> None:
        self.commands.send_bytes(_dumps(command))
        self.steps += 1

    def reusable(self) -> bool:
        return self.steps < self.max_steps and self.process.is_alive()

    def end_after_step(self) -> None:
        """The host exits once its step is done (at once, if idle); its events can still be read. Never waits."""
        try:
            self.commands.close()
        except OSError:
            pass

    def retire(self) -> None:
        """No more steps, and no more reading its events: the host exits once it is done. Never waits."""
        self.end_after_step()
        try:
            self.queue.close()
        except OSError:
            pass


def host_main(commands, event_queue) -> None:
    """A host's loop: each command is one step, run by Dagster's own wrapper (its start, its events, its end on
    the queue), until the run process closes the pipe."""
    import signal
    import sys
    from multiprocessing import reduction

    from dagster._core.executor.child_process_executor import (ChildProcessSystemErrorEvent,
                                                               _execute_command_in_child_process)
    from dagster._utils.error import serializable_error_info_from_exc_info

    from fleet.defs import stepinstance

    stepinstance.keep()  # the host's steps share one instance: built before the fork, kept open between steps
    # Between steps, an interrupt (Ctrl-C reaches the whole process group; Dagster's termination thread may
    # signal a step just as it ends) must not kill the host with the next step already sent to it: a step is
    # interrupted as before, under Dagster's own handler (``capture_interrupts``), which puts this one back.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            payload = commands.recv_bytes()
        except (EOFError, OSError, KeyboardInterrupt):  # the run process is done with this host, or gone
            return
        try:
            command = reduction.ForkingPickler.loads(payload)
        except Exception:  # noqa: BLE001  (reported as the step's error, as a new process would report it)
            error = serializable_error_info_from_exc_info(sys.exc_info())
            event_queue.put(ChildProcessSystemErrorEvent(pid=os.getpid(), error_info=error))
            return
        del payload
        _execute_command_in_child_process(event_queue, command)
        del command


def _usable(ctx) -> bool:
    try:
        return ctx.get_start_method() == "forkserver"
    except Exception:  # noqa: BLE001  (not a multiprocessing context: Dagster's own way)
        return False


def _take(ctx) -> Host:
    with _lock:
        while _idle:
            host = _idle.pop()
            if host.reusable():
                _busy.add(host)
                return host
            host.retire()
    return _new(ctx)


def _new(ctx) -> Host:
    host = Host(ctx, step_reuse())
    with _lock:
        _busy.add(host)
    return host


def _give_back(host: Host, clean: bool) -> None:
    with _lock:
        _busy.discard(host)
        if clean and _open_runs["count"] > 0 and host.reusable():
            _idle.append(host)
            return
    host.retire()


def execute_child_process_command(multiprocessing_ctx, command):
    """Dagster's ``execute_child_process_command`` (same arguments, same yields: the process, then every event
    the step puts on its queue, and ``ChildProcessCrashException`` if the process dies first), on a step host."""
    from dagster._core.executor import child_process_executor as cpe

    if not _open_runs["count"] or not _usable(multiprocessing_ctx) or step_reuse() <= 1:
        yield from _original["execute_child_process_command"](multiprocessing_ctx, command)
        return
    host = _take(multiprocessing_ctx)
    try:
        host.send(command)
    except OSError:  # it died while idle: this step goes to a new one
        _give_back(host, clean=False)
        host = _new(multiprocessing_ctx)
        host.send(command)
    clean = False
    try:
        yield host.process
        while True:
            event = cpe._poll_for_event(host.process, host.queue)  # fleet's poll, once executor.install has run
            if event == cpe.PROCESS_DEAD_AND_QUEUE_EMPTY:
                raise cpe.ChildProcessCrashException(pid=host.process.pid, exit_code=host.process.exitcode)
            yield event
            if isinstance(event, cpe.ChildProcessDoneEvent):
                clean = True
                return
            if isinstance(event, cpe.ChildProcessSystemErrorEvent):
                return
    finally:
        _give_back(host, clean)


def open_run() -> None:
    """An executor of fleet's starts a run's plan: steps launched until :func:`close_run` may use hosts."""
    with _lock:
        _open_runs["count"] += 1


def close_run(every: bool = False) -> None:
    """The executor is done with its plan (``every``: the process is exiting, before multiprocessing joins its
    children): once no run is open, idle hosts exit, and so does each busy one once its step is done. A host is
    busy here only if the executor ended with steps in flight (it failed, and interrupted them): without this,
    such a host would wait for a next step for ever, and the process's exit would wait for the host."""
    with _lock:
        _open_runs["count"] = 0 if every else max(0, _open_runs["count"] - 1)
        if _open_runs["count"]:
            return
        idle, busy = list(_idle), list(_busy)
        _idle.clear()
    for host in idle:
        host.retire()
    for host in busy:
        host.end_after_step()


def install() -> bool:
    """Route the multiprocess executor's ``execute_child_process_command`` through this module; False if
    Dagster's layout has moved (steps then get a process each, as before)."""
    try:
        from dagster._core.executor import child_process_executor as cpe
        from dagster._core.executor import multiprocess

        current = multiprocess.execute_child_process_command
        cpe._execute_command_in_child_process, cpe.ChildProcessDoneEvent  # noqa: B018  (needed by hosts)
        cpe.ChildProcessSystemErrorEvent, cpe.ChildProcessCrashException  # noqa: B018
    except (ImportError, AttributeError) as exc:  # pragma: no cover - only if Dagster's layout changes
        log.warning("fleet: every step gets a process of its own (%s)", exc)
        return False
    if getattr(current, "_fleet_hosts", False):
        return True
    _original["execute_child_process_command"] = current
    execute_child_process_command._fleet_hosts = True
    multiprocess.execute_child_process_command = execute_child_process_command
    atexit.register(close_run, every=True)
    return True
