"""Settings read from the environment (``FLEET_*``), resolved when asked for, never at import time."""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
from pathlib import Path

from fleet.errors import FleetError
from fleet.weeks import parse_week

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# On top of Playwright's own switches, for every Chromium fleet launches (a worker's own, or the shared one).
CHROMIUM_ARGS = ("--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic")
# Debian's headless shell first: it is the build Playwright's own headless mode runs (chromium-headless-shell).
# The full browser's headless mode builds a browser window per context (tab strip, omnibox and a WebUI renderer
# for its popup): measured here, 4.3 CPU-s against 0.9 for a context that makes ten navigations (BENCHMARKS.md).
CHROMIUM_CANDIDATES = ("/usr/bin/chromium-headless-shell", "/usr/lib/chromium/chromium-headless-shell",
                       "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium",
                       "/usr/bin/google-chrome", "/snap/bin/chromium")


def env_number(name: str, default, cast=float):
    """``FLEET_*`` variable ``name`` as a non-negative ``cast`` (int or float); ``default`` when unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = cast(raw)
    except ValueError:
        kind = "a whole number" if cast is int else "a number"
        raise FleetError(f"{name} must be {kind}, got {raw!r}") from None
    if value < 0:
        raise FleetError(f"{name} must not be negative, got {value}")
    return value


def _int(name: str, default: int) -> int:
    return env_number(name, default, int)


def _start_week() -> str:
    """``FLEET_START_WEEK`` as the partition key of its week: a Monday (2026-01-05) or an ISO week (2026-W02).
    Any other date is refused, not moved: Dagster's weekly partitions would start on the Monday after it."""
    raw = os.environ.get("FLEET_START_WEEK", "").strip() or "2026-01-05"
    try:
        return parse_week(raw).isoformat()
    except ValueError:
        try:
            detail = f", a {dt.date.fromisoformat(raw):%A}"
        except ValueError:
            detail = ""
        raise FleetError(f"FLEET_START_WEEK must be a Monday (2026-01-05) or an ISO week (2026-W02), "
                         f"got {raw!r}{detail}") from None


@dataclasses.dataclass(frozen=True)
class Settings:
    home: Path
    data_remote: str
    branch: str
    prefix: str
    max_parallel: int
    crash_reruns: int
    start_week: str
    git_token: str | None
    browser: str = "own"        # own: a Chromium per worker; shared: a context per source in one Chromium
    workers: str = "warm"       # warm: workers keep Playwright and a browser between sources; fresh: one per attempt
    compute_logs: bool = False  # Dagster's per-step stdout/stderr capture (tail -F + 2 watcher interpreters per step)
    step_headroom: int = 0      # source steps in flight beyond max_parallel (fleet/scraping/slots.py)
    run_monitor_s: int = 30     # how often the daemon checks that started runs' workers live (fleet/defs/launcher.py)

    @property
    def steps_in_flight(self) -> int:
        """Source steps Dagster runs at once (its pool ``scrapers`` and the executor's limit). Only
        ``max_parallel`` of them scrape at a time (fleet/scraping/slots.py); the others start up, or write their
        checks and events, meanwhile."""
        return self.max_parallel + self.step_headroom

    @property
    def slots_dir(self) -> Path:
        return self.home / "slots"

    @property
    def store_root(self) -> Path:
        return self.home / "artifacts"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def clone_dir(self) -> Path:
        return self.home / "clone"

    @property
    def browser_dir(self) -> Path:
        return self.home / "browser"


def settings() -> Settings:
    home = Path(os.environ.get("FLEET_HOME") or (Path.cwd() / ".fleet")).resolve()
    prefix = os.environ.get("FLEET_DATA_PREFIX", "data/").strip()
    if not prefix or prefix.startswith("/") or ".." in Path(prefix).parts:
        raise FleetError(f"FLEET_DATA_PREFIX must be a relative folder inside the repository, got {prefix!r}")
    if not prefix.endswith("/"):
        prefix += "/"
    # Sharing is opt-in: under load a shared Chromium sometimes took no screenshot of a failed page at all.
    browser = os.environ.get("FLEET_BROWSER", "own").strip() or "own"
    if browser not in ("shared", "own"):
        raise FleetError(f"FLEET_BROWSER must be 'shared' or 'own', got {browser!r}")
    workers = os.environ.get("FLEET_WORKERS", "warm").strip() or "warm"
    if workers not in ("warm", "fresh"):
        raise FleetError(f"FLEET_WORKERS must be 'warm' or 'fresh', got {workers!r}")
    max_parallel = max(1, _int("FLEET_MAX_PARALLEL", 10))
    return Settings(
        home=home,
        data_remote=os.environ.get("FLEET_DATA_REMOTE") or str(home / "data-remote.git"),
        branch=os.environ.get("FLEET_DATA_BRANCH", "main"),
        prefix=prefix,
        max_parallel=max_parallel,
        crash_reruns=_int("FLEET_CRASH_RERUNS", 2),
        start_week=_start_week(),
        git_token=os.environ.get("FLEET_GIT_TOKEN") or None,
        browser=browser,
        workers=workers,
        compute_logs=os.environ.get("FLEET_COMPUTE_LOGS", "0") == "1",
        # half a wave: 4, 5 and 10 of headroom at a cap of 10 measured the same (BENCHMARKS.md), 2 slower
        step_headroom=_int("FLEET_STEP_HEADROOM", max(1, max_parallel // 2)),
        run_monitor_s=max(1, _int("FLEET_RUN_MONITOR_S", 30)),
    )


def chromium_path() -> str:
    """``FLEET_CHROMIUM`` if set, else the first Chromium found on this machine."""
    explicit = os.environ.get("FLEET_CHROMIUM")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise FleetError(f"FLEET_CHROMIUM={explicit!r} is not an executable file")
        return explicit
    for cand in CHROMIUM_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise FleetError("no Chromium found: install Debian's 'chromium-headless-shell' (or 'chromium') package or set "
                     "FLEET_CHROMIUM to its path")


def scraper_dirs() -> list[Path]:
    """``FLEET_SCRAPERS_DIR`` (os.pathsep-separated) if set, else the project's ``scrapers/``
    (plus ``scrapers/faults`` when ``FLEET_DEMO_FAULTS=1``)."""
    raw = os.environ.get("FLEET_SCRAPERS_DIR")
    if raw:
        return [Path(p).resolve() for p in raw.split(os.pathsep) if p]
    dirs = [PROJECT_ROOT / "scrapers"]
    if os.environ.get("FLEET_DEMO_FAULTS") == "1":
        dirs.append(PROJECT_ROOT / "scrapers" / "faults")
    return dirs
