"""fleet as a Dagster component: one fleet (its scrapers, data repository, schedule, cap, crash budget and alerts)
from a ``defs.yaml``, every setting left out taken from fleet's environment settings (fleet/config.py). fleet's
own definitions are one instance of it (fleet/defs/fleets/fleet/defs.yaml); ``dg scaffold defs`` writes another.

Nothing but the component is public at module level here: ``dg`` lists every component class this module holds
(the ``dagster_dg_cli.registry_modules`` entry point in pyproject.toml)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Optional

from dagster import (
    AssetSelection, Component, ComponentLoadContext, Definitions, Model, Resolvable, Resolver, Scaffolder,
    ScaffoldRequest, define_asset_job, in_process_executor, multiprocess_executor, scaffold_with,
)

from fleet import config
from fleet.config import PROJECT_ROOT, Settings
from fleet.defs.automation import SCHEDULE_CRON
from fleet.errors import FleetError
from fleet.weeks import Deadline, parse_deadline

# What each step process of a multiprocess run is forked from: a server that has imported these once, so a step
# starts with Dagster, Playwright, polars and the definitions already in memory (Dagster's documented
# ``start_method: forkserver: preload_modules``). The last freezes what the first imported.
PRELOAD = ("fleet.defs.definitions", "fleet.defs.preloaded")
# In another project fleet cannot name the module its code location loads from; importing fleet's own
# definitions there would build fleet's checkout fleet instead, so only the component's imports are preloaded.
PRELOAD_ELSEWHERE = ("fleet.defs.component", "fleet.defs.preloaded")


@dataclasses.dataclass(frozen=True)
class FleetSpec:
    """One fleet as :func:`build_defs` builds it: fleet's settings, and what else a team sets per fleet."""

    settings: Settings
    scrapers: tuple[Path, ...]
    freshness: Deadline
    schedule: str = SCHEDULE_CRON
    schedule_running: bool = False
    alert_webhook: Optional[str] = None
    alert_routes: dict = dataclasses.field(default_factory=dict)
    preload: tuple[str, ...] = PRELOAD

    @classmethod
    def from_env(cls, s: Settings | None = None) -> "FleetSpec":
        from fleet.quality.alerts import parse_routes

        return cls(settings=s or config.settings(), scrapers=tuple(config.scraper_dirs()),
                   freshness=config.freshness_deadline(), schedule=config.schedule_cron() or SCHEDULE_CRON,
                   alert_webhook=config.alert_webhook(),
                   alert_routes=parse_routes(config.alert_routes_text()))


class FleetScaffolder(Scaffolder):
    """``dg scaffold defs fleet.defs.component.FleetComponent NAME``: a ``defs.yaml`` that loads as written, and
    a ``scrapers/`` folder beside it holding one source that visits no page, to be replaced by the team's own."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        folder = request.target_path
        (folder / "scrapers").mkdir(parents=True, exist_ok=True)
        example = folder / "scrapers" / "example.py"
        if not example.exists():
            example.write_text(EXAMPLE_SCRAPER)
        (folder / "defs.yaml").write_text(DEFS_YAML.format(type=request.type_name))


def _about(description: str) -> Resolver:  # an attribute's description in the component's YAML schema
    return Resolver.default(description=description)


@scaffold_with(FleetScaffolder)
class FleetComponent(Component, Model, Resolvable):
    """A weekly fleet of Playwright scrapers: a raw asset per source, consolidation, the Git-LFS commits, their
    checks, sensors and schedule. An attribute left out is fleet's environment setting named in its description."""

    scrapers: Annotated[Optional[list[str]], _about(
        "Folders of scraper modules, relative to this defs.yaml's folder (FLEET_SCRAPERS_DIR).")] = None
    data_remote: Annotated[Optional[str], _about(
        "URL or path of the data repository the weeks are committed to (FLEET_DATA_REMOTE).")] = None
    data_branch: Annotated[Optional[str], _about(
        "Its branch (FLEET_DATA_BRANCH).")] = None
    data_prefix: Annotated[Optional[str], _about(
        "The only folder fleet changes in it (FLEET_DATA_PREFIX).")] = None
    start_week: Annotated[Optional[str], _about(
        "The first week: a Monday (2026-01-05) or an ISO week (2026-W02) (FLEET_START_WEEK).")] = None
    schedule: Annotated[Optional[str], _about(
        f"Cron of the weekly run, UTC, for the week that ended before it (FLEET_SCHEDULE; {SCHEDULE_CRON!r}).")] = None
    schedule_running: Annotated[bool, _about(
        "Whether the schedule is on when first loaded (else it is turned on in the UI).")] = False
    max_parallel: Annotated[Optional[int], _about(
        "The cap on sources scraping at once (FLEET_MAX_PARALLEL).")] = None
    crash_reruns: Annotated[Optional[int], _about(
        "The crash budget: re-runs of a source whose attempt crashed, per week (FLEET_CRASH_RERUNS).")] = None
    freshness_deadline: Annotated[Optional[str], _about(
        "When a week's raw commit is due, e.g. 'mon 12:00' (FLEET_FRESHNESS_DEADLINE).")] = None
    alert_webhook: Annotated[Optional[str], _about(
        "An http(s) URL receiving one JSON POST per alert (FLEET_ALERT_WEBHOOK).")] = None
    alert_routes: Annotated[Optional[dict[str, str]], _about(
        "Owner (an email or team:NAME) -> webhook URL or slack:#channel (FLEET_ALERT_ROUTES).")] = None

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        here = Path(context.path)
        folder = here if here.is_dir() else here.parent
        own = Path(context.project_root).resolve() == PROJECT_ROOT
        return build_defs(spec=self.spec(folder, PRELOAD if own else PRELOAD_ELSEWHERE))

    def spec(self, folder: Path, preload: tuple[str, ...] = PRELOAD) -> FleetSpec:
        """This fleet's attributes over the environment's settings; os.environ is read, never written. A bad
        attribute is one FleetError naming it and its defs.yaml."""
        base = FleetSpec.from_env()  # a bad FLEET_* variable is named as such, not as the YAML's fault
        try:
            return self._spec(folder, preload, base)
        except FleetError as exc:
            raise FleetError(f"{folder / 'defs.yaml'}: {exc}") from None

    def _spec(self, folder: Path, preload: tuple[str, ...], base: FleetSpec) -> FleetSpec:
        from fleet.quality.alerts import parse_routes

        s = base.settings
        for name in ("max_parallel", "crash_reruns"):
            value = getattr(self, name)
            if value is not None and value < (1 if name == "max_parallel" else 0):
                raise FleetError(f"{name} must be at least {1 if name == 'max_parallel' else 0}, got {value}")
        s = dataclasses.replace(
            s, **{k: v for k, v in {
                "data_remote": self.data_remote,
                "branch": self.data_branch and self.data_branch.strip(),
                "prefix": None if self.data_prefix is None else config.data_prefix(self.data_prefix, "data_prefix"),
                "start_week": None if self.start_week is None else config.start_week(self.start_week, "start_week"),
                "max_parallel": self.max_parallel, "crash_reruns": self.crash_reruns}.items() if v not in (None, "")})
        return dataclasses.replace(
            base, settings=s, preload=preload, schedule=self.schedule or base.schedule,
            schedule_running=self.schedule_running,
            scrapers=(tuple(config.folders([folder / p for p in self.scrapers], "scrapers"))
                      if self.scrapers is not None else base.scrapers),
            freshness=(parse_deadline(self.freshness_deadline, "freshness_deadline")
                       if self.freshness_deadline is not None else base.freshness),
            alert_webhook=(config.alert_webhook(self.alert_webhook, "alert_webhook")
                           if self.alert_webhook is not None else base.alert_webhook),
            alert_routes=(parse_routes(json.dumps(self.alert_routes), "alert_routes")
                          if self.alert_routes is not None else base.alert_routes))


def build_defs(s: Settings | None = None, spec: FleetSpec | None = None) -> Definitions:
    """The definitions of one fleet: ``spec``, else the environment's (with settings ``s`` when given)."""
    from fleet.defs.assets import PUBLISH_GROUP, RAW_GROUP, partitions, publish_assets, raw_assets
    from fleet.defs.automation import build_automation
    from fleet.defs.canary import build_canary
    from fleet.defs.executor import fleet_executor
    from fleet.defs.freshness import freshness_checks
    from fleet.defs.requests import build_requests_sensor, location_settings, requests_spec
    from fleet.defs.resources import from_settings
    from fleet.scraping.discovery import discover

    spec = spec or FleetSpec.from_env(s)
    s = spec.settings
    sources = discover(list(spec.scrapers))
    parts = partitions(s.start_week)
    raw = raw_assets(sources, parts, s.crash_reruns)
    fresh, fresh_job, fresh_schedule = freshness_checks([a.key for a in raw], spec.freshness, s.start_week)
    publish = publish_assets(sources, parts)
    # the freshness checks judge the due week on their own schedule, never inside a week's scrape
    scrape_job = define_asset_job("scrape_week", selection=AssetSelection.groups(RAW_GROUP) - AssetSelection.checks(*fresh),
                                  description="Scrape every source for one week (raw/<source> assets).")
    # The publish stage is four steps in a chain on stored artifacts: they run one after another in the run's
    # process. A crash loses nothing, since each step's result is persisted and the raw commit lands before
    # post-processing starts.
    publish_job = define_asset_job("publish_week", selection=AssetSelection.groups(PUBLISH_GROUP),
                                   description="Consolidate, commit raw, post-process, commit processed.",
                                   executor_def=fleet_executor(in_process_executor))
    resources = from_settings(s, webhook=spec.alert_webhook, routes=spec.alert_routes)
    sensors, schedules = build_automation(scrape_job, publish_job, s.crash_reruns, resources["artifacts"],
                                          cron=spec.schedule, running=spec.schedule_running)
    # how a command has the daemon run a week (fleet/defs/requests.py)
    requests = build_requests_sensor(scrape_job, publish_job, [a.key.path[-1] for a in raw],
                                     location_settings(s, spec.scrapers))
    canary_job, canary_schedule = build_canary(sources)
    return Definitions(assets=[*raw, *publish, requests_spec(parts)], asset_checks=fresh,
                       jobs=[scrape_job, publish_job, canary_job, fresh_job], sensors=[*sensors, requests],
                       schedules=[*schedules, canary_schedule, fresh_schedule], executor=scrape_executor(s, spec.preload),
                       resources=resources)


def scrape_executor(s: Settings, preload: tuple[str, ...] = PRELOAD):
    """The executor of the scrape job, chosen by FLEET_EXECUTOR. ``multiprocess`` (the default): a process per
    source step on this machine, as many at once as the scrapers pool admits (fleet/defs/instance.py checks its
    limit is ``pool_limit(FLEET_MAX_PARALLEL)``, above the cap: fleet's own slots hold the cap around each scrape,
    fleet/engine/slot.py). ``celery``: each step is a task for the `fleet worker`s on FLEET_CELERY_BROKER, the
    same pool and slots (in the broker's Redis) across all hosts (fleet/defs/celery.py)."""
    from fleet.defs.executor import fleet_executor
    from fleet.defs.instance import pool_limit

    if s.executor == "celery":
        from dagster_celery import celery_executor

        from fleet.defs.celery import executor_config, watching

        return fleet_executor(celery_executor.configured(executor_config(s)),
                              watch=lambda instance, run: watching(s, instance, run))
    return fleet_executor(multiprocess_executor.configured({
        "max_concurrent": pool_limit(s.max_parallel),
        "start_method": {"forkserver": {"preload_modules": list(preload)}},
    }))


EXAMPLE_SCRAPER = '''"""example: visits no page, so the fleet runs before a real source is written (`fleet new`)."""
import polars as pl

from fleet import Scraper


class Example(Scraper):
    """example: one row from a page fleet writes itself."""

    name = "example"
    schema = {"id": pl.Int64, "title": pl.String}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await page.set_content("<title>example</title>")
        yield {"id": 1, "title": await page.title()}
'''

DEFS_YAML = '''# One fleet of Playwright scrapers (fleet's README, "As a dg project / component"). An attribute left
# out is fleet's environment setting named beside it.
type: {type}

attributes:
  scrapers: [scrapers]        # folders of scraper modules, relative to this file (FLEET_SCRAPERS_DIR)
  # data_remote: /srv/data.git  # the data repository (FLEET_DATA_REMOTE; default FLEET_HOME/data-remote.git)
  # data_branch: main           # FLEET_DATA_BRANCH
  # data_prefix: data/          # FLEET_DATA_PREFIX
  # start_week: 2026-W02        # FLEET_START_WEEK
  # schedule: "0 6 * * 1"       # the weekly run's cron, UTC
  # schedule_running: false     # on when first loaded
  # max_parallel: 10            # the cap (FLEET_MAX_PARALLEL)
  # crash_reruns: 2             # the crash budget (FLEET_CRASH_RERUNS)
  # freshness_deadline: mon 12:00  # FLEET_FRESHNESS_DEADLINE
  # alert_webhook: https://hooks.example.com/fleet  # FLEET_ALERT_WEBHOOK
  # alert_routes: {{"team:data": "https://hooks.example.com/data"}}  # FLEET_ALERT_ROUTES
'''
