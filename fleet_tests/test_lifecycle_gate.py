"""`fleet test` as a gate, `fleet new` writing where `fleet run` reads, and the CLI's one-line usage errors and
`--version`, through real parts: the sandboxed discovery, Chromium recording and replaying the newsroom demo site."""
import importlib.metadata
import re

from fleet.config import PROJECT_ROOT
from fleet.demo.newsroom import SCRAPER, Newsroom
from fleet_tests.conftest import run_fleet

HELPER = '''"""A helper that breaks when imported."""

raise RuntimeError("the helper is broken")
'''
VIA_HELPER = '''import polars as pl

from fleet import Scraper
from ._helper import nothing
'''
SYNTAX = '''import polars as pl


def broken(:
    pass
'''
BAD_NAME = SCRAPER.replace('name = "news"', 'name = "Bad-Name"')


def _rows(stdout: str) -> dict[str, tuple[str, str]]:
    """The table's rows: source -> (result, detail)."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"(\S+)\s+(pass|fail|untested)\s+\d+\s+[\d.]+\s+(.*)$", line)
        if m:
            out[m[1]] = (m[2], m[3])
    return out


def test_test_fails_broken_and_untested_sources_and_new_writes_where_run_reads(fleet_env):
    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers)}
    with Newsroom() as site:
        made = run_fleet(env, "new", "front_page", site.url + "/news?week=2026-11-16")
    assert made.returncode == 0, made.stdout + made.stderr
    assert f"`fleet run` reads it from FLEET_SCRAPERS_DIR ({scrapers})" in made.stdout, made.stdout
    assert (scrapers / "front_page.py").is_file() and (scrapers / "fixtures" / "front_page.har.zip").is_file()

    # the site is gone: the replay is offline
    ok = run_fleet(env, "test")
    assert ok.returncode == 0 and _rows(ok.stdout) == {"front_page": ("pass", "")}, ok.stdout + ok.stderr

    (scrapers / "news.py").write_text(SCRAPER)  # a source without a fixture
    untested = run_fleet(env, "test")
    assert untested.returncode == 1, untested.stdout + untested.stderr
    assert _rows(untested.stdout)["news"] == ("untested", "no fixture; record one with `fleet record news`")
    assert "fleet: untested (no fixture): news; record each with `fleet record NAME`, or pass --allow-untested" \
        in untested.stdout
    named = run_fleet(env, "test", "news")
    assert named.returncode == 1 and _rows(named.stdout) == {"news": ("untested", _rows(untested.stdout)["news"][1])}
    allowed = run_fleet(env, "test", "--allow-untested")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert {k: v[0] for k, v in _rows(allowed.stdout).items()} == {"front_page": "pass", "news": "untested"}
    assert "allowed by --allow-untested: news" in allowed.stdout

    # modules that do not import or validate fail, at their file and line, --allow-untested or not
    (scrapers / "_helper.py").write_text(HELPER)
    (scrapers / "via_helper.py").write_text(VIA_HELPER)
    (scrapers / "syntax.py").write_text(SYNTAX)
    (scrapers / "bad_name.py").write_text(BAD_NAME)
    broken = run_fleet(env, "test", "--allow-untested")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    rows = _rows(broken.stdout)
    assert {k: v[0] for k, v in rows.items()} == {"front_page": "pass", "news": "untested", "bad_name": "fail",
                                                   "syntax": "fail", "via_helper": "fail"}, broken.stdout
    assert rows["via_helper"][1].startswith(f"{scrapers / '_helper.py'}:3: scraper module via_helper.py failed to "
                                            "import: RuntimeError: the helper is broken"), rows["via_helper"]
    assert rows["syntax"][1].startswith(f"{scrapers / 'syntax.py'}:4: scraper module syntax.py failed to import: "
                                        "SyntaxError"), rows["syntax"]
    class_line = BAD_NAME.splitlines().index(next(ln for ln in BAD_NAME.splitlines() if ln.startswith("class "))) + 1
    assert rows["bad_name"][1].startswith(f"{scrapers / 'bad_name.py'}:{class_line}: scraper module bad_name.py:"), \
        rows["bad_name"]
    assert "'Bad-Name'" in rows["bad_name"][1]
    # named, a broken source fails alone
    one = run_fleet(env, "test", "syntax")
    assert one.returncode == 1 and list(_rows(one.stdout)) == ["syntax"], one.stdout


def test_new_without_scrapers_dir_refuses_writing_nothing(fleet_env):
    bundled = sorted(p.name for p in (PROJECT_ROOT / "scrapers").rglob("*"))
    res = run_fleet(fleet_env.env, "new", "mine", "http://127.0.0.1:9/")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        "fleet: error: no FLEET_SCRAPERS_DIR is set: `fleet new` writes where `fleet run` reads, and without it that "
        "is fleet's bundled demo scrapers; make your folder and point it there (mkdir scrapers && export "
        "FLEET_SCRAPERS_DIR=$PWD/scrapers)"], res.stderr
    assert sorted(p.name for p in (PROJECT_ROOT / "scrapers").rglob("*")) == bundled


def test_version_and_usage_errors_in_one_line(fleet_env):
    version = run_fleet(fleet_env.env, "--version")
    assert version.returncode == 0 and version.stdout == f"fleet {importlib.metadata.version('fleet')}\n"
    cases = {("run", "--bogus"): "run: no such option '--bogus'",
             ("new",): "new: missing argument 'NAME'",
             ("commit", "--stage", "nope"): "commit: invalid value for '--stage': 'nope' is not one of 'raw', 'processed'",
             ("gc", "--keep-weeks", "many"): "gc: invalid value for '--keep-weeks': 'many' is not a valid integer",
             ("nosuch",): "no such command 'nosuch'",
             ("run", "--week", "2026-13-01"): "run: invalid value for --week: not a week: '2026-13-01'"}
    for args, what in cases.items():
        res = run_fleet(fleet_env.env, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fleet: error: ") and what in lines[0], (args, res.stderr)
        assert "--help`)" in lines[0] and "Usage:" not in res.stderr and res.stdout == "", (args, res.stderr)
    # `fleet` alone still prints its help
    bare = run_fleet(fleet_env.env)
    assert "Commands:" in bare.stdout + bare.stderr and "fleet: error" not in bare.stderr


def test_scan_keeps_where_each_broken_source_is(tmp_path, monkeypatch):
    """Discovery's own pass (as the sandboxed process runs it), run from inside the scrapers' folder: each broken
    source keeps the file and line of what is wrong (a helper's, when the helper raised)."""
    from fleet.scraping.discovery import scan

    (tmp_path / "missing.py").write_text("import polars as pl\n\nimport no_such_module_anywhere\n")
    (tmp_path / "_helper.py").write_text(HELPER)
    (tmp_path / "via_helper.py").write_text(VIA_HELPER)
    (tmp_path / "bad_name.py").write_text(BAD_NAME)
    (tmp_path / "twin_a.py").write_text(SCRAPER)
    (tmp_path / "twin_b.py").write_text("\n\n" + SCRAPER)
    monkeypatch.chdir(tmp_path)
    where = {s.name: s.where for s in scan([tmp_path])}
    class_line = next(i for i, ln in enumerate(SCRAPER.splitlines(), 1) if ln.startswith("class "))
    assert where == {"missing": f"{tmp_path / 'missing.py'}:3", "via_helper": f"{tmp_path / '_helper.py'}:3",
                     "bad_name": f"{tmp_path / 'bad_name.py'}:{class_line}",
                     "twin_a": f"{tmp_path / 'twin_a.py'}:{class_line}",
                     "twin_b": f"{tmp_path / 'twin_b.py'}:{class_line + 2}"}, where
