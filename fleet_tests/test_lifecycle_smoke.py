"""`fleet smoke --changed-since REF` through real git, Chromium and the weekly runner, against the newsroom demo site:
exactly the sources a diff touches run, live, once; nothing is committed; a pass lifts a quarantine."""
import os
import subprocess

from fleet.demo.newsroom import FRONT as BASE_FRONT
from fleet.demo.newsroom import SCRAPER, Newsroom, scrapers_folder
from fleet.lifecycle import quarantine
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet_tests.conftest import run_fleet
from fleet_tests.gitremote import log

# front, with its title read through a shared helper module two relative imports away
assert "from fleet import Scraper, site_url\n" in BASE_FRONT
FRONT = BASE_FRONT.replace("from fleet import Scraper, site_url\n",
                            "from fleet import Scraper, site_url\n\nfrom ._shared import title_of\n") \
    .replace("await page.title()", "await title_of(page)") + '''

def _types():  # never called: what a scraper may import for type hints, from the checkout's .venv
    import helperlib
'''
SHARED = '''from . import _deeper


async def title_of(page):
    return _deeper.clean(await page.title())
'''
DEEPER = '''def clean(text):
    return text.strip()
'''


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _table(stdout: str) -> dict[str, str]:
    rows = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] in ("pass", "fail"):
            rows[parts[0]] = parts[1]
    return rows


def test_smoke_runs_exactly_the_sources_a_diff_touches(fleet_env):
    repo = fleet_env.tmp / "repo"
    scrapers = scrapers_folder(repo / "scrapers", front=FRONT)
    (scrapers / "_shared.py").write_text(SHARED)
    (scrapers / "_deeper.py").write_text(DEEPER)
    (repo / "pyproject.toml").write_text('[project]\nname = "mine"\ndependencies = ["fleet"]\n')
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "empty")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "scrapers")
    # a virtual environment inside the checkout, on the path, neither committed nor ignored: what front imports
    # from it changed, but smoke follows imports only inside the scrapers' folder
    site_packages = repo / ".venv" / "lib" / "python3.11" / "site-packages"
    (site_packages / "helperlib").mkdir(parents=True)
    (site_packages / "helperlib" / "__init__.py").write_text("VERSION = 2\n")
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers),
           "PYTHONPATH": os.pathsep.join([fleet_env.env["PYTHONPATH"], str(site_packages)])}
    remote_before = log(fleet_env.remote)
    with Newsroom() as site:
        env["FLEET_DEMO_URL"] = site.url

        none = run_fleet(env, "smoke", "--changed-since", "main")
        assert none.returncode == 0, none.stdout + none.stderr
        assert "no source is affected by the changes since main; nothing was run" in none.stdout
        assert site.hits == []

        bad = run_fleet(env, "smoke", "--changed-since", "no-such-ref")
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
        assert "--changed-since 'no-such-ref': no such commit in" in bad.stderr, bad.stderr

        # a helper two imports away: only front runs
        (scrapers / "_deeper.py").write_text(DEEPER + "\n# tidier\n")
        deep = run_fleet(env, "smoke", "--changed-since", "main")
        assert deep.returncode == 0, deep.stdout + deep.stderr
        assert _table(deep.stdout) == {"front": "pass"}, deep.stdout
        assert "front: imports scrapers/_deeper.py, which changed" in deep.stdout
        assert not any("week=" in h and "week=front" not in h for h in site.hits)
        _git(repo, "checkout", "--", ".")

        # the module itself, committed on a branch, against a site whose markup changed: news fails
        _git(repo, "checkout", "-q", "-b", "pr")
        (scrapers / "news.py").write_text(SCRAPER.replace("timeout_s = 30", "timeout_s = 20"))
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "news: shorter timeout")
        site.change_week = "2026-01-05"
        broken = run_fleet(env, "smoke", "--changed-since", "main")
        assert broken.returncode == 1, broken.stdout + broken.stderr
        assert _table(broken.stdout) == {"news": "fail"}, broken.stdout
        assert "Page.wait_for_selector: Timeout 3000ms exceeded" in broken.stdout  # what failed, in the detail

        # a quarantined source that passes live is lifted
        site.change_week = None
        home_store = LocalArtifactStore(fleet_env.home / "artifacts")
        for week in ("2026-11-02", "2026-11-09", "2026-11-16"):
            keys.write_outcome(home_store, week, {"source": "news", "attempt": "a1", "status": "failed",
                                                  "category": "source"})
        assert quarantine.state(home_store, "news", 3) is not None
        lifted = run_fleet(env, "smoke", "--changed-since", "main")
        assert lifted.returncode == 0, lifted.stdout + lifted.stderr
        assert "passed live: quarantine lifted" in lifted.stdout
        assert quarantine.state(home_store, "news", 3) is None

        # a fixture, and the pinned versions
        (scrapers / "fixtures").mkdir()
        (scrapers / "fixtures" / "front.fixture.json").write_text("{}")
        assert _table(run_fleet(env, "smoke", "--changed-since", "main").stdout) == {"front": "pass", "news": "pass"}
        (scrapers / "fixtures" / "front.fixture.json").unlink()
        _git(repo, "checkout", "-q", "main")
        (repo / "pyproject.toml").write_text('[project]\nname = "mine"\ndependencies = ["fleet", "polars==1.30"]\n')
        pins = run_fleet(env, "smoke", "--changed-since", "main")
        assert _table(pins.stdout) == {"front": "pass", "news": "pass"}, pins.stdout
        assert "pyproject.toml affects every source" in pins.stdout
    # nothing was committed or stored as a week's outcome
    assert log(fleet_env.remote) == remote_before
    assert sorted(home_store.weeks()) == ["2026-11-02", "2026-11-09", "2026-11-16"]
    assert not any(keys.outcomes(home_store, w, "front") for w in home_store.weeks())
