"""Discovery: which classes are sources, and how a broken module or class fails without touching healthy sources."""
import textwrap

from fleet.scraping.contract import NAME_RE
from fleet.scraping.discovery import discover

HEAD = "import polars as pl\nfrom fleet import Scraper\n"


def _write(d, name, body):
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(HEAD + textwrap.dedent(body))


def _by_name(*dirs):
    for d in dirs:  # pytest's 0700 folder: as root, discovery imports them as the sandbox's user, who must read them
        d.chmod(0o755)
    sources = discover(list(dirs))
    by_name = {s.name: s for s in sources}
    assert len(by_name) == len(sources), [s.name for s in sources]
    return by_name


def test_a_base_class_without_its_own_name_is_not_a_source(tmp_path):
    # books.py: the base class must not become a second 'books' (both were failed as "defined more than once")
    _write(tmp_path, "books.py", '''
        class BookBase(Scraper):
            """shared helpers for the book sources"""
            schema = {"isbn": pl.String}
            key = ("isbn",)
        class Books(BookBase):
            name = "books"
            async def scrape(self, page, ctx):
                yield {"isbn": "1"}
    ''')
    # shops.py: the base class must not become a failing source 'shops' next to the healthy one
    _write(tmp_path, "shops.py", '''
        class ShopBase(Scraper):
            schema = {"isbn": pl.String}
            key = ("isbn",)
        class Shops(ShopBase):
            name = "shop_prices"
            async def scrape(self, page, ctx):
                yield {"isbn": "1"}
    ''')
    sources = _by_name(tmp_path)
    assert set(sources) == {"books", "shop_prices"}
    assert not sources["books"].broken and sources["books"].class_name == "Books"
    assert sources["books"].schema == {"isbn": __import__("polars").String} and sources["books"].key == ("isbn",)
    assert not sources["shop_prices"].broken and sources["shop_prices"].class_name == "Shops"


def test_abstract_marks_a_base_class_even_with_a_name_and_is_not_inherited(tmp_path):
    _write(tmp_path, "family.py", '''
        class Template(Scraper):
            abstract = True
            name = "template"
            schema = {"id": pl.Int64}
            key = ("id",)
        class Child(Template):
            name = "child"
            async def scrape(self, page, ctx):
                yield {"id": 1}
    ''')
    _write(tmp_path, "bases.py", '''
        class OnlyABase(Scraper):
            abstract = True
            schema = {"id": pl.Int64}
    ''')
    _write(tmp_path, "odd.py", '''
        class Odd(Scraper):
            abstract = "yes"
            name = "odd"
            schema = {"id": pl.Int64}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
    ''')
    sources = _by_name(tmp_path)
    assert set(sources) == {"child", "odd"}  # a module of abstract bases only is not a source
    assert not sources["child"].broken
    assert "abstract must be True or False, got 'yes'" in sources["odd"].error


def test_a_module_with_scraper_classes_but_no_source_fails_saying_why(tmp_path):
    _write(tmp_path, "noname.py", '''
        class NoName(Scraper):
            schema = {"id": pl.Int64}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {}
    ''')
    err = _by_name(tmp_path)["noname"].error
    assert "noname.py" in err and "NoName" in err and "name must be a slug" in err and "abstract = True" in err


def test_a_broken_module_never_disables_a_healthy_source_of_the_same_name(tmp_path):
    (tmp_path / "prices.py").write_text("def broken(:\n")
    _write(tmp_path, "good_v2.py", '''
        class Good(Scraper):
            name = "prices"
            schema = {"id": pl.Int64}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
    ''')
    sources = _by_name(tmp_path)
    assert not sources["prices"].broken and sources["prices"].class_name == "Good"
    broken = [s for s in sources.values() if s.broken]
    assert len(broken) == 1
    assert broken[0].name != "prices" and broken[0].name.startswith("prices") and NAME_RE.match(broken[0].name)
    assert "prices.py failed to import: SyntaxError" in broken[0].error
    assert "more than once" not in broken[0].error


def test_a_broken_class_never_disables_a_healthy_source_of_the_module_name(tmp_path):
    # catalog.py's broken class would fail under 'catalog', the name of a healthy source defined elsewhere
    _write(tmp_path / "a", "catalog.py", '''
        class Broken(Scraper):
            name = "catalog_v2"
            schema = {"id": pl.Int64}
            key = ("missing",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
    ''')
    _write(tmp_path / "b", "other.py", '''
        class Catalog(Scraper):
            name = "catalog"
            schema = {"id": pl.Int64}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
    ''')
    sources = _by_name(tmp_path / "a", tmp_path / "b")
    assert not sources["catalog"].broken and sources["catalog"].class_name == "Catalog"
    (broken,) = [s for s in sources.values() if s.broken]
    assert "key columns ['missing'] are not in the schema" in broken.error


def test_each_broken_class_of_a_module_keeps_its_own_error(tmp_path):
    _write(tmp_path, "multi.py", '''
        class A(Scraper):
            name = "Bad A"
            schema = {"id": pl.Int64}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
        class B(Scraper):
            name = "b"
            schema = {"id": pl.Int64}
            key = ("missing",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
        class C(Scraper):
            name = "c"
            schema = {"id": "int"}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
        class Fine(Scraper):
            name = "fine"
            schema = {"id": pl.Int64}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
    ''')
    sources = _by_name(tmp_path)
    assert not sources["fine"].broken
    errors = sorted(s.error for s in sources.values() if s.broken)
    assert len(errors) == 3, errors
    assert not any("more than once" in e for e in errors)
    assert any("multi.A: name must be a slug" in e and "'Bad A'" in e for e in errors)
    assert any("scraper 'b': key columns ['missing'] are not in the schema" in e for e in errors)
    assert any("scraper 'c': column 'id' has dtype 'int', which is not a polars dtype" in e for e in errors)
    assert all(e.startswith("scraper module multi.py: ") for e in errors)
    assert all(NAME_RE.match(n) for n in sources)


def test_the_same_name_twice_fails_both_under_their_module_names(tmp_path):
    body = '''
        class S(Scraper):
            name = "twin"
            schema = {"id": pl.Int64}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
    '''
    _write(tmp_path, "one.py", body)
    _write(tmp_path, "two.py", body)
    _write(tmp_path, "healthy.py", body.replace('"twin"', '"one"').replace("class S", "class One"))
    sources = _by_name(tmp_path)
    assert not sources["one"].broken  # the healthy source 'one' keeps its name against one.py's placeholder
    twins = [s for s in sources.values() if s.broken]
    assert len(twins) == 2 and "twin" not in sources
    assert sources["two"] in twins
    for s in twins:
        assert "scraper name 'twin' is defined more than once" in s.error
        assert "one.py" in s.error and "two.py" in s.error


def test_broken_modules_of_one_file_name_in_two_directories_both_fail(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "oops.py").write_text(f"raise RuntimeError('{sub} is broken')\n")
    sources = _by_name(tmp_path / "a", tmp_path / "b")
    assert len(sources) == 2
    assert sorted(s.error.split(": ", 1)[1] for s in sources.values()) == [
        "RuntimeError: a is broken", "RuntimeError: b is broken"]
    assert all(NAME_RE.match(n) and n.startswith("oops") for n in sources)


def test_a_hostile_class_fails_as_a_source_and_never_stops_discovery(tmp_path):
    _write(tmp_path, "hostile.py", '''
        class Boom(type):
            @property
            def schema(cls):
                raise ZeroDivisionError("schema is hostile")
        class Hostile(Scraper, metaclass=Boom):
            name = "hostile"
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
    ''')
    _write(tmp_path, "fine.py", '''
        class Fine(Scraper):
            name = "fine"
            schema = {"id": pl.Int64}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {"id": 1}
    ''')
    sources = _by_name(tmp_path)
    assert not sources["fine"].broken
    assert "ZeroDivisionError: schema is hostile" in sources["hostile"].error


def test_a_name_too_long_for_dagster_fails_as_its_source_and_the_definitions_still_load(tmp_path):
    """A source's name is also a Dagster tag value, at most 63 characters. A 64-character name used to stop the
    definitions from loading (DagsterInvalidDefinitionError on the tag), so no source of the week ran."""
    import os
    import subprocess
    import sys

    from fleet.scraping.contract import NAME_MAX
    from fleet_tests.conftest import ROOT

    body = '''
        class S(Scraper):
            name = "{name}"
            schema = {{"id": pl.Int64}}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {{"id": 1}}
    '''
    _write(tmp_path, "longest.py", body.format(name="n" * NAME_MAX))
    _write(tmp_path, "too_long.py", body.format(name="n" * (NAME_MAX + 1)))
    stem = "m" * 100  # a broken module is named after its file: cut to the limit too
    (tmp_path / f"{stem}.py").write_text("raise RuntimeError('broken on import')\n")
    by_name = _by_name(tmp_path)
    assert by_name["n" * NAME_MAX].error is None
    assert "too_long" in by_name and f"of at most {NAME_MAX} characters" in by_name["too_long"].error
    assert "(64 characters)" in by_name["too_long"].error
    assert by_name[stem[:NAME_MAX]].error and "broken on import" in by_name[stem[:NAME_MAX]].error
    assert all(len(n) <= NAME_MAX and NAME_RE.match(n) for n in by_name)
    # and Dagster takes all of them: the definitions load, each a raw asset
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(FLEET_SCRAPERS_DIR=str(tmp_path), FLEET_HOME=str(tmp_path / "home"))
    code = ("from fleet.defs.definitions import defs\n"
            "print(sorted(k.path[-1] for k in defs.resolve_all_asset_keys() if k.path[0] == 'raw'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert eval(out.stdout.strip().splitlines()[-1]) == sorted(by_name)


def test_placeholder_names_stay_within_the_limit_even_when_they_collide(tmp_path):
    from fleet.scraping.contract import NAME_MAX
    from fleet.scraping.discovery import _Placeholder

    p = _Placeholder(tmp_path / f"{'x' * 90}.py", "broken", "SomeVeryLongClassNameThatGoesOnAndOn" * 3)
    names = [n for n, _ in zip(p.names(), range(60))]
    assert len(set(names)) == len(names)
    assert all(len(n) <= NAME_MAX and NAME_RE.match(n) for n in names), [n for n in names if len(n) > NAME_MAX]
