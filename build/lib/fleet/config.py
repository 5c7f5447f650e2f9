"""Settings read from the environment (``FLEET_*``, and the few others fleet honours), resolved when asked for,
never at import time. The one module that reads ``os.environ`` (fleet_tests/test_settings_home.py holds that): a
child process gets its environment from :func:`process_env`."""
from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import difflib
import functools
import importlib.util
import json
import math
import os
import re
import shutil
import socket
from pathlib import Path

from fleet.errors import FleetError
from fleet.weeks import Deadline, parse_deadline, parse_week

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

# Case-insensitive substrings of a page's HTML that mark a bot wall (fleet/scraping/blocked.py): FLEET_BLOCK_MARKERS
# replaces them, a scraper's ``block_markers`` adds its own. Specific: "captcha" alone is on many login forms.
DEFAULT_MARKERS = ("g-recaptcha", "h-captcha", "cf-challenge", "cf-turnstile", "challenge-platform",
                   "are you a robot", "unusual traffic from your", "verify you are human", "fleet-demo-captcha")


# Read through fleet/secrets.py's values_of: named here so that known_settings() finds it.
GIT_TOKEN_FILE = "FLEET_GIT_TOKEN_FILE"
# fleet reads nothing under these: the variables of its own test suite's and benchmarks' scrapers.
RESERVED_PREFIXES = ("FLEET_TEST_", "FLEET_BENCH_")
_SETTING_NAME = re.compile(r"FLEET_[A-Z0-9_]*[A-Z0-9]")


@functools.cache
def known_settings() -> frozenset[str]:
    """Every ``FLEET_*`` name this module reads or names (its string constants, old names included, which
    :func:`_renamed` refuses with their new name): a setting added here is known without a second list to keep."""
    tree = ast.parse(Path(__file__).read_text(), __file__)
    return frozenset(node.value for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)
                     and _SETTING_NAME.fullmatch(node.value))


def check_names() -> None:
    """Refuse a ``FLEET_*`` variable fleet does not know, naming the closest known one: a mistyped setting would
    otherwise be ignored without a word, and its default used."""
    known = known_settings()
    for name in sorted(os.environ):
        if name.startswith("FLEET_") and name not in known and not name.startswith(RESERVED_PREFIXES):
            # compared without the prefix that all share, which would make any two names look alike
            close = difflib.get_close_matches(name[6:], sorted(k[6:] for k in known), n=1)
            raise FleetError(f"unknown setting {name} (did you mean FLEET_{close[0]}?)" if close else
                             f"unknown setting {name}: no setting of fleet's is near it; unset it (README, "
                             "Configuration, lists them)")


def _text(name: str) -> str:
    return os.environ.get(name, "").strip()


def env_number(name: str, default, cast=float, minimum=0):
    """``FLEET_*`` variable ``name`` as a ``cast`` (int or float) of at least ``minimum``; ``default`` when unset
    or empty. Anything else is a FleetError naming the variable, never a silent clamp."""
    raw = _text(name)
    if not raw:
        return default
    try:
        value = cast(raw)
    except ValueError:
        kind = "a whole number" if cast is int else "a number"
        raise FleetError(f"{name} must be {kind}, got {raw!r}") from None
    if math.isnan(value):
        raise FleetError(f"{name} must be a number, got {raw!r}")
    if value < minimum:
        raise FleetError(f"{name} must not be negative, got {raw}" if minimum == 0
                         else f"{name} must be at least {minimum}, got {raw}")
    return value


def env_flag(name: str) -> bool:
    """``FLEET_*`` on/off variable ``name``: 1/true/yes/on or 0/false/no/off (any case); off when unset or empty."""
    raw = _text(name).lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise FleetError(f"{name} must be 1 or 0, got {os.environ[name]!r}")


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = _text(name) or default
    if raw not in choices:
        raise FleetError(f"{name} must be {' or '.join(repr(c) for c in choices)}, got {raw!r}")
    return raw


def process_env(**overrides: str | None) -> dict[str, str]:
    """A copy of this process's environment for a child process, with ``overrides`` (None removes one)."""
    env = {**os.environ, **{k: str(v) for k, v in overrides.items() if v is not None}}
    return {k: v for k, v in env.items() if overrides.get(k, "") is not None}


def export(overwrite: bool = True, **values: str | None) -> None:
    """Set (None: remove) variables of this process's environment: what later reads here and every child see.
    ``overwrite=False`` leaves a variable already set as it is."""
    os.environ.update({k: str(v) for k, v in values.items() if v is not None and (overwrite or k not in os.environ)})
    for name in [k for k, v in values.items() if v is None]:
        os.environ.pop(name, None)


def replace_env(env: dict[str, str]) -> None:
    """This process's whole environment replaced by ``env``: a browser host taking on the next source's."""
    os.environ.clear()
    os.environ.update(env)


def require_extra(module: str, extra: str, needed_by: str) -> None:
    """Refuse, in one line, a setting whose optional library is not installed, naming the extra that brings it."""
    if importlib.util.find_spec(module) is None:
        raise FleetError(f"{needed_by} needs {module.replace('_', '-')}, which is not installed: "
                         f"pip install 'fleet[{extra}]'")


def demo_url() -> str:  # "" when the demo sites are not running
    return _text("FLEET_DEMO_URL")


def demo_state_dir() -> Path | None:  # the demo sites' modes.json, shared by the processes that serve them
    return Path(raw) if (raw := _text("FLEET_DEMO_STATE_DIR")) else None


def demo_latency_ms() -> float:
    return env_number("FLEET_DEMO_LATENCY_MS", 50.0)


def data_remote_set() -> bool:  # else the demo's own data repository under FLEET_HOME, which only `fleet demo` makes
    return bool(_text("FLEET_DATA_REMOTE"))


def scrapers_dir_set() -> bool:  # else the bundled demo scrapers run, which need the demo sites
    return bool(_text("FLEET_SCRAPERS_DIR"))


def alert_webhook(url: str | None = None, setting: str = "FLEET_ALERT_WEBHOOK") -> str | None:
    url = _text("FLEET_ALERT_WEBHOOK") if url is None else url.strip()
    if url and not url.lower().startswith(("http://", "https://")):  # else every alert's POST would fail
        raise FleetError(f"{setting} must be an http:// or https:// URL, got {url!r}")
    return url or None


def alert_slack() -> str | None:  # a Slack channel, through dagster-slack (the slack extra) and FLEET_SLACK_TOKEN
    return _text("FLEET_ALERT_SLACK") or None


def slack_token() -> str | None:
    return _text("FLEET_SLACK_TOKEN") or None


def _check_slack() -> None:
    if alert_slack():
        require_extra("dagster_slack", "slack", "FLEET_ALERT_SLACK")
        if not slack_token():
            raise FleetError("FLEET_ALERT_SLACK needs FLEET_SLACK_TOKEN, the token of a Slack app that may post there")


def schedule_cron() -> str | None:  # the weekly schedule's cron, UTC (fleet/defs/automation.py); None: Mondays 06:00
    return _text("FLEET_SCHEDULE") or None


def freshness_deadline() -> Deadline:  # when a week's raw commit is due (`fleet freshness`)
    return parse_deadline(_text("FLEET_FRESHNESS_DEADLINE"), "FLEET_FRESHNESS_DEADLINE")


def parse_markers(raw, setting: str) -> tuple[str, ...]:
    """``raw`` (a JSON list as text, or a list) as a tuple of lowercased non-empty strings, else a FleetError
    naming ``setting``."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        value = None
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(m, str) and m.strip() for m in value)):
        raise FleetError(f"{setting} must be a non-empty JSON list of non-empty strings "
                         f"(e.g. [\"g-recaptcha\", \"are you a robot\"]), got {raw!r}")
    return tuple(m.strip().lower() for m in value)


def block_markers() -> tuple[str, ...]:
    raw = _text("FLEET_BLOCK_MARKERS")
    return parse_markers(raw, "FLEET_BLOCK_MARKERS") if raw else DEFAULT_MARKERS


def sandbox_user() -> str:  # who scrape processes run as when fleet runs as root
    return _text("FLEET_SANDBOX_USER") or "nobody"


def sandbox_switch() -> str:  # "off": scrape without the browser sandbox where it cannot be had (said, and tagged)
    return env_choice("FLEET_SANDBOX", "on", ("on", "off"))


def chromium_sandbox() -> bool:  # set by fleet/scraping/sandbox.py in a scrape process's environment, not by users
    return _text("FLEET_CHROMIUM_SANDBOX") == "1"


def worker_name() -> str:  # a `fleet worker`'s Celery node name (worker@host), set by it; else the machine
    return _text("FLEET_WORKER_NAME") or socket.gethostname()


def dagster_home() -> Path | None:
    return Path(raw) if (raw := _text("DAGSTER_HOME")) else None


def aws_endpoint_url() -> str | None:  # boto reads it too; fleet names it in errors and passes it to s3fs
    return _text("AWS_ENDPOINT_URL") or None


def has_display() -> bool:  # a graphical session (X11 or Wayland): `fleet debug` opens the trace viewer in it
    return bool(_text("DISPLAY") or _text("WAYLAND_DISPLAY"))


def values_of(names) -> dict[str, str]:  # those of the variables ``names`` set here, by name (fleet/secrets.py)
    return {n: _text(n) for n in names if _text(n)}


def git_author() -> tuple[str | None, str | None]:  # set (even empty), git's own identity wins over fleet's default
    return os.environ.get("GIT_AUTHOR_NAME"), os.environ.get("GIT_AUTHOR_EMAIL")


def git_config_count() -> int:  # config entries already given to git through the environment: fleet's go after
    return env_number("GIT_CONFIG_COUNT", 0, int)


def _renamed(old: str, new: str) -> None:  # a setting under its old name would otherwise be ignored without a word
    if old in os.environ:
        raise FleetError(f"{old} is now called {new}; set {new} instead")


# Read where they are used (the browser hosts and the runner), and checked by settings() before anything
# runs: a bad value used to surface only inside each attempt process, as every source failing as infra.
def browser_hosts() -> str:
    _renamed("FLEET_WORKERS", "FLEET_BROWSER_HOSTS")
    return env_choice("FLEET_BROWSER_HOSTS", "warm", ("warm", "fresh"))


def browser_host_idle_s() -> float:
    _renamed("FLEET_WORKER_IDLE_S", "FLEET_BROWSER_HOST_IDLE_S")
    return env_number("FLEET_BROWSER_HOST_IDLE_S", 30.0)


def browser_host_max_sources() -> int:
    _renamed("FLEET_WORKER_MAX_SOURCES", "FLEET_BROWSER_HOST_MAX_SOURCES")
    return env_number("FLEET_BROWSER_HOST_MAX_SOURCES", 50, int, minimum=1)


def browser_startup_s() -> float:
    return env_number("FLEET_BROWSER_STARTUP_S", 90.0, minimum=1)


def trace_mode() -> str:  # an attempt's Playwright trace is kept when it fails (default), always, or not recorded
    return env_choice("FLEET_TRACE", "failed", ("failed", "always", "off"))


def alert_routes_text() -> str:  # owner -> webhook URL or slack:#channel, as JSON (fleet/quality/alerts.py)
    return _text("FLEET_ALERT_ROUTES")


def politeness() -> dict:
    """Per domain, across the sources that reach it: at most ``concurrency`` navigations at once, at least
    ``interval_s`` seconds between their starts (fleet/scraping/politeness.py). ``shared``: where the bounds are
    kept for every host once fleet scales out (the broker's Redis under FLEET_EXECUTOR=celery), else ""."""
    celery = _text("FLEET_EXECUTOR") == "celery"
    return {"concurrency": env_number("FLEET_DOMAIN_CONCURRENCY", 4, int, minimum=1),
            "interval_s": env_number("FLEET_DOMAIN_INTERVAL_S", 0.0),
            "shared": _text("FLEET_CELERY_BROKER") if celery else ""}


def scrape_slots() -> dict:
    """FLEET_MAX_PARALLEL as the cap fleet/engine/slot.py holds, its slots shared where politeness's bounds are."""
    return {"scrape_cap": env_number("FLEET_MAX_PARALLEL", 10, int, minimum=1), "slots_shared": politeness()["shared"]}


def start_week(raw: str | None = None, setting: str = "FLEET_START_WEEK") -> str:
    """``FLEET_START_WEEK`` (or ``raw``) as the partition key of its week: a Monday (2026-01-05) or an ISO week
    (2026-W02). Any other date is refused, not moved: Dagster's weekly partitions would start on the Monday after it."""
    raw = (_text("FLEET_START_WEEK") if raw is None else raw.strip()) or "2026-01-05"
    try:
        return parse_week(raw).isoformat()
    except ValueError:
        try:
            detail = f", a {dt.date.fromisoformat(raw):%A}"
        except ValueError:
            detail = ""
        raise FleetError(f"{setting} must be a Monday (2026-01-05) or an ISO week (2026-W02), "
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
    browser_hosts: str = "warm"  # warm: browser hosts keep Playwright and Chromium between sources; fresh: one per attempt
    compute_logs: bool = False  # Dagster's per-step stdout/stderr capture (tail -F + 2 watcher interpreters per step)
    run_monitor_s: int = 30     # how often the daemon checks that started runs' run workers live (fleet/defs/runworker.py)
    executor: str = "multiprocess"  # multiprocess: steps on this machine; celery: on `fleet worker`s (fleet/defs/celery.py)
    celery_broker: str = ""     # FLEET_CELERY_BROKER, e.g. redis://host:6379/0
    celery_backend: str = ""    # FLEET_CELERY_BACKEND; default: the broker
    worker_concurrency: int = 10  # sources one `fleet worker` scrapes at once (its host's cap)
    worker_lost_s: float = 30.0   # a worker holding steps that answers no ping this long is dead (fleet/defs/celery.py)
    postgres_url: str = ""      # FLEET_POSTGRES_URL: written into a new dagster.yaml as the instance's storage
    artifacts: str = ""         # FLEET_ARTIFACTS: where the artifact store is (a folder or s3://bucket/prefix)

    @property
    def store_root(self) -> Path:
        """The default store: a folder under FLEET_HOME."""
        return self.home / "artifacts"

    @property
    def store_url(self) -> str:
        """The artifact store every stage, host and command uses (fleet/storage/open.py ``open_store``)."""
        return self.artifacts or str(self.store_root)

    @property
    def artifact_cache(self) -> Path:
        """This host's cache of a remote store's objects and its scratch (work folders): disposable."""
        return self.home / "cache" / "artifacts"

    dagster_home = property(lambda self: self.home / "dagster")
    clone_dir = property(lambda self: self.home / "clone")


def _check_home(home: Path) -> None:
    """FLEET_HOME must be a folder, or one that can be made: not a file, nor under one, nor read-only."""
    if home.exists() and not home.is_dir():
        raise FleetError(f"FLEET_HOME {home} exists and is not a folder")
    existing = next(p for p in (home, *home.parents) if p.exists())
    if not existing.is_dir():
        raise FleetError(f"FLEET_HOME {home} cannot be a folder: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise FleetError(f"FLEET_HOME {home} is not writable ({existing} is not)")


def _artifacts() -> str:
    """FLEET_ARTIFACTS: empty (the default folder), an absolute folder, or an s3://bucket/prefix URL."""
    raw = _text("FLEET_ARTIFACTS")
    if not raw or raw.startswith("s3://"):
        return raw.rstrip("/")
    if "://" in raw:
        raise FleetError(f"FLEET_ARTIFACTS must be a folder or an s3://bucket/prefix URL, got {raw!r}")
    return str(Path(raw).resolve())


def settings() -> Settings:
    check_names()
    home = Path(os.environ.get("FLEET_HOME") or (Path.cwd() / ".fleet")).resolve()
    _check_home(home)
    prefix = data_prefix(os.environ.get("FLEET_DATA_PREFIX", "data/"))
    workers = browser_hosts()
    max_parallel = env_number("FLEET_MAX_PARALLEL", 10, int, minimum=1)
    for check in (browser_host_idle_s, browser_host_max_sources, browser_startup_s, block_markers, politeness,
                  freshness_deadline, alert_webhook, _check_slack, trace_mode, demo_latency_ms, git_config_count):
        check()
    return Settings(
        home=home,
        data_remote=os.environ.get("FLEET_DATA_REMOTE") or str(home / "data-remote.git"),
        branch=_text("FLEET_DATA_BRANCH") or "main",
        prefix=prefix,
        max_parallel=max_parallel,
        crash_reruns=env_number("FLEET_CRASH_RERUNS", 2, int),
        start_week=start_week(),
        git_token=os.environ.get("FLEET_GIT_TOKEN") or None,
        browser_hosts=workers,
        compute_logs=env_flag("FLEET_COMPUTE_LOGS"),
        run_monitor_s=env_number("FLEET_RUN_MONITOR_S", 30, int, minimum=1),
        **_distributed(),
        artifacts=_artifacts(),
    )


def data_prefix(raw: str, setting: str = "FLEET_DATA_PREFIX") -> str:
    prefix = raw.strip()
    if not prefix or prefix.startswith("/") or ".." in Path(prefix).parts:
        raise FleetError(f"{setting} must be a relative folder inside the repository, got {prefix!r}")
    return prefix if prefix.endswith("/") else prefix + "/"


def _distributed() -> dict:
    """The settings of the distributed stack (README, "Running on more than one machine"), checked as a whole:
    the celery executor needs a broker it can name."""
    executor = env_choice("FLEET_EXECUTOR", "multiprocess", ("multiprocess", "celery"))
    broker = _text("FLEET_CELERY_BROKER")
    backend = _text("FLEET_CELERY_BACKEND") or broker
    for name, url in (("FLEET_CELERY_BROKER", broker), ("FLEET_CELERY_BACKEND", backend)):
        if url and not url.startswith(("redis://", "rediss://")):
            raise FleetError(f"{name} must be a redis:// or rediss:// URL, got {url!r}")
    if executor == "celery":
        require_extra("dagster_celery", "distributed", "FLEET_EXECUTOR=celery")
        if not broker:
            raise FleetError("FLEET_EXECUTOR=celery needs FLEET_CELERY_BROKER, the Redis URL the workers listen on "
                             "(e.g. redis://127.0.0.1:6379/0)")
    postgres = _text("FLEET_POSTGRES_URL")
    if postgres and not postgres.startswith(("postgresql://", "postgres://")):
        raise FleetError(f"FLEET_POSTGRES_URL must be a postgresql:// URL, got {postgres!r}")
    return dict(executor=executor, celery_broker=broker, celery_backend=backend,
                worker_concurrency=env_number("FLEET_WORKER_CONCURRENCY", 10, int, minimum=1),
                worker_lost_s=env_number("FLEET_WORKER_LOST_S", 30.0, minimum=5), postgres_url=postgres)


def chromium_setting() -> str:
    return _text("FLEET_CHROMIUM")


def chromium_path() -> str:
    """``FLEET_CHROMIUM`` if set, else the first Chromium found on this machine."""
    explicit = chromium_setting()
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise FleetError(f"FLEET_CHROMIUM={explicit!r} is not an executable file")
        return explicit
    for cand in CHROMIUM_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    raise FleetError("no Chromium found: install Debian's 'chromium-headless-shell' (or 'chromium') package or set "
                     "FLEET_CHROMIUM to its path")


def scraper_dirs() -> list[Path]:
    """``FLEET_SCRAPERS_DIR`` (os.pathsep-separated) if set, else the project's ``scrapers/``
    (plus ``scrapers/faults`` when ``FLEET_DEMO_FAULTS=1``)."""
    raw = _text("FLEET_SCRAPERS_DIR")
    if raw:
        return folders([Path(p) for p in raw.split(os.pathsep) if p], "FLEET_SCRAPERS_DIR")
    dirs = [PROJECT_ROOT / "scrapers"]
    if env_flag("FLEET_DEMO_FAULTS"):
        dirs.append(PROJECT_ROOT / "scrapers" / "faults")
    return dirs


def folders(paths: list[Path], setting: str) -> list[Path]:
    """``paths`` resolved, each a folder that exists, else a FleetError naming ``setting``."""
    dirs = [p.resolve() for p in paths]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:  # otherwise a typo is a week of zero sources
        raise FleetError(f"{setting} names no folder at {', '.join(missing)}")
    return dirs
