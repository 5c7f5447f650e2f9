"""The host-level settings a source attempt runs with: which Chromium, where browser hosts live, how long they stay."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from fleet.errors import FleetError

HOST_MODES = ("warm", "fresh")


HOSTS_DIR = "browser-hosts"  # under FLEET_HOME: the browser hosts' pid files, sockets and lock


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """What :func:`fleet.engine.runner.run_source` needs of its host, passed in rather than read from the
    environment, so the Dagster layer can build it from a resource and a test from its own values.

    chromium     the Chromium executable every attempt process launches (Debian's headless shell by default)
    hosts_dir    the browser hosts' folder (``FLEET_HOME/browser-hosts``): their lock, pid, socket and log files
    browser_hosts ``warm``: browser hosts keep Playwright and their browser between sources; ``fresh``: an
                 attempt process of its own per attempt
    idle_s       a browser host with nothing to do leaves after this many seconds
    max_sources  a browser host leaves after this many sources
    startup_s    the limit on a new attempt process getting its browser up (the source's own limit starts after it)
    node_cache   NODE_COMPILE_CACHE for Playwright's Node.js driver (None: Node's default)
    scrape_cap   fleet's cap on sources scraping at once (FLEET_MAX_PARALLEL), held around each scrape only
                 (fleet/engine/slot.py); 0: no cap of fleet's own (the caller bounds its sources itself)
    slots_shared the Redis URL that holds the cap's slots for every host (FLEET_EXECUTOR=celery), or "" for this
                 host's lock files under FLEET_HOME/slots
    """

    chromium: str
    hosts_dir: Path
    browser_hosts: str = "warm"
    idle_s: float = 30.0
    max_sources: int = 50
    startup_s: float = 90.0
    node_cache: Path | None = None
    scrape_cap: int = 0
    slots_shared: str = ""

    def __post_init__(self):
        if self.browser_hosts not in HOST_MODES:
            raise FleetError(f"browser_hosts must be 'warm' or 'fresh', got {self.browser_hosts!r}")
        for name, minimum in (("idle_s", 0), ("startup_s", 1), ("max_sources", 1), ("scrape_cap", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < minimum:
                raise FleetError(f"{name} must be a number of at least {minimum}, got {value!r}")

    @classmethod
    def from_env(cls, home: Path | None = None) -> "EngineSettings":
        """From the ``FLEET_*`` variables (FLEET_CHROMIUM, FLEET_BROWSER_HOSTS, FLEET_BROWSER_HOST_IDLE_S,
        FLEET_BROWSER_HOST_MAX_SOURCES, FLEET_BROWSER_STARTUP_S) and ``home`` (default: FLEET_HOME)."""
        from fleet import config

        if home is None:
            home = config.settings().home
        return cls.under(home, chromium=config.chromium_path(), browser_hosts=config.browser_hosts(),
                         idle_s=config.browser_host_idle_s(), max_sources=config.browser_host_max_sources(),
                         startup_s=config.browser_startup_s(), **config.scrape_slots())

    @classmethod
    def under(cls, home: Path, **values) -> "EngineSettings":
        """These settings with the engine's folders under FLEET_HOME ``home``: its browser hosts' and its cache."""
        return cls(hosts_dir=home / HOSTS_DIR, node_cache=home / "cache" / "node", **values)

    @property
    def slots_dir(self) -> Path:
        """This host's scrape slots (fleet/engine/slot.py): ``FLEET_HOME/slots``."""
        return self.hosts_dir.parent / "slots"
