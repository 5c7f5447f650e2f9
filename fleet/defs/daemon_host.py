"""The supervisor of a Dagster daemon that a fleet command starts for its own duration (fleet/defs/daemon.py):

    python -m fleet.defs.daemon_host --parent PID --home DAGSTER_HOME --log PATH|- -- COMMAND...

It dies with the command (PID): the kernel sends it SIGTERM when the thread of PID that started it ends
(``PR_SET_PDEATHSIG``), and COMMAND dies with it the same way, so a command killed with -9 leaves no daemon behind.
Its client starts it in a process group of its own, which COMMAND's code server, run workers and their steps share:
on SIGTERM, SIGINT or SIGHUP it sends the group SIGTERM, gives it 20 s, then SIGKILLs what is left, and exits. When
COMMAND exits by itself it stops the rest of the group the same way and exits with COMMAND's code. COMMAND's output
goes to the log PATH (appended), or with ``-`` where the supervisor's goes.

While it lives it holds a ``lockf`` on ``DAGSTER_HOME/.fleet-daemon.lock`` (``--home``), with who it is written in it: that is how
another fleet command tells that a daemon fleet started lives. Standard library only (no Dagster), so it starts
in a few tens of milliseconds."""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time

LOCK = ".fleet-daemon.lock"
GRACE_S = 20.0  # what the group gets between SIGTERM and SIGKILL: a run worker writes its steps' failures meanwhile
TAKEN = 75      # exit code when another process holds the lock
STOPS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
WAITED = STOPS | {signal.SIGCHLD}


def die_with_parent(parent: int) -> None:
    """SIGTERM to this process when ``parent`` ends; exit now if it already has (it may end before the prctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, signal.SIGTERM, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(1)


def group_members(pgid: int) -> list[int]:
    """The live processes of group ``pgid`` but this one, from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(name))
    return found


def stop_group(child: subprocess.Popen) -> None:
    """SIGTERM to this process group; after GRACE_S, SIGKILL to what is left of it. Returns once it is empty."""
    pgid = os.getpgrp()
    os.killpg(pgid, signal.SIGTERM)  # this process has it blocked: it stays pending and is never delivered
    deadline = time.monotonic() + GRACE_S
    while True:
        child.poll()  # reap the command, or it stays a member as a zombie... of ours, which group_members skips
        left = group_members(pgid)
        if not left:
            return
        if time.monotonic() > deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = float("inf")
        time.sleep(0.1)


def supervise(parent: int, home: str, log: str, command: list[str]) -> int:
    signal.pthread_sigmask(signal.SIG_BLOCK, WAITED)  # taken below with sigtimedwait, never by a handler
    die_with_parent(parent)
    if log != "-":
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    started = time.time()
    lock = open(os.path.join(home, LOCK), "a+")
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print(f"fleet daemon_host: {lock.name} is held by another process; not starting a second daemon",
              file=sys.stderr)
        return TAKEN

    def say(**more) -> None:
        lock.seek(0)
        lock.truncate(0)
        lock.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "start": started,
                               "kind": "command", "log": log, **more}))
        lock.flush()

    say()
    if log != "-":  # where this start's lines begin
        print(f"fleet daemon_host {os.getpid()}: {' '.join(command)}", flush=True)
    child = subprocess.Popen([sys.executable, "-m", "fleet.defs.daemon_host", "--exec", str(os.getpid()), "--",
                              *command], stdin=subprocess.DEVNULL)
    while True:
        got = signal.sigtimedwait(WAITED, 1.0)
        code = child.poll()
        if got is not None and got.si_signo in STOPS:
            code = 0
            break
        if code is not None:
            code = code if code >= 0 else 128 - code
            break
    say(stopping=True)  # a command arriving now waits for the lock rather than use this daemon
    stop_group(child)
    lock.truncate(0)
    return code


def main(argv: list[str]) -> int:
    if argv[:1] == ["--exec"]:  # the command, as a child that dies with the supervisor
        die_with_parent(int(argv[1]))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WAITED)  # inherited from the supervisor; the command needs them
        os.execvp(argv[3], argv[3:])
    try:
        split = argv.index("--")
        opts = dict(zip(argv[:split:2], argv[1:split:2]))
        parent, home, log, command = int(opts["--parent"]), opts["--home"], opts["--log"], argv[split + 1:]
        assert command
    except (ValueError, KeyError, AssertionError):
        print("usage: python -m fleet.defs.daemon_host --parent PID --home DAGSTER_HOME --log PATH|- -- COMMAND...",
              file=sys.stderr)
        return 2
    return supervise(parent, home, log, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
