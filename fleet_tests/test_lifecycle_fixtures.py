"""`fleet new`, `fleet test` and `fleet record` through real parts: Chromium, Playwright's HAR recording and replay,
and the newsroom demo site on 127.0.0.1 (stopped before a replay, so a replay that reached it would fail)."""
import json
import zipfile

import pytest

from fleet.demo.newsroom import COOKIE, SCRAPER, TOKEN, Newsroom
from fleet_tests.conftest import free_port, run_fleet


@pytest.fixture
def life(fleet_env):
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    fleet_env.env["FLEET_SCRAPERS_DIR"] = str(scrapers)
    fleet_env.scrapers = scrapers
    return fleet_env


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _headers_and_cookies(path) -> str:
    """Every recorded header and cookie, as text (the page's own body may hold anything)."""
    with zipfile.ZipFile(path) as z:
        entries = json.loads(z.read("har.har"))["log"]["entries"]
    return json.dumps([[e[part].get("headers"), e[part].get("cookies")] for e in entries for part in ("request", "response")])


def _har_text(path) -> str:
    with zipfile.ZipFile(path) as z:
        return "\n".join(z.read(n).decode("latin-1") for n in z.namelist())


def test_new_refuses_bad_names_and_unreachable_urls_writing_nothing(life):
    (life.scrapers / "taken.py").write_text(SCRAPER.replace('"news"', '"taken"'))
    cases = {"../x": "is a path", "a/b": "is a path", "Bad-Name": "is not a source name", "class": "Python keyword",
             "1abc": "is not a source name", "taken": "is taken", "x" * 64: "at most 63"}
    for name, rule in cases.items():
        res = run_fleet(life.env, "new", name, "http://127.0.0.1:9/")
        assert res.returncode == 2, (name, res.stdout, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and rule in res.stderr, (name, res.stderr)
    res = run_fleet(life.env, "new", "nowhere", f"http://127.0.0.1:{free_port()}/")
    assert res.returncode == 2 and "nothing written" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert _files(life.scrapers) == ["taken.py"]
    bad_url = run_fleet(life.env, "new", "nowhere", "file:///etc/passwd")
    assert bad_url.returncode == 2 and "not an http(s) URL" in bad_url.stderr
    assert _files(life.scrapers) == ["taken.py"]


def test_new_record_and_offline_test(life):
    site = Newsroom().__enter__()
    try:
        life.env["FLEET_DEMO_URL"] = site.url
        res = run_fleet(life.env, "new", "front_page", site.url + "/news?week=2026-11-16")
        assert res.returncode == 0, res.stdout + res.stderr
        assert _files(life.scrapers) == ["fixtures/front_page.fixture.json", "fixtures/front_page.har.zip", "front_page.py"]
        har = life.scrapers / "fixtures" / "front_page.har.zip"
        text = _har_text(har)
        # the page and its fetch were recorded, without the cookie or the bearer token
        assert "/api/news?week=2026-11-16" in text and "Newsroom" in text
        assert COOKIE.split("=")[1] not in text  # the cookie travels only in headers
        recorded = _headers_and_cookies(har)
        assert "content-type" in recorded.lower()
        assert TOKEN not in recorded and "authorization" not in recorded.lower() and "cookie" not in recorded.lower()

        (life.scrapers / "news.py").write_text(SCRAPER)
        rec = run_fleet(life.env, "record", "news")
        assert rec.returncode == 0, rec.stdout + rec.stderr
        assert "12 rows (no earlier fixture)" in rec.stdout
        assert TOKEN not in _headers_and_cookies(life.scrapers / "fixtures" / "news.har.zip")
        meta = json.loads((life.scrapers / "fixtures" / "news.fixture.json").read_text())
        assert meta["expect"] == {"rows": 12, "fill": {"story_id": 1.0, "headline": 1.0, "author": 0.75}}

        site.stories = 10
        again = run_fleet(life.env, "record", "news")
        assert again.returncode == 0, again.stderr
        assert "rows 12 -> 10" in again.stdout, again.stdout
        site.stories = 12
        assert "rows 10 -> 12" in run_fleet(life.env, "record", "news").stdout

        # a recording that fails leaves the fixture as it was
        before = (life.scrapers / "fixtures" / "news.har.zip").read_bytes()
        site.change_week = "2026-01-05"
        broken = run_fleet(life.env, "record", "news")
        assert broken.returncode == 2 and "is unchanged" in broken.stderr, broken.stderr
        assert (life.scrapers / "fixtures" / "news.har.zip").read_bytes() == before
    finally:
        site.__exit__(None, None, None)

    # offline: the site is gone, and the cache-busting image (never matched) is aborted quietly
    ok = run_fleet(life.env, "test")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "front_page" in ok.stdout and "news" in ok.stdout and ok.stdout.count(" pass ") == 2, ok.stdout

    meta_path = life.scrapers / "fixtures" / "news.fixture.json"
    meta = json.loads(meta_path.read_text())
    meta["expect"]["rows"] = 11
    meta["expect"]["fill"]["author"] = 0.5
    meta_path.write_text(json.dumps(meta))
    drift = run_fleet(life.env, "test", "news")
    assert drift.returncode == 1 and "expected rows 11 -> 12" in drift.stdout and "fill of author 50% -> 75%" in drift.stdout

    # an xhr the fixture lacks fails, naming its URL
    har = life.scrapers / "fixtures" / "news.har.zip"
    with zipfile.ZipFile(har) as z:
        members = {n: z.read(n) for n in z.namelist()}
    doc = json.loads(members["har.har"])
    doc["log"]["entries"] = [e for e in doc["log"]["entries"] if "/api/news" not in e["request"]["url"]]
    members["har.har"] = json.dumps(doc).encode()
    with zipfile.ZipFile(har, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    missing = run_fleet(life.env, "test", "news", "front_page")
    assert missing.returncode == 1, missing.stdout
    assert "not in the fixture: GET http://127.0.0.1:" in missing.stdout and "/api/news?week=" in missing.stdout
    assert " pass " in missing.stdout  # front_page still passes

    meta_path.write_text("{not json")
    corrupt = run_fleet(life.env, "test", "news")
    assert corrupt.returncode == 1 and f"{meta_path}: not a readable fixture" in corrupt.stdout
    meta_path.write_text(json.dumps({**meta, "source": "front_page"}))
    foreign = run_fleet(life.env, "test", "news")
    assert foreign.returncode == 1 and "the fixture of source 'front_page', not of 'news'" in foreign.stdout

    unknown = run_fleet(life.env, "test", "nope")
    assert unknown.returncode == 2 and "unknown source(s): nope" in unknown.stderr
