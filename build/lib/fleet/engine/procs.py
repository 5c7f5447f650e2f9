"""Process-tree helpers for the runner (killing an attempt process) and the browser hosts, read from /proc."""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path

from fleet import config


# A unix socket's address holds at most 107 bytes (sun_path is 108 with its NUL).
SOCKET_PATH_MAX = 107


@contextlib.contextmanager
def unix_address(path: Path):
    """``path`` as an address an AF_UNIX socket can bind or connect to, however deep its folder is.

    The browser hosts' sockets live under ``FLEET_HOME``; a home of more than ~73 bytes made
    their full path too long for a socket (``OSError: AF_UNIX path too long``), so no attempt process could start and
    every source failed as infra. A path that does not fit is reached through the folder's descriptor instead,
    ``/proc/self/fd/N/NAME``: the socket file is created, or found, in the folder itself."""
    text = str(path)
    if len(os.fsencode(text)) <= SOCKET_PATH_MAX:
        yield text
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def stat_fields(pid: int | str) -> list[str] | None:
    """``/proc/PID/stat`` from its third field on (the state, the parent's pid, ...; ``proc(5)`` numbers them
    from 1, so field N is ``[N - 3]`` here), or None when there is no such process. The command name (field 2) is
    in parentheses and may hold spaces or ')', so the split is after the last one.

    Read with ``os.open``/``os.read``, not ``open()``: a scan of /proc reads this for every process on the
    machine (~150 during a week), and a text file object cost twice the time (27 against 12-14 us a process)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)  # the whole file: a few hundred bytes
    except OSError:
        return None
    finally:
        os.close(fd)
    _, paren, rest = data.rpartition(b")")
    return rest.decode("ascii", "replace").split() if paren else None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def _processes() -> dict[int, tuple[str, int, int]]:
    """Every process now, from one scan of /proc: pid -> (state, parent's pid, process group)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(entry)
            try:
                out[int(entry)] = (fields[0], int(fields[1]), int(fields[2]))
            except (TypeError, IndexError, ValueError):
                continue
    return out


def _descendants_in(processes: dict[int, tuple[str, int, int]], pid: int) -> list[int]:
    """``pid``'s descendants in a :func:`_processes` table (children first found, then theirs)."""
    children: dict[int, list[int]] = {}
    for p, (_, parent, _) in processes.items():
        children.setdefault(parent, []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):  # the parent links form a tree: each is walked once
            out.append(c)
            todo.append(c)
    return out


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, read from /proc (children first found, then theirs)."""
    return _descendants_in(_processes(), pid)


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (zombies excluded), read from /proc."""
    return [p for p, (state, _, group) in _processes().items() if group == pgid and state != "Z"]


def group_and_descendants(pid: int) -> dict[int, int]:
    """The live processes (zombies excluded) of ``pid``'s process group and its live descendants, each with its
    process group id, from one scan of /proc. A descendant that left the group (``setsid``,
    ``start_new_session``) is still a descendant while its parent lives."""
    processes = _processes()
    found = {p for p, (_, _, group) in processes.items() if group == pid}
    found.update(_descendants_in(processes, pid))
    return {p: processes[p][2] for p in found if processes[p][0] != "Z"}


def kill_pids(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``, every descendant (Playwright's driver; Chromium, which Playwright starts in a group of its
    own) and ``pid``'s process group."""
    kill_pids([pid, *descendants(pid)])
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _start_time(pid: int | str) -> str | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22): with the pid, it names one
    process, even after the pid is reused."""
    fields = stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


# The system's temporary folder, read before any private_tmp of this process points TMPDIR elsewhere.
_SYSTEM_TMP = tempfile.gettempdir()
# Chromium's full build puts its singleton socket at TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket and
# exits if that path is longer than a unix socket's 107 bytes.
MAX_TMPDIR_LEN = 60


def tmp_base(owner: Path, uid: int | None = None) -> Path:
    """Where the processes of ``owner`` (a ``FLEET_HOME/browser-hosts`` folder) running as ``uid`` (default: this
    process's) keep their :func:`private_tmp` folders: a short path in the system's temporary folder, named after
    ``owner``. Not under ``FLEET_HOME``: a deep ``FLEET_HOME`` would make Chromium's singleton socket path too long."""
    digest = hashlib.sha256(str(owner.resolve()).encode()).hexdigest()[:12]
    return Path(_SYSTEM_TMP) / f"fleet-{os.getuid() if uid is None else uid}-{digest}"


def private_tmp(base: Path) -> Path | None:
    """Give this process a temporary directory of its own, ``base/PID-STARTTIME``, and point ``TMPDIR`` at it, so that
    what it starts from now on writes there: Playwright's driver creates each browser's profile
    (``playwright_chromiumdev_profile-*``) and artifacts folder (``playwright-artifacts-*``) under it. The driver
    removes them when the browser closes; when the process is killed instead (a timeout, a crash, ``fleet run``
    stopping its idle browser hosts), nothing would, and each such browser left ~0.2 MB in /tmp for good.
    :func:`sweep_tmp` removes the directories of processes that are gone.

    Returns None, and leaves ``TMPDIR`` alone, if ``base`` is not a directory of this user's (someone else
    created it first) or the path would be too long for Chromium (``MAX_TMPDIR_LEN``)."""
    own = base / f"{os.getpid()}-{_start_time(os.getpid())}"
    if len(str(own)) > MAX_TMPDIR_LEN:
        return None
    for _ in range(3):
        try:
            base.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.lstat(base)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                return None
            shutil.rmtree(own, ignore_errors=True)
            own.mkdir(mode=0o700)
            break
        except FileNotFoundError:  # a sweep removed the empty base meanwhile
            continue
        except OSError:  # not writable, or a file in its place: the system's TMPDIR, as before
            return None
    else:
        return None
    config.export(TMPDIR=str(own))
    tempfile.tempdir = None  # Python's own temporary files follow TMPDIR too
    return own


def sweep_tmp(base: Path, killed=()) -> int:
    """Remove the :func:`private_tmp` directories under ``base`` whose process is gone, or is one of ``killed`` (just
    sent SIGKILL, so about to be); return how many."""
    try:
        entries = list(os.scandir(base))
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        pid, _, started = entry.name.partition("-")
        if not (pid.isdigit() and started and entry.is_dir(follow_symlinks=False)):
            continue
        if int(pid) not in killed and alive(int(pid)) and _start_time(pid) == started:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    with contextlib.suppress(OSError):
        base.rmdir()  # only if nothing is left in it
    return removed
