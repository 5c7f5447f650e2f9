"""`fleet canary` through real Chromium against the newsroom demo site, and the daemon's canary schedule (off by
default) and job on a real Dagster instance."""
import json
import os

from fleet.demo.newsroom import FRONT, Newsroom, scrapers_folder
from fleet.lifecycle import quarantine
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import run_fleet
from fleet_tests.gitremote import log


def _alerts(home):
    path = home / "alerts" / "alerts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_canary_alerts_once_on_the_day_a_source_breaks_and_lifts_quarantine(fleet_env):
    scrapers = scrapers_folder(fleet_env.tmp / "scrapers")
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers)}
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    remote_before = log(fleet_env.remote)
    with Newsroom() as site:
        env["FLEET_DEMO_URL"] = site.url
        ok = run_fleet(env, "canary")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert ok.stdout.count(" pass ") == 2 and _alerts(fleet_env.home) == []

        site.change_week = "2026-01-05"
        broken = run_fleet(env, "canary")
        assert broken.returncode == 1, broken.stdout + broken.stderr
        assert "news                 fail" in broken.stdout and "front                pass" in broken.stdout
        (alert,) = _alerts(fleet_env.home)
        assert alert["source"] == "news" and alert["check"] == "canary" and "failed live on" in alert["message"]
        assert "/news?week=" in alert["evidence"]["url"] and "wait_for_selector" in alert["evidence"]["error"]
        assert os.path.getsize(alert["evidence"]["screenshot"]) > 0
        assert "Newsroom" in open(alert["evidence"]["html"]).read()
        # still broken the next time: no second alert
        assert run_fleet(env, "canary", "news").returncode == 1
        assert len(_alerts(fleet_env.home)) == 1

        site.change_week = None
        for week in ("2026-11-02", "2026-11-09", "2026-11-16"):
            keys.write_outcome(store, week, {"source": "news", "attempt": "a1", "status": "failed", "category": "source"})
        assert quarantine.state(store, "news", 3) is not None
        healed = run_fleet(env, "canary", "news")
        assert healed.returncode == 0 and "passed live: quarantine lifted" in healed.stdout, healed.stdout
        assert quarantine.state(store, "news", 3) is None
    assert log(fleet_env.remote) == remote_before  # nothing committed


def test_canary_schedule_is_off_by_default_and_its_job_runs(fleet_env, monkeypatch):
    from dagster import DefaultScheduleStatus, execute_job, reconstructable

    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    (scrapers / "front.py").write_text(FRONT)
    with Newsroom() as site:
        for k, v in {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_DEMO_URL": site.url}.items():
            monkeypatch.setenv(k, v)
        from fleet.config import settings
        from fleet.defs import definitions as d
        from fleet.defs.instance import get_instance

        defs = d.build_defs()
        schedule = defs.resolve_schedule_def("fleet_canary_daily")
        assert schedule.default_status == DefaultScheduleStatus.STOPPED and schedule.job_name == "fleet_canary"
        monkeypatch.setattr(d, "defs", defs)
        instance = get_instance(settings())
        result = execute_job(reconstructable(_canary_job), instance)
        assert result.success
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    (week,) = [w for w in store.weeks() if store.exists(w, "lifecycle/front.canary.json")]
    assert store.read_json(week, "lifecycle/front.canary.json")["ok"] is True


def _canary_job():
    from fleet.defs import definitions as d

    return d.defs.resolve_job_def("fleet_canary")
