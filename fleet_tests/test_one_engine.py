"""One scrape engine: `fleet canary` runs a source through the weekly run's attempt, so the same fault gives the same
category and the same evidence files through both (real Chromium, the newsroom demo site, a real `fleet run`)."""
from pathlib import Path

from fleet.demo.newsroom import SCRAPER, Newsroom
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import WEEK, run_fleet


def test_a_fault_gives_the_same_category_and_evidence_through_canary_and_a_weekly_run(fleet_env):
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    (scrapers / "news.py").write_text(SCRAPER)  # its `.headline` locator is gone from the changed site
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers)}
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    with Newsroom(change_week="2026-01-05") as site:
        env["FLEET_DEMO_URL"] = site.url
        canary = run_fleet(env, "canary")
        assert canary.returncode == 1 and "news                 fail" in canary.stdout, canary.stdout + canary.stderr
        weekly = run_fleet(env, "run", "--week", WEEK, "--force")
        assert "news" in weekly.stdout, weekly.stdout + weekly.stderr

    (week,) = [w for w in store.weeks() if store.exists(w, "lifecycle/news.canary.json")]
    checked = store.read_json(week, "lifecycle/news.canary.json")
    outcome = keys.read_outcome(store, WEEK, "news")
    assert outcome["status"] == "failed" and not checked["ok"]
    assert checked["category"] == outcome["category"] == "source"
    assert "wait_for_selector" in checked["error"] and "wait_for_selector" in outcome["error"]

    weekly_files = sorted(p.name for p in store.local_dir(WEEK, keys.evidence_key("news")).iterdir())
    canary_files = sorted(Path(v).name for k, v in checked["evidence"].items())
    assert weekly_files == canary_files == ["error.txt", "page.html", "screenshot.png"]
    for name in canary_files:
        assert (store.local_dir(week, f"evidence/canary/news/{name}")).stat().st_size > 0
    assert "wait_for_selector" in (store.local_dir(WEEK, keys.evidence_key("news")) / "error.txt").read_text()
