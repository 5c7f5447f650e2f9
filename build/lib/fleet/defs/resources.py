"""fleet's settings as Dagster resources: the data repository, the artifact store, the browser and the alerts.

They show on the UI's resources page. Their defaults come from the ``FLEET_*`` environment variables of the
README (:func:`from_settings`); the git token is an ``EnvVar``, so the UI shows its name, never its value."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from dagster import ConfigurableResource, EnvVar

from fleet import config
from fleet.config import Settings
from fleet.engine.settings import EngineSettings
from fleet.secrets import git_token_file
from fleet.storage.open import open_store

TOKEN_VAR = "FLEET_GIT_TOKEN"


class DataRepository(ConfigurableResource):
    """The git repository the week's rows are committed to (Git-LFS parquet under ``prefix``)."""

    remote: str
    """URL or path of the data repository (FLEET_DATA_REMOTE)."""
    branch: str = "main"
    """Branch to commit to (FLEET_DATA_BRANCH)."""
    prefix: str = "data/"
    """The only folder fleet ever changes (FLEET_DATA_PREFIX)."""
    token: Optional[str] = None
    """Token for an https remote (FLEET_GIT_TOKEN, as an EnvVar, when not run by the `fleet` CLI); never logged."""
    token_file: Optional[str] = None
    """A file (0600) holding the token, read only by the step that commits (FLEET_GIT_TOKEN_FILE; the `fleet` CLI
    moves a FLEET_GIT_TOKEN there, out of every process's environment: fleet/secrets.py)."""
    clone_dir: str
    """Where fleet keeps its working clone of the repository."""

    def data_repo(self):
        from fleet.publish import DataRepo

        from fleet.secrets import git_token

        return DataRepo(remote=self.remote, clone_dir=self.clone_dir, branch=self.branch, prefix=self.prefix,
                        token=git_token(self.token, self.token_file))


class ArtifactStore(ConfigurableResource):
    """Where every stage's artifacts live, addressed by week (raw rows, evidence, consolidated and processed)."""

    root: str
    """A local folder or an s3://bucket/prefix URL (FLEET_ARTIFACTS; default FLEET_HOME/artifacts)."""
    cache_dir: str = ""
    """This host's cache of a remote store's objects, and its scratch (FLEET_HOME/cache/artifacts)."""

    def store(self):
        return open_store(self.root, self.cache_dir or None)


class Browser(ConfigurableResource):
    """How sources are scraped: the Chromium binary and the browser hosts that drive it (fleet/engine)."""

    chromium: str = ""
    """The Chromium binary (FLEET_CHROMIUM); empty: the first found, the headless shell first."""
    browser_hosts: str = "warm"
    """warm: browser hosts keep Playwright and Chromium between sources; fresh: a new attempt process per attempt
    (FLEET_BROWSER_HOSTS)."""
    host_idle_s: float = 30.0
    """A browser host with nothing to do leaves after this long (FLEET_BROWSER_HOST_IDLE_S)."""
    host_max_sources: int = 50
    """A browser host leaves after this many sources (FLEET_BROWSER_HOST_MAX_SOURCES)."""
    startup_s: float = 90.0
    """The limit on a new browser host getting its browser up (FLEET_BROWSER_STARTUP_S)."""
    home: str
    """FLEET_HOME: the browser hosts' folder and caches are under it."""
    scrape_cap: int = 0
    """fleet's cap on sources scraping at once, held around each scrape (FLEET_MAX_PARALLEL; fleet/engine/slot.py)."""

    def engine_settings(self) -> EngineSettings:
        from fleet.config import chromium_path, scrape_slots

        # the cap's slots are shared where politeness's bounds are (the broker's Redis under FLEET_EXECUTOR=celery);
        # read here, in the step's process, so its URL is not in the resource's config the UI shows
        return EngineSettings.under(Path(self.home), chromium=self.chromium or chromium_path(),
                                    browser_hosts=self.browser_hosts, idle_s=self.host_idle_s,
                                    max_sources=self.host_max_sources, startup_s=self.startup_s,
                                    scrape_cap=self.scrape_cap,
                                    slots_shared=scrape_slots()["slots_shared"] if self.scrape_cap else "")


class Alerts(ConfigurableResource):
    """Where alerts go: always the log under FLEET_HOME/alerts, and a webhook when set."""

    home: str
    """FLEET_HOME: alerts are logged to alerts/alerts.jsonl under it."""
    webhook: Optional[str] = None
    """URL that receives one JSON POST per alert (FLEET_ALERT_WEBHOOK)."""
    routes: dict[str, str] = {}
    """Owner -> webhook URL or slack:#channel: a source's alerts go to its owner's route (FLEET_ALERT_ROUTES)."""


def from_settings(s: Settings, webhook: str | None = None, routes: dict | None = None) -> dict:
    """The resources for settings ``s``, keyed as the assets ask for them; the alerts' ``webhook`` and ``routes``
    default to FLEET_ALERT_WEBHOOK and FLEET_ALERT_ROUTES. A bad FLEET_ALERT_ROUTES is refused here, as the
    definitions load (every command, the UI and each worker), not at the first alert."""
    from fleet.quality.alerts import parse_routes

    routes = parse_routes(config.alert_routes_text()) if routes is None else routes
    return {
        "data_repo": DataRepository(remote=s.data_remote, branch=s.branch, prefix=s.prefix,
                                    token=EnvVar(TOKEN_VAR) if s.git_token else None, token_file=git_token_file(),
                                    clone_dir=str(s.clone_dir)),
        "artifacts": ArtifactStore(root=s.store_url, cache_dir=str(s.artifact_cache)),
        "browser": Browser(chromium=config.chromium_setting(), browser_hosts=s.browser_hosts,
                           host_idle_s=config.browser_host_idle_s(), host_max_sources=config.browser_host_max_sources(),
                           startup_s=config.browser_startup_s(), home=str(s.home), scrape_cap=s.max_parallel),
        "alerts": Alerts(home=str(s.home), webhook=config.alert_webhook() if webhook is None else webhook,
                         routes=routes),
    }
