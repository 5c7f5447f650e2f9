"""Running an attempt in its process and holding it to its hard limit: start a process or lease a browser host,
relay its output to the run's log, kill it (with its driver and browser) at the limit, and clean up after it."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from fleet import config
from fleet.engine import pool, sandbox
from fleet.engine.spec import Attempt
from fleet.engine.procs import group_members, kill_pids, kill_tree, sweep_tmp
from fleet.engine.settings import EngineSettings

# An attempt's output lines logged to the run (each one an event); the rest go to output-ATTEMPT.log by its rows.
MAX_LOG_LINES = 500
MAX_LINE_CHARS = 2000
DUMP_WAIT_S = 1.0
READY_POLL_S = 0.05  # how often a step looks for its attempt process's ready file
SUPERVISE_WAIT_S = 1.0  # the longest a step waits on a ready process before it looks at the clock


@dataclasses.dataclass
class Supervised:
    """How the attempt process's run of an attempt ended, as the step saw it."""

    timed_out: bool = False        # killed at the source's limit
    startup_failed: bool = False   # killed at the browser's start-up limit
    seconds: float = 0.0           # from the moment the browser was up (or the process started, if it never was)
    exit_reason: str = ""


def start(attempt: Attempt, settings: EngineSettings, warm: bool):
    """The process for ``attempt`` and how it came (for the log): a leased browser host that has taken the attempt,
    or a new interpreter for this attempt alone. Raises ``pool.HostStartError``."""
    spec_path = attempt.write_spec()
    box = sandbox.for_attempt(settings, attempt.spec["module_path"])
    home = sandbox.prepare(box, settings)
    # the attempt's own folders: its rows, result and progress files (next to earlier attempts'), its evidence
    # and the folder a HAR is recorded into
    har = attempt.spec.get("record_har")
    sandbox.hand_over(box, attempt.work, Path(attempt.spec["evidence_dir"]), *([Path(har).parent] if har else []))
    env = sandbox.attempt_env(config.process_env(), box, home)
    if not warm:
        proc = subprocess.Popen(sandbox.command(box, [sys.executable, "-m", "fleet.engine.attempt", str(spec_path)]),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, errors="replace", start_new_session=True, env=env)
        return proc, "an attempt process of its own"
    proc = pool.lease(settings, box)
    try:
        proc.start(spec_path, env, os.getcwd())  # a browser host takes on this step's world
    except OSError as exc:
        proc.release()
        raise pool.HostStartError(f"browser host {proc.pid} went away before it took the source ({exc})") from exc
    return proc, "a new browser host" if proc.new else f"a browser host's source no. {proc.served + 1}"


def supervise(proc, attempt: Attempt, *, how: str, timeout: float, startup_s: float,
              log_line: Callable[[str], None], prefix: str) -> Supervised:
    """Wait for the process to finish the attempt, killing it at ``startup_s`` without a browser or ``timeout``
    after its browser was up; then clear what it left. Gives a leased browser host back whatever happens."""
    started = time.monotonic()
    out = Supervised()
    try:
        log_line(f"{prefix} attempt in process {proc.pid} ({how}; limit {timeout:g}s)")
        pump_thread = threading.Thread(target=_pump, args=(proc, attempt.path("output_path"), log_line, prefix),
                                       daemon=True)
        pump_thread.start()
        ready_at = None
        try:
            # The limit runs from the moment the browser is up; start-up itself has its own, generous limit.
            while proc.poll() is None:
                now = time.monotonic()
                if ready_at is None and attempt.path("ready_path").exists():
                    ready_at = now
                if ready_at is None and now - started > startup_s:
                    out.startup_failed = True
                    break
                if ready_at is not None and now - ready_at > timeout:
                    out.timed_out = True
                    dump_stack(proc, attempt.path("stack_path"))  # what it is stuck in, before it is killed
                    break
                # Until the process is ready, look for its ready file every 50 ms; after that, nothing is left to
                # watch but its end and the limit, so wait for whichever comes first.
                wait_s = (READY_POLL_S if ready_at is None
                          else min(ready_at + timeout - now + 0.01, SUPERVISE_WAIT_S))
                try:
                    proc.wait(timeout=max(wait_s, 0.01))
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if proc.poll() is None:
                kill_tree(proc.pid)  # the attempt process with its driver and browser
                proc.wait()
        out.seconds = round(time.monotonic() - (ready_at or started), 3)
        out.exit_reason = exit_reason(proc)
        if not isinstance(proc, pool.Lease):  # reaped by now; a killed one's browser profile is left behind
            left = group_members(proc.pid)  # its session's group: what a scraper started and left running
            if left:
                kill_pids(left)
                log_line(f"{prefix} the scraper left process(es) {', '.join(map(str, left))} running after its "
                         f"attempt process ended; killed")
            sweep_tmp(Path(attempt.spec["tmp_root"]), killed=(proc.pid,))
        pump_thread.join(timeout=2)
    finally:  # whatever went wrong on the way, the step gives back what it took
        if isinstance(proc, pool.Lease):
            proc.release()
    return out


def _pump(proc, output_path: Path, log_line, prefix: str) -> None:
    """Relay the process's output lines to the run's log. Each line is an event (~1 ms each, and the process waits on
    its pipe meanwhile): a scraper printing 20,000 lines used up 18 s of its 20 s limit. Past MAX_LOG_LINES, or
    MAX_LINE_CHARS, the attempt's output goes whole to a file next to its rows instead."""
    shown, overflow = 0, None
    try:
        for line in proc.stderr:
            line = line.rstrip()
            if not line:
                continue
            if shown >= MAX_LOG_LINES or len(line) > MAX_LINE_CHARS:
                if overflow is None:
                    overflow = open(output_path, "a", encoding="utf-8", errors="replace")
                overflow.write(line + "\n")
                if shown >= MAX_LOG_LINES:
                    continue
                line = f"{line[:MAX_LINE_CHARS]} ... ({len(line) - MAX_LINE_CHARS} more characters in {output_path})"
            shown += 1
            log_line(line if line.startswith("[run ") else f"{prefix} {line}")
            if shown == MAX_LOG_LINES:
                log_line(f"{prefix} {MAX_LOG_LINES} lines of output logged; the rest of this attempt's output goes "
                         f"to {output_path}")
    finally:
        if overflow is not None:
            overflow.close()


def dump_stack(proc, stack_path: Path) -> None:
    """Ask an attempt process at its hard limit for the Python stacks of its threads (SIGUSR1: the process registers
    faulthandler for it while its source runs, fleet/engine/evidence.py), and wait up to ``DUMP_WAIT_S`` for
    them. faulthandler writes from its signal handler, so this works while the scraper blocks its event loop."""
    try:
        os.kill(proc.pid, signal.SIGUSR1)
    except OSError:
        return
    deadline, size = time.monotonic() + DUMP_WAIT_S, -1
    while time.monotonic() < deadline and proc.poll() is None:
        now = stack_path.stat().st_size if stack_path.exists() else 0
        if now and now == size:  # written, and no longer growing
            return
        size = now
        time.sleep(0.05)


def exit_reason(proc) -> str:
    if isinstance(proc, pool.Lease):
        return proc.exit_reason()
    code = proc.returncode
    return f"killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
