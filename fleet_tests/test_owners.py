"""Freshness and owners per source: each raw asset carries a Dagster FreshnessPolicy from the weekly schedule and its
scraper's owner, read back through Definitions' public API; a failing source's alert goes to its owner's webhook
(FLEET_ALERT_ROUTES) through a real `fleet run`, an unowned one's to the default."""
import json
import os
import subprocess
import sys

import pytest

from fleet.errors import FleetError
from fleet.quality.alerts import parse_routes
from fleet_tests.conftest import ROOT, WEEK, run_fleet
from fleet_tests.test_alerts_e2e import Receiver

SCRAPER = '''import polars as pl
from fleet import Scraper


class {cls}(Scraper):
    """{name}"""
    name = "{name}"
    schema = {{"id": pl.Int64}}
    key = ("id",)
    timeout_s = 30
{owner}
    async def scrape(self, page, ctx):
        if "{name}" != "fine":
            raise RuntimeError("{name} broke")
        yield {{"id": 1}}
'''


def scrapers(folder, owners: dict) -> str:
    folder.mkdir(exist_ok=True)
    for name, owner in owners.items():
        (folder / f"{name}.py").write_text(SCRAPER.format(cls=name.title(), name=name,
                                                          owner=f"    owner = {owner!r}\n" if owner else ""))
    return str(folder)


def test_raw_assets_carry_their_weekly_freshness_check_and_their_owners(tmp_path):
    code = ("import json\nfrom fleet.defs.definitions import defs\n"
            "specs = {s.key.to_user_string(): [repr(s.freshness_policy), list(s.owners)] for s in defs.resolve_all_asset_specs()}\n"
            "checks = sorted(k.asset_key.to_user_string() + ':' + k.name for k in defs.resolve_asset_graph().asset_check_keys)\n"
            "crons = {s.name: s.cron_schedule for s in defs.schedules}\n"
            "print(json.dumps([specs, checks, crons]))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(FLEET_HOME=str(tmp_path / "home"), FLEET_FRESHNESS_DEADLINE="tue 09:30",
               FLEET_SCRAPERS_DIR=scrapers(tmp_path / "s", {"owned": "team:news", "mailed": "ana@example.com",
                                                            "fine": None}))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    specs, checks, crons = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("raw/owned", "raw/mailed", "raw/fine"):
        # no Dagster FreshnessPolicy: it judges from any partition; the per-week check does (fleet/defs/freshness.py)
        assert specs[key][0] == "None" and f"{key}:fresh_week" in checks and f"{key}:quality" in checks, checks
    assert crons["fleet_freshness_weekly"] == "30 9 * * 2"  # due Tuesday 09:30 UTC
    assert specs["raw/owned"][1] == ["team:news"] and specs["raw/mailed"][1] == ["ana@example.com"]
    assert specs["raw/fine"][1] == []
    assert not [c for c in checks if c.startswith("raw_commit")]  # the publish stage has `fleet freshness`


def test_freshness_is_per_week_a_backfilled_old_week_never_makes_a_source_look_fresh(tmp_path, monkeypatch):
    """Against a real instance: the due week (2026-11-30 at Monday 2026-12-07 13:00, after the Monday 12:00
    deadline) is missing while an older week is backfilled: the check fails, naming the week; once the due week is
    materialized, it passes; before the deadline, the week before is the one due."""
    from dagster import AssetKey, AssetMaterialization, DagsterInstance

    from fleet.defs.freshness import AS_OF_TAG, FRESH_CHECK

    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLEET_SCRAPERS_DIR", scrapers(tmp_path / "s", {"alpha": None, "beta": None}))
    monkeypatch.setenv("FLEET_START_WEEK", "2026-01-05")
    from fleet.defs.definitions import build_defs

    defs = build_defs()
    job = defs.resolve_job_def("fleet_freshness")
    with DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster")) as instance:
        def judged(as_of: str) -> dict:
            result = job.execute_in_process(instance=instance, tags={AS_OF_TAG: as_of})
            evals = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
            return {e.asset_key.path[-1]: (e.passed, e.description, e.metadata["week"].value)
                    for e in evals if e.check_name == FRESH_CHECK}

        for week in ("2026-11-16", "2026-11-23"):  # a backfill of older weeks, and a week still in progress
            instance.report_runless_asset_event(AssetMaterialization(AssetKey(["raw", "alpha"]), partition=week))
        instance.report_runless_asset_event(AssetMaterialization(AssetKey(["raw", "alpha"]), partition="2026-12-07"))
        late = judged("2026-12-07T13:00:00+00:00")
        assert late["alpha"][0] is False and late["alpha"][2] == "2026-11-30", late
        assert "late: week 2026-11-30 has no materialization" in late["alpha"][1] and late["beta"][0] is False

        instance.report_runless_asset_event(AssetMaterialization(AssetKey(["raw", "alpha"]), partition="2026-11-30"))
        now = judged("2026-12-07T13:00:00+00:00")
        assert now["alpha"][0] is True and now["beta"][0] is False, now
        before_deadline = judged("2026-12-07T11:59:00+00:00")  # 2026-11-23 is still the week due
        assert before_deadline["alpha"] == (True, "week 2026-11-23 materialized (due 2026-11-30 12:00 UTC)",
                                            "2026-11-23"), before_deadline


def test_a_slack_route_needs_the_slack_extra_and_posts_to_the_owners_channel(tmp_path, monkeypatch):
    """dagster-slack is the `slack` extra: a route to Slack without it is refused by name. With a client (a fake
    here, standing in for dagster-slack's), the owner's alert goes to the owner's channel, not the default's."""
    import importlib.util

    from fleet.quality import alerts as al

    if importlib.util.find_spec("dagster_slack") is None:
        with pytest.raises(FleetError, match=r"pip install 'fleet\[slack\]'"):
            parse_routes('{"team:news": "slack:#news"}')
    sent = []

    class Client:
        def __init__(self, channel):
            self.channel = channel

        def chat_postMessage(self, channel, text):
            sent.append((self.channel, channel, text))

    monkeypatch.setattr(al, "_slack_client", Client)
    alert = al.Alert(source="owned", week=WEEK, check="missing", severity="ERROR", category="source",
                     message="owned failed", evidence={}, last_good_week=None)
    got = al.deliver([alert, al.Alert(**{**alert.to_json(), "source": "plain"})], tmp_path, webhook="",
                     slack="#default", owners={"owned": "team:news"}, routes={"team:news": "slack:#news"})
    assert [a.owner for a in got] == ["team:news", None]
    assert [(c, ch) for c, ch, _ in sent] == [("#news", "#news"), ("#default", "#default")]
    assert "owned failed" in sent[0][2]
    assert [r.get("route") for r in al.logged(tmp_path)] == ["team:news", None]
