"""Scrape slots: at most ``FLEET_MAX_PARALLEL`` sources hold a browser at once, across every run of a ``FLEET_HOME``.

A Dagster step per source does more than scrape: its process starts, its checks run and its events are written
(about 1.4 s of a slot per source on the 2-core machine of BENCHMARKS.md). If Dagster's pool were the only cap,
a source's scraping could start only once the step before it had done all of that and its process had exited.
So Dagster's pool ``scrapers`` admits more steps than the cap (``FLEET_STEP_HEADROOM`` more, by default half
as many again: the sources of a wave finish within seconds of each other, and each that finishes lets Dagster
start another step; see ``Settings.steps_in_flight``), and the cap itself is held here, around the part of a step that uses a worker and
its browser: the next source starts scraping while the last one writes its checks. A step waiting for a slot
is an idle process; it logs how long it waited once it has one.

A slot is an flock on ``slot-N.lock`` in ``FLEET_HOME/slots``, for N below the cap, taken without waiting and
tried again every ``poll_s``. A waiting step opens the lock files once, so a try is one ``flock`` per slot (it
reopened them all on every try: ~1 CPU-s in a 40-source week at cap 10, measured). The kernel releases a slot
when its holder exits, however it exits, so a crashed step never keeps a slot.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import random
import time
from pathlib import Path
from typing import Iterator


def _open_slots(directory: Path, cap: int, first: int) -> list[int]:
    """A descriptor for each slot's lock file, ``first`` first: opened once per wait, not on every try."""
    fds: list[int] = []
    try:
        for i in range(cap):
            fds.append(os.open(directory / f"slot-{(first + i) % cap}.lock", os.O_CREAT | os.O_RDWR, 0o600))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def _try_slot(fds: list[int]) -> int | None:
    """The first of ``fds`` whose slot is free, now locked; None if every slot is held."""
    for fd in fds:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue
        return fd
    return None


def _resumer_waiting(resume_fd: int) -> bool:
    """Whether an attempt that resumes a crashed one is waiting (it holds ``resume.lock`` shared meanwhile)."""
    try:
        fcntl.flock(resume_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(resume_fd, fcntl.LOCK_UN)
    return False


@contextlib.contextmanager
def scrape_slot(directory: Path, cap: int, *, resuming: bool = False, poll_s: float = 0.05) -> Iterator[float]:
    """Hold one of ``cap`` slots of ``directory`` for the duration of the block; yields the seconds waited.

    An attempt that resumes a crashed one (``resuming``) goes first: while it waits, it holds ``resume.lock``
    shared, and the others do not take a free slot. A crashed source's step is re-executed after its slot has
    gone to a waiting step; without this, it would wait for the slot after that, and its second half would
    run after the rest of the week."""
    directory.mkdir(parents=True, exist_ok=True)
    cap = max(1, int(cap))
    began = time.monotonic()
    first = random.randrange(cap)  # waiters spread over the slots instead of all probing slot 0 first
    resume_fd = os.open(directory / "resume.lock", os.O_CREAT | os.O_RDWR, 0o600)
    fd = None
    candidates: list[int] = []
    try:
        candidates = _open_slots(directory, cap, first)
        if resuming:
            fcntl.flock(resume_fd, fcntl.LOCK_SH)
        while fd is None:
            if resuming or not _resumer_waiting(resume_fd):
                fd = _try_slot(candidates)
            if fd is None:
                time.sleep(poll_s)
    finally:
        os.close(resume_fd)  # unlocks
        for other in candidates:
            if other != fd:
                os.close(other)
    try:
        yield time.monotonic() - began
    finally:
        os.close(fd)  # unlocks
