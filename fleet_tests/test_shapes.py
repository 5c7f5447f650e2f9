"""A real fleet has no shared format: sources whose columns clash in name and type, with nested, decimal, zoned,
boolean and non-ASCII columns and names a site might use (``source``, ``url``, ``fetched_at``), through real weekly
runs (Dagster, Chromium, git + git-lfs against the GitHub-like remote). Each source reaches main in a file of its
own with its own types, raw and processed; a type changed by a new version of a scraper is reported, never a
crash; a narrower re-run keeps the sources it does not know, and only an operator's drop removes one."""
import datetime as dt
import decimal
import io

import polars as pl

from fleet_tests.conftest import SOURCE, WEEK, committed_sources, run_fleet
from fleet_tests.gitremote import log, read_blob

W2 = "2026-11-23"

# The README's own idiom: rows by locator, each field by a locator inside the row.
WIDGETS = '''
import polars as pl
from fleet import Scraper

PAGE = """<table>
<tr class="w"><td class="sku">A-1</td><td class="price">9.5</td><td class="url">/a</td></tr>
<tr class="w"><td class="sku">B-2</td><td class="price">12.25</td><td class="url">/b</td></tr>
</table>"""


class Widgets(Scraper):
    """Widgets: a text sku and a float price."""
    name = "widgets"
    schema = {"sku": pl.String, "price": pl.Float64, "url": pl.String, "source": pl.String}
    key = ("sku",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await page.set_content(PAGE)
        for row in await page.locator("tr.w").all():
            yield {"sku": await row.locator("td.sku").inner_text(),
                   "price": float(await row.locator("td.price").inner_text()),
                   "url": await row.locator("td.url").inner_text(), "source": "the widget site's own column"}
'''

# The same column names as widgets, other types, and every kind of column polars has.
GIZMOS = '''
import datetime as dt
import decimal

import polars as pl
from fleet import Scraper


class Gizmos(Scraper):
    """Gizmos: an integer sku, the price as text, and nested, decimal, zoned and non-ASCII columns."""
    name = "gizmos"
    schema = {"sku": pl.Int64, "price": PRICE, "tags": pl.List(pl.String),
              "spec": pl.Struct({"w": pl.Int64, "unit": pl.String}), "cost": pl.Decimal(10, 2),
              "made": pl.Date, "seen": pl.Datetime("us", "UTC"), "in_stock": pl.Boolean, "größe ø": pl.Float64,
              "fetched_at": pl.String}
    key = ("sku",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await page.set_content("<ul><li data-sku='7'>  gizmo   seven </li><li data-sku='8'>gizmo eight</li></ul>")
        for i, item in enumerate(await page.locator("li").all()):
            sku = int(await item.get_attribute("data-sku"))
            yield {"sku": sku, "price": PRICES[i], "tags": [t for t in (await item.inner_text()).split()],
                   "spec": {"w": sku * 10, "unit": "mm"}, "cost": decimal.Decimal("1.25") * sku,
                   "made": dt.date(2026, 1, sku), "seen": dt.datetime(2026, 11, 16, sku, tzinfo=dt.timezone.utc),
                   "in_stock": sku % 2 == 0, "größe ø": sku / 2, "fetched_at": "the site's own time stamp"}
'''


def _gizmos(price_type: str, prices: list) -> str:
    return GIZMOS.replace("PRICE,", f"{price_type},").replace("PRICES[i]", f"{prices!r}[i]")


def _run(env, week, *args):
    res = run_fleet(env, "run", "--week", week, "--force", *args)
    return res, res.stdout + res.stderr


def test_sources_of_every_shape_each_keep_their_own_types_through_both_commits(fleet_env):
    full = fleet_env.tmp / "scrapers"
    full.mkdir()
    (full / "widgets.py").write_text(WIDGETS)
    (full / "gizmos.py").write_text(_gizmos("pl.String", ["10", "n/a"]))
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(full)}
    res, out = _run(env, WEEK)
    assert res.returncode == 0, out[-4000:]

    raw, processed = committed_sources(fleet_env.remote, WEEK), committed_sources(fleet_env.remote, WEEK, "processed")
    assert sorted(raw) == sorted(processed) == ["gizmos", "widgets"]
    w, g = raw["widgets"], raw["gizmos"]
    assert w.schema["price"] == pl.Float64 and w.schema["sku"] == pl.String, w.schema
    assert g.schema["price"] == pl.String and g.schema["sku"] == pl.Int64, g.schema
    assert g.schema["tags"] == pl.List(pl.String) and g.schema["spec"] == pl.Struct({"w": pl.Int64, "unit": pl.String})
    assert g.schema["cost"] == pl.Decimal(10, 2) and g.schema["seen"] == pl.Datetime("us", "UTC")
    assert g.schema["made"] == pl.Date and g.schema["in_stock"] == pl.Boolean and g.schema["größe ø"] == pl.Float64
    # a site's own "source", "url" and "fetched_at" columns are data; fleet's columns are namespaced
    assert w["source"].to_list() == ["the widget site's own column"] * 2 and set(w[SOURCE]) == {"widgets"}
    assert g["fetched_at"].to_list() == ["the site's own time stamp"] * 2
    assert g.filter(pl.col("sku") == 7)["cost"].item() == decimal.Decimal("8.75")
    assert g.filter(pl.col("sku") == 7)["tags"].item().to_list() == ["gizmo", "seven"]
    # post-processing keeps each source's types, and derives its own columns beside them
    pg = processed["gizmos"]
    assert {c: pg.schema[c] for c in g.columns} == dict(g.schema), pg.schema
    assert pg["_fleet_week"].unique().to_list() == [dt.date.fromisoformat(WEEK)] and pg["_fleet_row_id"].n_unique() == 2
    assert processed["widgets"].schema["price"] == pl.Float64

    # a new version of gizmos makes its price a number: reported as a change of type, never a crash
    (full / "gizmos.py").write_text(_gizmos("pl.Float64", [10.0, 11.5]))
    res, out = _run(env, W2)
    assert res.returncode == 0, out[-4000:]
    raw_msg = next(c["message"] for c in log(fleet_env.remote) if c["subject"] == f"fleet: raw rows for week {W2}")
    assert "Columns whose type changed (1): gizmos.price String -> Float64" in raw_msg, raw_msg
    assert "| gizmos | 2 | 2 | 0 | 0 | 2 | price: String -> Float64 |" in read_blob(
        fleet_env.remote, f"main:data/{W2}/CHANGES.md").decode()
    assert committed_sources(fleet_env.remote, W2)["gizmos"].schema["price"] == pl.Float64

    # the first week re-run by a narrower set of scrapers: gizmos's committed rows stay, labelled, never dropped
    narrow = fleet_env.tmp / "narrow"
    narrow.mkdir()
    (narrow / "widgets.py").write_text(WIDGETS)
    gizmos_commit = next(c["sha"] for c in log(fleet_env.remote) if c["subject"] == f"fleet: raw rows for week {WEEK}")
    res, out = _run({**env, "FLEET_SCRAPERS_DIR": str(narrow)}, WEEK)
    assert res.returncode == 0, out[-4000:]
    assert sorted(committed_sources(fleet_env.remote, WEEK)) == ["gizmos", "widgets"]
    assert committed_sources(fleet_env.remote, WEEK)["gizmos"].equals(g)
    assert (f"week folder {WEEK}/: 0 source(s) added, 1 written again, 1 kept as committed, not in this run: gizmos; "
            "0 dropped") in res.stdout, res.stdout
    assert (f"Sources kept as committed, not in this run (1): gizmos (from commit {gizmos_commit[:12]})"
            in log(fleet_env.remote, "main")[1]["message"])  # the raw commit names the commit that wrote its file
    table = res.stdout.split("commit raw")[0]
    assert "widgets" in table and "gizmos" not in table, table  # the table shows only the sources this run knows
    changes_md = read_blob(fleet_env.remote, f"main:data/{WEEK}/CHANGES.md").decode()
    assert "| widgets | 2 |" in changes_md and "| gizmos | 2 |" in changes_md, changes_md  # gizmos's line is kept
    assert changes_md.count("kept from an earlier run of this week") == 2, changes_md  # in the raw and processed tables

    # only the operator's drop removes a source's files, in a commit that says so
    res = run_fleet({**env, "FLEET_SCRAPERS_DIR": str(narrow)}, "commit", "--week", WEEK, "--drop", "gizmos")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"week folder {WEEK}/: 0 source(s) added, 1 written again, 0 kept as committed, not in this run; 1 dropped: gizmos" in res.stdout
    assert sorted(committed_sources(fleet_env.remote, WEEK)) == sorted(committed_sources(fleet_env.remote, WEEK, "processed")) == ["widgets"]
    assert "dropped by the operator" in log(fleet_env.remote)[0]["message"]
    assert "gizmos" not in read_blob(fleet_env.remote, f"main:data/{WEEK}/CHANGES.md").decode()

    # fleet show reads a source's committed rows back, in each format
    shown = run_fleet(env, "show", "widgets", "--week", WEEK, "--format", "csv")
    assert shown.returncode == 0, shown.stderr
    assert pl.read_csv(io.StringIO(shown.stdout))["sku"].to_list() == ["A-1", "B-2"]
    latest = run_fleet(env, "show", "gizmos", "--format", "json")  # the newest week that has it
    assert latest.returncode == 0, latest.stderr
    assert pl.read_ndjson(io.StringIO(latest.stdout))["price"].to_list() == [10.0, 11.5]
    table = run_fleet(env, "show", "gizmos", "--week", W2)
    assert f"gizmos: raw rows of week {W2} (2 rows)" in table.stdout and "größe ø" in table.stdout
    gone = run_fleet(env, "show", "gizmos", "--week", WEEK)
    assert gone.returncode == 2 and "holds no raw rows of week 2026-11-16 for source gizmos" in gone.stderr


def test_post_processing_keeps_each_shape_and_dedups_only_sources_of_one_shape(tmp_path):
    """Unit: the same row from two sources of one shape is kept once (by the first source's name); a source of
    another shape with equal values is not compared; nested and non-ASCII columns pass whole."""
    from fleet.storage.store import LocalArtifactStore
    from fleet.transform import layout
    from fleet.transform.consolidate import with_source
    from fleet.transform.postprocess import post_process
    from fleet.storage import store as keys

    store = LocalArtifactStore(tmp_path)
    frames = {"a": pl.DataFrame({"sku": ["x", "y"], "price": [1.0, 2.0]}),
              "b": pl.DataFrame({"sku": ["y ", "z"], "price": [2.0, 3.0]}),  # "y " normalises to a's "y"
              "c": pl.DataFrame({"sku": [1, 2], "price": ["1.0", "2.0"]}),
              "d": pl.DataFrame({"k": [1], "tags": [["p", "q"]], "ñ é": [{"a": decimal.Decimal("1.5")}]})}
    files = {name: layout.store_key("raw", name) for name in frames}
    for name, frame in frames.items():
        store.sink_parquet(WEEK, files[name], with_source(frame.lazy(), name))
    store.write_json(WEEK, keys.CONSOLIDATED_META_KEY, {"files": files, "made": "m1"})
    assert post_process(store, WEEK) == 6
    out = {n: store.read_parquet(WEEK, layout.store_key("processed", n)) for n in frames}
    assert out["b"]["sku"].to_list() == ["z"] and out["a"]["sku"].to_list() == ["x", "y"]
    assert out["c"].schema["sku"] == pl.Int64 and out["c"].height == 2
    assert out["d"].schema["tags"] == pl.List(pl.String) and out["d"]["ñ é"].struct.field("a").item() == decimal.Decimal("1.5")
    assert store.read_json(WEEK, keys.PROCESSED_META_KEY)["from"] == "m1"


def test_a_week_of_the_one_file_layout_reads_as_per_source_frames():
    from fleet.transform import layout

    wide = pl.DataFrame({"source": ["a", "a", "b"], "sku": ["1", "2", "3"], "price": [1.0, 2.0, None],
                         "title": [None, None, "t"], "fetched_at": [None] * 3}, schema_overrides={"fetched_at": pl.Datetime("us", "UTC")})
    parts = {n: lf.collect() for n, lf in layout.split_legacy(wide).items()}
    assert sorted(parts) == ["a", "b"]
    assert parts["a"].columns == [SOURCE, "sku", "price", "_fleet_fetched_at"]
    assert parts["b"].columns == [SOURCE, "sku", "title", "_fleet_fetched_at"]
