"""The version of the code a run is planned with, and the refusal of a step by a worker whose code differs.

A Celery worker runs whatever fleet and scrapers it was started with. If a host was not updated, it would scrape
with last week's scraper and store rows under this week's run. The run's executor tags the run with the version
of its own code (:data:`TAG`); every step compares its own, and a step whose worker differs fails as ``infra``
naming both versions, so it runs again on a worker that matches and never with the wrong code."""
from __future__ import annotations

import functools
import hashlib
import socket
from pathlib import Path

from fleet.config import PROJECT_ROOT, scraper_dirs

TAG = "fleet/code_version"


@functools.lru_cache(maxsize=None)
def _digest(folders: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for folder in folders:
        base = Path(folder)
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            h.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def code_version() -> str:
    """A digest of fleet's package and the scrapers' modules (FLEET_SCRAPERS_DIR), as this process sees them."""
    return _digest((str(PROJECT_ROOT / "fleet"), *(str(d) for d in scraper_dirs())))


def mismatch(run_tags: dict, step: str) -> str | None:
    """Why this process must not execute ``step`` of a run with ``run_tags``; None when the code matches."""
    planned = run_tags.get(TAG)
    mine = code_version()
    if planned is None or planned == mine:
        return None
    return (f"step {step} refused on {socket.gethostname()}: this worker runs fleet code {mine}, the run was planned "
            f"with {planned}; update the worker (fleet and scrapers) to the planner's version")
