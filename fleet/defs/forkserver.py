"""`fleet run`'s forkserver, forked from `fleet run`'s own process once that process is warm.

Dagster's multiprocess executor forks each step from Python's forkserver. Python starts that server as a new
interpreter, which then imports its preload list (``fleet.defs.warm``: Dagster, its storages, fleet's
definitions, Playwright) on its own. `fleet run` has imported all of that already, to create and execute the
run. So the same imports ran twice, at the same moment, on a 2-core machine: about 2.5 CPU-s per run, and
the week's first step waited for the slower of the two.

:func:`fork_server` instead warms the calling process (``fleet.defs.warm``), forks it, and runs Python's own
forkserver loop (``multiprocessing.forkserver.main``) in the child, with nothing left to preload. The
parent records the server exactly as ``ForkServer.ensure_running`` would, so the executor finds it running
and sends it its steps. What a step process is and does is unchanged: it is still a fork of one warm server,
which unpickles its own process object and takes its instance (fleet/defs/stepinstance.py); since 2026-12-05
it may go on to run the run's next steps (fleet/defs/stephosts.py).

It forks only a single-threaded process (a fork keeps only the calling thread, and any lock another thread
held would stay locked in the copy). Anything else, or any error, leaves the caller on Python's own start.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading


def fork_server() -> int | None:
    """Fork this process into the forkserver of its multiprocessing context; return the server's pid, or None
    (nothing started) if this process has other threads. A server already running is kept."""
    from multiprocessing import connection, forkserver, resource_tracker, util

    fs = forkserver._forkserver
    with fs._lock:
        if fs._forkserver_pid is not None:
            pid, _ = os.waitpid(fs._forkserver_pid, os.WNOHANG)
            if not pid:
                return fs._forkserver_pid
            os.close(fs._forkserver_alive_fd)
            fs._forkserver_address = fs._forkserver_alive_fd = fs._forkserver_pid = None
        if threading.active_count() > 1:
            return None
        from fleet.defs import stepinstance, warm  # the server's preload: this process becomes the template
        stepinstance.prebuild()  # each step takes a copy instead of building its own (fleet/defs/stepinstance.py)
        resource_tracker.ensure_running()  # as ensure_running does: steps inherit the tracker's fd
        warm.freeze_inherited_heap()  # what this process built since warm was imported is frozen too
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # or the server would write out a copy of what is buffered
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")
            listener.bind(address)
            if not util.is_abstract_socket_namespace(address):
                os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the server
                code = 0
                try:
                    os.close(alive_w)  # the server sees EOF on alive_r when its last client has gone
                    _reset_signal_handlers()
                    forkserver.main(listener.fileno(), alive_r, [])  # nothing to preload: all imported
                except SystemExit:
                    pass
                except BaseException:
                    code = 1
                    sys.excepthook(*sys.exc_info())
                    sys.stderr.flush()
                finally:
                    os._exit(code)
            os.close(alive_r)
        fs._forkserver_address = address
        fs._forkserver_alive_fd = alive_w
        fs._forkserver_pid = pid
    return pid


def _reset_signal_handlers() -> None:
    """A spawned server starts with Python's default handlers; a forked one would keep the caller's. Steps are
    forked from the server, so they would keep them too."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGINT, signal.SIGCHLD):  # forkserver.main sets these itself
            continue
        try:
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass
