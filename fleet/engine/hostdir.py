"""A browser host's files in the hosts' folder, and the flock that says which step holds it.

Per host ``ID``: ``ID.lock`` (held by the step using the host; taken without waiting, so one host serves
one source at a time), ``ID.pid``, ``ID.sock`` (the host's socket, created once its browser is up) and
``ID.log`` (what it writes between sources). A host being started has only ``.ID.lock`` until its starter
renames it into place, already locked.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

KINDS = ("lock", "pid", "sock", "log")


def paths(directory: Path, wid: str) -> dict[str, Path]:
    return {k: directory / f"{wid}.{k}" for k in KINDS}


def remove(directory: Path, wid: str) -> None:
    for path in paths(directory, wid).values():
        path.unlink(missing_ok=True)


def read_pid(directory: Path, wid: str) -> int | None:
    try:
        return int((directory / f"{wid}.pid").read_text())
    except (OSError, ValueError):
        return None


def host_ids(directory: Path) -> list[str]:
    """The hosts of ``directory``, by their ``ID.lock`` files, in name order. A host being started (``.ID.lock``)
    is left out: pathlib's ``*`` matches names beginning with a dot, and a step that locked such a file in the
    instant before its starter did would take it for a dead host and clear it away."""
    if not directory.is_dir():
        return []
    return sorted(p.name[:-len(".lock")] for p in directory.glob("*.lock") if not p.name.startswith("."))


def try_lock(directory: Path, wid: str) -> int | None:
    """The host's lock, taken without waiting: its descriptor (closing it unlocks), or None if another process
    holds it or the host's files are gone."""
    lock = directory / f"{wid}.lock"
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(lock).st_ino:  # cleared away while we opened it
            raise FileNotFoundError(lock)
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    return fd
