"""Run requests (fleet/defs/requests.py): a command's request, observed on fleet/requests in a real instance, and the
fleet_requests sensor's answer to it, once; and the follow-up policy's decision written on a run as ``fleet/next``
(fleet/policy/followup.py), with the run's request, driver and loggers carried onto its follow-up. The sensor is
evaluated as the daemon does (its answers written into the instance after each tick), without a daemon; the runs
are real runs of small assets, without a browser."""
import json
import os

import pytest
from dagster import (
    AssetCheckKey, AssetKey, AssetRecordsFilter, DagsterInstance, asset, build_sensor_context, materialize,
    validate_run_config,
)

from fleet.defs import requests as rq

WEEK = "2026-11-16"
NO_PAGE = '''import polars as pl

from fleet import Scraper


class {cls}(Scraper):
    """{name}: a page fleet writes itself."""

    name = "{name}"
    schema = {{"id": pl.Int64}}
    key = ("id",)

    async def scrape(self, page, ctx):
        yield {{"id": 1}}
'''
CRITICAL = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
DEBUG = {"loggers": {"console": {"config": {"log_level": "DEBUG"}}}}


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """A fleet of three sources (alpha, beta, gamma) built from its environment, as a code location would, and a
    real instance in a temporary DAGSTER_HOME."""
    from fleet.defs.component import FleetSpec, build_defs

    scrapers = tmp_path / "scrapers"
    scrapers.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (scrapers / f"{name}.py").write_text(NO_PAGE.format(cls=name.title(), name=name))
    for name in [k for k in os.environ if k.startswith("FLEET_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLEET_SCRAPERS_DIR", str(scrapers))
    monkeypatch.setenv("FLEET_START_WEEK", "2026-01-05")
    spec = FleetSpec.from_env()
    defs = build_defs(spec=spec)
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster")) as instance:
        yield type("Fleet", (), dict(defs=defs, instance=instance, tmp=tmp_path,
                                     settings=rq.location_settings(spec.settings, spec.scrapers)))


def tick(fleet, cursor=None):
    """One evaluation of the fleet_requests sensor; its answers are written into the instance, as the daemon
    does after a tick (``report_runless_asset_event`` of each of the result's asset events)."""
    [sensor] = [s for s in fleet.defs.sensors if s.name == "fleet_requests"]
    result = sensor(build_sensor_context(instance=fleet.instance, cursor=cursor, definitions=fleet.defs))
    for event in result.asset_events:
        fleet.instance.report_runless_asset_event(event)
    return result


def submit(fleet, week=WEEK, **kw):
    return rq.submit(fleet.instance, week, settings=kw.pop("settings", fleet.settings), **kw)


def answers(fleet, week=WEEK) -> list[dict]:
    found = fleet.instance.fetch_observations(AssetRecordsFilter(asset_key=rq.REQUESTS, asset_partitions=[week]),
                                              limit=1000, ascending=True).records
    return [{k: v.value for k, v in r.asset_observation.metadata.items()} for r in found
            if r.asset_observation.metadata["event"].value == "answer"]


def valid(fleet, request) -> None:
    """The request's run config is one its job takes."""
    validate_run_config(fleet.defs.resolve_job_def(request.job_name), request.run_config)


def test_the_sensor_is_wired_running_and_the_asset_is_external(fleet):
    from dagster import DefaultSensorStatus

    [sensor] = [s for s in fleet.defs.sensors if s.name == "fleet_requests"]
    assert sensor.default_status == DefaultSensorStatus.RUNNING and sensor.minimum_interval_seconds == 1
    spec = fleet.defs.resolve_assets_def(rq.REQUESTS)
    assert not spec.is_executable and spec.group_names_by_key[rq.REQUESTS] == "fleet_requests"
    assert WEEK in spec.partitions_def.get_partition_keys()


def test_a_scrape_request_of_every_source_is_the_scrape_job_with_the_tags_of_the_request(fleet):
    request_id = submit(fleet, kind="scrape")
    assert rq.answer(fleet.instance, WEEK, request_id) is None  # not yet answered
    [run] = tick(fleet).run_requests
    assert (run.job_name, run.partition_key, run.run_key) == ("scrape_week", WEEK, f"request:{request_id}")
    # the job itself: its selection leaves the weekly fresh_week checks out already
    assert run.asset_selection is None and run.asset_check_keys is None
    assert run.run_config == CRITICAL
    valid(fleet, run)
    requester = json.loads(run.tags.pop("fleet/requester"))
    assert requester["pid"] == os.getpid() and requester["host"]
    assert run.tags == {"fleet/kind": "scrape", "fleet/request": request_id, "fleet/driver": "cli"}
    assert rq.answer(fleet.instance, WEEK, request_id) == {
        "state": "accepted", "reason": f"scrape_week of week {WEEK} (every source)"}


def test_a_source_subset_selects_its_assets_and_quality_checks_and_carries_deep_refresh_verbose_force(fleet):
    request_id = submit(fleet, kind="scrape", sources=("alpha", "gamma"), deep=("gamma",), refresh=True,
                        verbose=True, force=True)
    first = tick(fleet)
    [run] = first.run_requests
    assert run.asset_selection == [AssetKey(["raw", "alpha"]), AssetKey(["raw", "gamma"])]
    assert run.asset_check_keys == [AssetCheckKey(AssetKey(["raw", "alpha"]), "quality"),
                                    AssetCheckKey(AssetKey(["raw", "gamma"]), "quality")]  # no fresh_week
    assert run.run_config == {"ops": {"raw__alpha": {"config": {"deep": False, "refresh": True}},
                                      "raw__gamma": {"config": {"deep": True, "refresh": True}}}, **DEBUG}
    valid(fleet, run)
    assert run.tags["fleet/force"] == "true" and run.tags["fleet/request"] == request_id
    # deep alone: config for the deep source only
    submit(fleet, kind="scrape", deep=("beta",))
    [run] = tick(fleet, first.cursor).run_requests
    assert run.run_config == {"ops": {"raw__beta": {"config": {"deep": True, "refresh": False}}}, **CRITICAL}


def test_an_unknown_source_or_deep_name_is_refused_naming_it_and_the_known_ones(fleet):
    first = submit(fleet, kind="scrape", sources=("alpha", "nope"))
    second = submit(fleet, kind="scrape", deep=("deeper",))
    assert tick(fleet).run_requests == []
    assert rq.answer(fleet.instance, WEEK, first) == {
        "state": "refused", "reason": "unknown source(s): nope; known: alpha, beta, gamma"}
    assert rq.answer(fleet.instance, WEEK, second)["reason"] == "unknown source(s): deeper; known: alpha, beta, gamma"


def test_settings_that_differ_from_the_locations_are_refused_naming_the_key_and_both_values(fleet):
    mine = {**fleet.settings, "data_remote": "/srv/elsewhere.git"}
    request_id = submit(fleet, kind="scrape", settings=mine)
    assert tick(fleet).run_requests == []
    got = rq.answer(fleet.instance, WEEK, request_id)
    assert got["state"] == "refused"
    assert got["reason"] == (f"the daemon serving this instance commits to {fleet.settings['data_remote']!r}; this "
                             "command names '/srv/elsewhere.git' (data_remote); give the command the daemon's "
                             "settings, or stop that daemon")
    # the settings of an environment: what submit names when given none
    from fleet import config
    assert rq.location_settings(config.settings(), config.scraper_dirs()) == fleet.settings


def test_a_week_outside_the_partitions_is_refused(fleet):
    request_id = submit(fleet, "2025-12-29", kind="scrape")
    assert tick(fleet).run_requests == []
    got = rq.answer(fleet.instance, "2025-12-29", request_id)
    assert got["state"] == "refused"
    assert got["reason"].startswith("week 2025-12-29 is not one of the weekly partitions (2026-01-05 to ")


def test_a_request_older_than_its_ttl_is_refused(fleet, monkeypatch):
    import datetime as dt

    request_id = submit(fleet, kind="scrape")
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=rq.TTL_S + 60)
    monkeypatch.setattr(rq, "utc_now", lambda: later)  # the sensor's clock, 11 minutes on
    assert tick(fleet).run_requests == []
    got = rq.answer(fleet.instance, WEEK, request_id)
    assert got["state"] == "refused" and "s old, over 600 s: the command that made it is gone" in got["reason"]


def test_each_request_is_answered_once_across_ticks(fleet):
    first = submit(fleet, kind="scrape")
    result = tick(fleet)
    assert [r.run_key for r in result.run_requests] == [f"request:{first}"]
    # the next tick reads the answer the last one wrote, and answers nothing again
    again = tick(fleet, result.cursor)
    assert again.run_requests == [] and again.asset_events == []
    second = submit(fleet, kind="scrape", sources=("beta",))
    third = tick(fleet, again.cursor)
    assert [r.run_key for r in third.run_requests] == [f"request:{second}"]
    assert [a["request"] for a in answers(fleet)] == [first, second]
    assert tick(fleet, third.cursor).run_requests == []


def test_reprocess_and_release_requests_are_publish_runs(fleet):
    reprocess = submit(fleet, kind="reprocess")
    release = submit(fleet, kind="release", tags={"fleet/release": "alpha", "fleet/release_note": "checked by hand"})
    runs = {r.tags["fleet/kind"]: r for r in tick(fleet).run_requests}
    assert (runs["reprocess"].job_name, runs["reprocess"].run_key) == ("publish_week", f"request:{reprocess}")
    assert runs["reprocess"].asset_selection == [AssetKey("post_processed"), AssetKey("processed_commit")]
    assert (runs["release"].job_name, runs["release"].asset_selection) == ("publish_week", None)
    assert runs["release"].tags["fleet/release"] == "alpha"
    assert runs["release"].tags["fleet/release_note"] == "checked by hand"
    assert runs["release"].tags["fleet/request"] == release and runs["release"].tags["fleet/driver"] == "cli"
    for run in runs.values():
        assert run.partition_key == WEEK and run.run_config == CRITICAL
        valid(fleet, run)
    with pytest.raises(Exception, match="unknown request kind 'publish': one of scrape, reprocess, release"):
        submit(fleet, kind="publish")


# ------------------------------------------------------------------ the follow-up policy's decision: fleet/next


def _scrape_run(fleet, fail: bool, tags: dict | None = None):
    """A finished run of raw/alpha and raw/beta for WEEK, tagged as a request's run; beta's step dies without
    reporting (an infra failure: a crash) when ``fail``."""
    from fleet.defs.assets import partitions

    parts = partitions("2026-01-05")

    @asset(key=["raw", "alpha"], partitions_def=parts)
    def alpha():
        return 1

    @asset(key=["raw", "beta"], partitions_def=parts)
    def beta():
        if fail:
            raise RuntimeError("the step's process died")
        return 1

    result = materialize([alpha, beta], instance=fleet.instance, partition_key=WEEK, raise_on_error=False,
                         run_config=DEBUG, tags={"fleet/kind": "scrape", "fleet/request": "r-1", "fleet/driver": "cli",
                                                 **(tags or {})})
    return fleet.instance.get_run_by_id(result.run_id)


def _store(fleet):
    from fleet.storage.store import LocalArtifactStore

    return LocalArtifactStore(fleet.tmp / "artifacts")


def test_follow_up_writes_its_decision_and_carries_the_request_driver_and_loggers(fleet):
    from fleet.policy.followup import follow_up_request

    crashed = _scrape_run(fleet, fail=True)
    action, request = follow_up_request(fleet.instance, crashed, 2, _store(fleet))
    assert action.kind == "rerun"
    assert fleet.instance.get_run_by_id(crashed.run_id).tags["fleet/next"] == \
        "rerun: re-executing crashed sources beta (attempt 2)"
    assert {k: request.tags[k] for k in ("fleet/request", "fleet/driver", "fleet/kind")} == \
        {"fleet/request": "r-1", "fleet/driver": "cli", "fleet/kind": "rerun"}
    assert request.run_config == DEBUG

    ok = _scrape_run(fleet, fail=False)
    action, request = follow_up_request(fleet.instance, ok, 2, _store(fleet))
    assert fleet.instance.get_run_by_id(ok.run_id).tags["fleet/next"] == \
        "publish: scrape stage finished; consolidating and committing"
    assert request.job_name == "publish_week" and request.run_config == DEBUG
    assert (request.tags["fleet/request"], request.tags["fleet/driver"]) == ("r-1", "cli")

    # followed already (its rerun exists): the decision that launched the follower stays
    _scrape_run(fleet, fail=False, tags={"fleet/kind": "rerun", "fleet/recovers": crashed.run_id})
    action, request = follow_up_request(fleet.instance, fleet.instance.get_run_by_id(crashed.run_id), 2, _store(fleet))
    assert request is None and action.reason.startswith("already followed up by run")
    assert fleet.instance.get_run_by_id(crashed.run_id).tags["fleet/next"] == \
        "rerun: re-executing crashed sources beta (attempt 2)"

    # a run that stood down for an older run of its week: nothing follows, and it says why
    stood_down = _scrape_run(fleet, fail=False, tags={"fleet/superseded": "week 2026-11-16 is already being run"})
    action, request = follow_up_request(fleet.instance, stood_down, 2, _store(fleet))
    assert request is None
    assert fleet.instance.get_run_by_id(stood_down.run_id).tags["fleet/next"] == \
        "none: week 2026-11-16 is already being run"
