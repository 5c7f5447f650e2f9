"""Failures of the artifact store that are the storage's fault and may recover (``infra``): the disk under it full,
the object store not answering, each named in one line."""
from __future__ import annotations

import os
from pathlib import Path

DISK_FULL = (28, 122)  # ENOSPC, EDQUOT


def mount_of(path: str | Path) -> str:
    """The mount point of the file system ``path`` is on: the disk a message names."""
    p = Path(path).absolute()
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return str(p)


def disk_full(exc: BaseException, near: str | Path) -> str | None:
    """``disk full at <mount point>`` when ``exc`` is a write that found no space (ENOSPC, or a quota), on the
    disk of the file it names or else of ``near``; None for any other error."""
    if not (isinstance(exc, OSError) and exc.errno in DISK_FULL):
        return None
    return f"disk full at {mount_of(exc.filename or near)} ({exc.strerror})"


def storage_failure(exc: BaseException, store) -> str | None:
    """One line naming what failed when fleet's own read or write of ``store`` raised ``exc``, when it is the
    storage's fault and may recover (infra): the disk under it is full, or the object store does not answer.
    None for anything else."""
    local = getattr(store, "cache_dir", None) or store.url  # a remote store's scratch is on this host's disk
    full = disk_full(exc, local)
    if full:
        return full
    if type(exc).__module__.split(".")[0] in ("botocore", "aiobotocore", "aiohttp"):  # s3fs's transport
        lines = str(exc).strip().splitlines()
        return f"the artifact store {store.url} is unreachable: {type(exc).__name__}: {lines[0] if lines else ''}"
    return None
