"""One scrape engine: `fleet canary` runs a source through the weekly run's attempt, so the same fault gives the same
category and the same evidence files through both (real Chromium, the newsroom demo site, a real `fleet run`)."""
from pathlib import Path

import pytest

from fleet.demo.newsroom import SCRAPER, Newsroom
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import WEEK, run_fleet


@pytest.mark.parametrize("fault,category,says", [
    ("locator", "source", "wait_for_selector"),  # the changed site lacks the scraper's `.headline` locator
    ("wall", "blocked", "blocked: a captcha or bot-check page"),  # a block marker on the page (FLEET_BLOCK_MARKERS)
])
def test_a_fault_gives_the_same_category_and_evidence_through_canary_and_a_weekly_run(fleet_env, fault, category,
                                                                                    says):
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    (scrapers / "news.py").write_text(SCRAPER)
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers)}
    if fault == "wall":
        env["FLEET_BLOCK_MARKERS"] = '["newsroom"]'
    store = LocalArtifactStore(fleet_env.home / "artifacts")
    with Newsroom(change_week="2026-01-05" if fault == "locator" else None) as site:
        env["FLEET_DEMO_URL"] = site.url
        canary = run_fleet(env, "canary")
        assert canary.returncode == 1 and "news                 fail" in canary.stdout, canary.stdout + canary.stderr
        weekly = run_fleet(env, "run", "--week", WEEK, "--force")
        assert "news" in weekly.stdout, weekly.stdout + weekly.stderr

    (week,) = [w for w in store.weeks() if store.exists(w, "lifecycle/news.canary.json")]
    checked = store.read_json(week, "lifecycle/news.canary.json")
    outcome = keys.read_outcome(store, WEEK, "news")
    assert outcome["status"] == "failed" and not checked["ok"]
    assert checked["category"] == outcome["category"] == category
    assert says in checked["error"] and says in outcome["error"], (checked["error"], outcome["error"])

    weekly_files = sorted(p.name for p in store.local_dir(WEEK, keys.evidence_key("news")).iterdir())
    canary_files = sorted(Path(v).name for k, v in checked["evidence"].items())
    assert weekly_files == canary_files == ["error.txt", "page.html", "screenshot.png", "trace.zip"]
    for name in canary_files:
        assert (store.local_dir(week, f"evidence/canary/news/{name}")).stat().st_size > 0
    assert says in (store.local_dir(WEEK, keys.evidence_key("news")) / "error.txt").read_text()
