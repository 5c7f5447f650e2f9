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


def test_raw_assets_carry_the_schedules_freshness_and_their_owners(tmp_path):
    code = ("import json\nfrom fleet.defs.definitions import defs\n"
            "print(json.dumps({s.key.to_user_string(): [repr(s.freshness_policy), list(s.owners)]\n"
            "                  for s in defs.resolve_all_asset_specs()}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(FLEET_HOME=str(tmp_path / "home"), FLEET_FRESHNESS_DEADLINE="tue 09:30",
               FLEET_SCRAPERS_DIR=scrapers(tmp_path / "s", {"owned": "team:news", "mailed": "ana@example.com",
                                                            "fine": None}))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    specs = json.loads(out.stdout.strip().splitlines()[-1])
    # due Tuesday 09:30 UTC, materialized since the Monday 06:00 tick (27.5 hours before)
    for key in ("raw/owned", "raw/mailed", "raw/fine"):
        policy = specs[key][0]
        assert "CronFreshnessPolicy" in policy and "deadline_cron='30 9 * * 2'" in policy, policy
        assert "days=1, seconds=12600" in policy and "timezone='UTC'" in policy, policy
    assert specs["raw/owned"][1] == ["team:news"] and specs["raw/mailed"][1] == ["ana@example.com"]
    assert specs["raw/fine"][1] == []
    assert specs["raw_commit"][0] == "None"  # the publish stage has the week's own deadline (`fleet freshness`)


def test_an_owner_that_is_neither_an_email_nor_a_team_is_refused_by_name(tmp_path):
    from fleet.scraping.discovery import discover

    from pathlib import Path

    (src,) = discover([Path(scrapers(tmp_path / "s", {"owned": "news desk"}))])
    assert src.broken and "owner must be an email address or a team name prefixed with 'team:'" in src.error
    assert "'news desk'" in src.error


@pytest.mark.parametrize("text,says", [
    ("[1]", "must be a JSON object"), ("{", "must be a JSON object"),
    ('{"news": "http://x"}', "'news' is not an owner"),
    ('{"team:news": "ftp://x"}', "must be an http(s) URL or slack:#channel"),
])
def test_bad_routes_are_refused_naming_the_setting(text, says):
    with pytest.raises(FleetError, match="FLEET_ALERT_ROUTES") as exc:
        parse_routes(text)
    assert says in str(exc.value)


def test_a_sources_alert_goes_to_its_owners_route_and_an_unowned_ones_to_the_default(fleet_env):
    team, default = Receiver(), Receiver()
    env = {**fleet_env.env, "FLEET_ALERT_WEBHOOK": default.url,
           "FLEET_ALERT_ROUTES": json.dumps({"team:news": team.url}),
           "FLEET_SCRAPERS_DIR": scrapers(fleet_env.tmp / "s", {"owned": "team:news", "plain": None, "fine": None})}
    res = run_fleet(env, "run", "--week", WEEK, "--force")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert team.posts and {p["source"] for p in team.posts} == {"owned"}, team.posts
    assert all(p["owner"] == "team:news" for p in team.posts)
    assert "plain" in {p["source"] for p in default.posts} and "owned" not in {p["source"] for p in default.posts}
    assert all(p["owner"] is None for p in default.posts)


def test_a_deadline_before_the_weekly_tick_allows_the_week_before_it():
    import datetime as dt

    from fleet.defs.automation import raw_freshness
    from fleet.weeks import parse_deadline

    assert raw_freshness(parse_deadline("mon 05:00", "x")).lower_bound_delta == dt.timedelta(days=7)
    assert raw_freshness(parse_deadline("mon 12:00", "x")).lower_bound_delta == dt.timedelta(hours=6)
    assert raw_freshness(parse_deadline("sun 23:59", "x")).deadline_cron == "59 23 * * 0"


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
