"""Quarantine: the rule over stored outcomes, and a source quarantined through real weekly runs (Dagster, Chromium,
git) against the newsroom demo site, whose markup changed under its scraper."""
import json

import pytest

from fleet.demo.newsroom import SCRAPER, Newsroom, scrapers_folder
from fleet.errors import FleetError
from fleet.lifecycle import quarantine
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import run_fleet
from fleet_tests.gitremote import log

WEEKS = ["2026-11-02", "2026-11-09", "2026-11-16"]


def _outcome(store, week, status, category=None, source="s"):
    keys.write_outcome(store, week, {"source": source, "attempt": "a1", "week": week, "status": status,
                                     "category": category})


def test_only_source_failures_in_a_row_count(tmp_path):
    store = LocalArtifactStore(tmp_path)
    weeks = [f"2026-10-{d:02d}" for d in (5, 12, 19, 26)]
    for w in weeks[:3]:
        _outcome(store, w, "failed", "source")
    assert quarantine.state(store, "s", 3).weeks == tuple(weeks[:3])
    assert quarantine.state(store, "s", 4) is None
    assert quarantine.state(store, "s", 3, before=weeks[2]) is None  # a run of week 3 sees only weeks 1-2
    # infra, empty, partial, refused and another helper's categories (blocked) break the streak
    for status, category in (("failed", "infra"), ("empty", None), ("partial", None), ("failed", "blocked"),
                             ("refused", "refused")):
        _outcome(store, weeks[1], status, category)
        assert quarantine.state(store, "s", 2) is None, (status, category)
    _outcome(store, weeks[1], "timeout", "source")
    # a skipped week neither counts nor breaks it
    _outcome(store, weeks[3], "quarantined", "quarantined")
    assert quarantine.state(store, "s", 3).since == weeks[2]
    assert quarantine.lift(store, "s", by="test") == weeks[3]
    assert quarantine.state(store, "s", 1) is None
    _outcome(store, "2026-11-02", "failed", "source")
    assert quarantine.state(store, "s", 1).weeks == ("2026-11-02",)
    store.write_bytes(weeks[3], quarantine.lift_key("s"), b"{oops")
    with pytest.raises(FleetError, match=r"news|s\.lift\.json: unreadable quarantine record"):
        quarantine.state(store, "s", 1)


def test_a_source_failing_k_weeks_is_skipped_shown_alerted_once_and_lifted(fleet_env):
    scrapers = scrapers_folder(fleet_env.tmp / "scrapers",
                               SCRAPER.replace("    timeout_s = 30\n", "    timeout_s = 30\n    quarantine_after = 2\n"))
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers)}
    with Newsroom() as site:
        env["FLEET_DEMO_URL"] = site.url
        assert run_fleet(env, "record", "news").returncode == 0  # a fixture of the site as it was
        site.change_week = "2026-01-05"  # the markup changes under the scraper, for every week
        for week in WEEKS[:2]:
            res = run_fleet(env, "run", "--week", week, "--force")
            assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-3000:]
            assert "news                 failed      source" in res.stdout, res.stdout
        before = len(site.hits)
        third = run_fleet(env, "run", "--week", WEEKS[2], "--force")
        assert third.returncode == 1, third.stdout[-2000:] + third.stderr[-3000:]
        # skipped without a browser: the site saw only front's page load
        # (and the new week's robots.txt, which front's first page asks for: fleet/scraping/robots.py)
        assert site.hits[before:] and all("week=front" in h or h.startswith("/logo.png") or h == "/robots.txt"
                                          for h in site.hits[before:]), \
            site.hits[before:]
    assert "news                 quarantined quarantined" in third.stdout, third.stdout
    assert "news quarantined 0 rows" in third.stdout  # the live progress line
    raw_msg = next(c["message"] for c in log(fleet_env.remote) if c["subject"] == f"fleet: raw rows for week {WEEKS[2]}")
    assert "Sources quarantined, not scraped (1): news" in raw_msg, raw_msg

    alerts = [json.loads(line) for line in (fleet_env.home / "alerts" / "alerts.jsonl").read_text().splitlines()]
    held = [a for a in alerts if a["check"] == "quarantined"]
    assert [(a["source"], a["week"]) for a in held] == [("news", WEEKS[1])], held
    assert not [a for a in alerts if a["source"] == "news" and a["week"] == WEEKS[2]]

    # the UI: the partition's observation on the asset's page says so
    from dagster import AssetKey, DagsterInstance

    with DagsterInstance.from_config(str(fleet_env.home / "dagster")) as instance:
        seen = instance.fetch_observations(AssetKey(["raw", "news"]), limit=10).records
        # the failed weeks before it have observations of their own (fleet/defs/evidence.py failure_observation)
        (obs,) = [r.asset_observation for r in seen if r.asset_observation.partition == WEEKS[2]]
        assert obs.partition == WEEKS[2] and obs.metadata["fleet/status"].value == "quarantined"

    status = run_fleet(env, "status", "--week", WEEKS[2])
    assert status.returncode == 0, status.stderr
    assert "news                 quarantined" in status.stdout
    assert f"quarantined news: quarantined after 2 weeks failing as source ({WEEKS[0]}, {WEEKS[1]})" in status.stdout

    # a passing offline replay does not lift it: the old fixture still passes after the site changed
    replay = run_fleet(env, "test", "news")
    assert replay.returncode == 0, replay.stdout
    assert "quarantined news:" in run_fleet(env, "status", "--week", WEEKS[2]).stdout

    lift_path = fleet_env.home / "artifacts" / WEEKS[2] / "lifecycle" / "news.lift.json"
    lifted = run_fleet(env, "unquarantine", "news")
    assert lifted.returncode == 0 and "lifted the quarantine of news" in lifted.stdout, lifted.stderr
    assert lift_path.exists()
    assert "quarantined news:" not in run_fleet(env, "status", "--week", WEEKS[2]).stdout
    assert "is not quarantined" in run_fleet(env, "unquarantine", "news").stdout

    outcomes_before = {p: p.read_bytes() for p in (fleet_env.home / "artifacts" / WEEKS[2] / "raw" / "news").glob("*.json")}
    assert outcomes_before
    lift_path.write_text("{garbage")
    bad = run_fleet(env, "unquarantine", "news")
    assert bad.returncode == 2 and bad.stderr.strip() == f"fleet: error: {lift_path}: unreadable quarantine record " \
        f"(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))", bad.stderr
    assert lift_path.read_text() == "{garbage"
    assert {p: p.read_bytes() for p in (fleet_env.home / "artifacts" / WEEKS[2] / "raw" / "news").glob("*.json")} \
        == outcomes_before
