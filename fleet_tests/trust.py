"""Helpers of the test_trust_* tests: demo scrapers in a folder of a test's own, and the demo sites in-process."""
import pytest

from fleet.demo.sites import DemoSites
from fleet_tests.conftest import ROOT


def demo_env(fleet_env, *names: str) -> tuple[dict, object]:
    """``fleet_env``'s environment with only the demo scrapers ``names`` (copied into a folder of the test's own)
    and the demo sites' modes under a state folder; returns (env, state folder)."""
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    for name in names:
        (scrapers / f"{name}.py").write_text((ROOT / "scrapers" / f"{name}.py").read_text())
    state = fleet_env.tmp / "sites"
    return {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_DEMO_STATE_DIR": str(state)}, state


@pytest.fixture
def sites(scrape_home, monkeypatch):
    """The demo sites on a free port, without latency, for scrapers the runner runs in this process's environment."""
    with DemoSites(latency_ms=0) as s:
        monkeypatch.setenv("FLEET_DEMO_URL", s.url)
        yield s
