"""fleet.checks against a real LocalArtifactStore with parquet artifacts and outcome json for several weeks."""
import datetime as dt

import polars as pl
import pytest

from fleet.quality import baseline, checks
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore

SCHEMA = {"sku": pl.String, "title": pl.String, "price": pl.Float64}
SRC = "book_prices"


def week(i: int) -> str:
    return (dt.date(2026, 10, 5) + dt.timedelta(weeks=i)).isoformat()


def frame(n: int, *, price_filled: float = 0.99, title=lambda i: f"Book number {i:04d}") -> pl.DataFrame:
    filled = round(n * price_filled)
    return pl.DataFrame({
        "sku": [f"SKU-{i:05d}" for i in range(n)],
        "title": [title(i) for i in range(n)],
        "price": [10.0 + i % 7 if i < filled else None for i in range(n)],
    }, schema=SCHEMA)


def put(store, w: str, df: pl.DataFrame | None, status: str = "ok", source: str = SRC, category=None,
        save_profile: bool = True):
    attempt = keys.new_attempt_id()
    if df is not None:
        store.write_parquet(w, keys.raw_key(source, attempt), df)
        if save_profile:
            checks.save_profile(store, w, source, checks.profile(df))
    keys.write_outcome(store, w, {
        "source": source, "week": w, "attempt": attempt, "status": status, "category": category, "rows": 0 if df is None else df.height,
        "error": None if status in ("ok", "empty") else f"{status} for a reason",
        "evidence": {"screenshot": f"/ev/{source}/shot.png", "html": f"/ev/{source}/page.html"} if df is None else {},
        "url": "http://example.test/list"})


@pytest.fixture
def store(tmp_path):
    return LocalArtifactStore(tmp_path / "artifacts")


def run(store, w, df, source=SRC):
    past = checks.history(store, source, w)
    return {o.name: o for o in checks.source_checks(source, SCHEMA, df, past, week=w)}


def with_history(store, rows=(50, 50, 50, 50)):
    for i, n in enumerate(rows):
        put(store, week(i), frame(n))
    return week(len(rows))


def test_volume_warn_at_40_percent(store):
    w = with_history(store, (100, 100, 100, 100))
    res = run(store, w, frame(40))
    assert not res["volume"].passed
    assert res["volume"].severity == "WARN"
    assert res["volume"].message == "volume collapse: 40 rows, usual 100"
    assert res["volume"].metadata["rows"] == 40 and res["volume"].metadata["usual_rows"] == 100


def test_volume_error_at_5_percent(store):
    w = with_history(store, (100, 100, 100, 100))
    res = run(store, w, frame(5))
    assert (res["volume"].passed, res["volume"].severity) == (False, "ERROR")
    assert res["volume"].message == "volume collapse: 5 rows, usual 100"


def test_volume_uses_median_of_last_four_successful_weeks(store):
    # An old week, a failed week and an empty week are not history.
    for i, n in enumerate((1000, 50, 60, 40, 50)):
        put(store, week(i), frame(n))
    put(store, week(5), None, status="failed", category="source")
    put(store, week(6), frame(0), status="empty")
    past = checks.history(store, SRC, week(7))
    assert [p["week"] for p in past] == [week(4), week(3), week(2), week(1)]
    res = {o.name: o for o in checks.source_checks(SRC, SCHEMA, frame(20), past)}
    assert res["volume"].message == "volume collapse: 20 rows, usual 50"
    # Never looks at the week itself or later weeks.
    assert [p["week"] for p in checks.history(store, SRC, week(2))] == [week(1), week(0)]


def test_normal_week_has_no_warning(store):
    w = with_history(store)
    res = run(store, w, frame(48))
    assert all(o.passed for o in res.values()), [o.message for o in res.values()]
    assert res["volume"].message == "volume normal: 48 rows, usual 50"
    assert res["coverage"].message == "column coverage as usual"
    assert res["coverage"].metadata["coverage/price"] == pytest.approx(round(48 * 0.99) / 48)


def test_coverage_selector_rot_names_column(store):
    w = with_history(store, (100, 100, 100, 100))
    res = run(store, w, frame(100, price_filled=0.12))
    cov = res["coverage"]
    assert (cov.passed, cov.severity) == (False, "WARN")
    assert cov.message == "selector rot suspected: column `price` filled in 12% of rows, usually 99%"
    assert cov.metadata["coverage/price"] == pytest.approx(0.12)
    assert cov.metadata["usual_coverage/price"] == pytest.approx(0.99)
    assert res["volume"].passed and res["schema"].passed


def test_coverage_shape_change_in_string_column(store):
    w = with_history(store, (100, 100, 100, 100))
    # The title selector now hits a button: always filled, wrong shape.
    res = run(store, w, frame(100, title=lambda i: "Add"))
    cov = res["coverage"]
    assert not cov.passed and cov.severity == "WARN"
    assert cov.message.startswith("selector rot suspected: column `title` has the usual shape")
    assert "in 0% of rows, usually 100%" in cov.message
    assert cov.metadata["coverage/title"] == 1.0 and cov.metadata["shape/title"] == 0.0


@pytest.mark.parametrize("n_weeks", [0, 1])
def test_too_little_history_is_judged_against_the_schema_and_says_what_it_skipped(store, n_weeks):
    """Before, a source with fewer than 2 weeks had its volume and coverage skipped, and an all-null `price`
    passed: with no fixture, a declared column null in (nearly) all rows fails in the first week."""
    w = with_history(store, (50,) * n_weeks)
    res = run(store, w, frame(20, price_filled=0.0))
    text = "0 weeks" if n_weeks == 0 else "1 week"
    cov, vol = res["coverage"], res["volume"]
    assert (cov.passed, cov.severity) == (False, "WARN")
    assert cov.message == ("selector rot suspected: column `price` is null in 20 of 20 rows; a declared column must "
                           "be filled in at least 5% of rows, or be named in the scraper's `optional`")
    assert cov.skipped == f"{text} of history, needs 2; fill judged against the declared schema instead, value shape not judged"
    assert cov.metadata["coverage/price"] == 0.0 and cov.metadata["history_weeks"] == n_weeks
    assert vol.passed and vol.skipped == (f"{text} of history, needs 2; no fixture to judge the row count against "
                                          "(`fleet record` records one)")
    assert vol.message == "skipped: " + vol.skipped
    assert not res["non_empty"].skipped and not res["schema"].skipped


@pytest.mark.parametrize("filled, passed", [(1.0, True), (0.1, True), (0.05, True), (0.04, False), (0.0, False)])
def test_first_week_without_a_fixture_fails_only_a_nearly_empty_column(store, filled, passed):
    res = run(store, week(0), frame(100, price_filled=filled))
    assert res["coverage"].passed is passed, res["coverage"].message
    if passed:
        assert res["coverage"].message == "every declared column filled in at least 5% of rows"


def test_an_optional_column_may_be_empty_from_the_first_week_and_drop_later(store):
    res = {o.name: o for o in checks.source_checks(SRC, SCHEMA, frame(20, price_filled=0.0), [],
                                                   optional=("price",))}
    assert res["coverage"].passed and res["coverage"].metadata["coverage/price"] == 0.0
    w = with_history(store, (100, 100, 100, 100))  # usually 99% filled; an optional column's drop is no rot
    past = checks.history(store, SRC, w)
    res = {o.name: o for o in checks.source_checks(SRC, SCHEMA, frame(100, price_filled=0.1), past,
                                                   optional=("price",))}
    assert res["coverage"].passed and res["coverage"].message == "column coverage as usual"
    assert not res["coverage"].skipped
    # a required column's drop still is
    res = run(store, w, frame(100, price_filled=0.1))
    assert not res["coverage"].passed


def fixture(tmp_path, expect: dict | str, name: str = SRC):
    """A discovered source with a fixture expectation next to its module (fleet/lifecycle/fixtures.py's layout)."""
    import json

    from fleet.lifecycle import fixtures
    from fleet.scraping.discovery import Source

    source = Source(name=name, module_path=tmp_path / "scrapers" / f"{name}.py", class_name="X", description="",
                    schema=SCHEMA, key=("sku",), timeout_s=60)
    path = fixtures.meta_path(source)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(expect if isinstance(expect, str) else json.dumps(
        {"fleet_fixture": fixtures.FORMAT, "source": name, "week": week(0), "demo_url": None, "expect": expect}))
    return source


def first_week(source, df, **kw):
    base = baseline.for_source(source)
    return {o.name: o for o in checks.source_checks(source.name, SCHEMA, df, [], baseline=base, **kw)}


def test_first_week_is_judged_against_the_fixture(tmp_path):
    source = fixture(tmp_path, {"rows": 100, "fill": {"sku": 1.0, "title": 1.0, "price": 0.9}})
    res = first_week(source, frame(95, price_filled=0.75))  # 15 points below the fixture: as usual
    assert all(o.passed for o in res.values()), [o.message for o in res.values()]
    assert res["volume"].message == "volume normal: 95 rows, the fixture 100"
    assert res["volume"].skipped == "0 weeks of history, needs 2; rows judged against the fixture instead"
    assert res["coverage"].message == "column coverage as the fixture's"
    assert res["coverage"].metadata["fixture_coverage/price"] == 0.9
    assert res["coverage"].skipped == ("0 weeks of history, needs 2; fill judged against the fixture instead, value "
                                       "shape not judged")

    res = first_week(source, frame(100, price_filled=0.6))  # more than 20 points below
    assert (res["coverage"].passed, res["coverage"].severity) == (False, "WARN")
    assert res["coverage"].message == "selector rot suspected: column `price` filled in 60% of rows, the fixture 90%"


@pytest.mark.parametrize("rows, passed, severity", [(60, True, "WARN"), (40, False, "WARN"), (9, False, "ERROR")])
def test_first_week_rows_far_below_the_fixture_collapse_as_volume(tmp_path, rows, passed, severity):
    source = fixture(tmp_path, {"rows": 100, "fill": {}})
    vol = first_week(source, frame(rows))["volume"]
    assert (vol.passed, vol.severity) == (passed, severity)
    if not passed:
        assert vol.message == f"volume collapse: {rows} rows, the fixture 100"
        assert vol.metadata["fixture_rows"] == 100 and vol.metadata["ratio"] == rows / 100


def test_a_fixture_that_expects_an_empty_column_allows_it(tmp_path):
    """The shops fixture: `rating` is filled only by deep runs, recorded at 0%."""
    source = fixture(tmp_path, {"rows": 20, "fill": {"sku": 1.0, "title": 1.0, "price": 0.0}})
    assert first_week(source, frame(20, price_filled=0.0))["coverage"].passed


def test_a_column_the_fixture_does_not_know_is_judged_against_the_schema(tmp_path):
    source = fixture(tmp_path, {"rows": 20, "fill": {"sku": 1.0, "title": 1.0}})
    cov = first_week(source, frame(20, price_filled=0.0))["coverage"]
    assert not cov.passed and "column `price` is null in 20 of 20 rows" in cov.message


@pytest.mark.parametrize("text, why", [
    ("{not json", "JSONDecodeError"),
    ('{"fleet_fixture": 1, "source": "other", "expect": {"rows": 3}}', "not a format-1 fixture of source book_prices"),
    ('{"fleet_fixture": 1, "source": "book_prices"}', "KeyError"),
])
def test_an_unreadable_fixture_falls_back_to_the_schema_and_says_so(tmp_path, text, why):
    source = fixture(tmp_path, text)
    res = first_week(source, frame(20, price_filled=0.0))
    assert not res["coverage"].passed
    for name in ("volume", "coverage"):
        assert f"the fixture {tmp_path / 'scrapers' / 'fixtures'}/book_prices.fixture.json is unreadable (" in \
            res[name].skipped and why in res[name].skipped and "`fleet record book_prices`" in res[name].skipped


def test_with_two_weeks_of_history_the_fixture_no_longer_judges(store, tmp_path):
    source = fixture(tmp_path, {"rows": 1000, "fill": {"price": 1.0}})
    w = with_history(store, (50, 50))
    res = {o.name: o for o in checks.source_checks(SRC, SCHEMA, frame(50), checks.history(store, SRC, w),
                                                   baseline=baseline.for_source(source))}
    assert res["volume"].message == "volume normal: 50 rows, usual 50" and not res["volume"].skipped
    assert res["coverage"].message == "column coverage as usual" and not res["coverage"].skipped


def test_weeks_the_gate_held_are_not_history_until_released(store):
    """A new source's all-null price, held in its first two weeks, must not become its usual in the third."""
    import dataclasses

    from fleet.quality import gate

    for i in range(2):
        put(store, week(i), frame(50, price_filled=0.0))
        held = run(store, week(i), frame(50, price_filled=0.0))
        assert not held["coverage"].passed
        store.write_json(week(i), checks.checks_key(SRC), [dataclasses.asdict(o) for o in held.values()])
    assert checks.history(store, SRC, week(2)) == []
    res = run(store, week(2), frame(50, price_filled=0.0))
    assert not res["coverage"].passed and res["coverage"].skipped.startswith("0 weeks of history, needs 2;")
    gate.release(store, week(0), [SRC], by="test", note="price is really unknown")
    assert [p["week"] for p in checks.history(store, SRC, week(2))] == [week(0)]


def test_first_week_failures_the_gate_holds(store, tmp_path):
    """Which first-week failures block: coverage (as always), and a volume below the ERROR ratio of the fixture's
    rows; a WARN volume is alerted and committed."""
    import dataclasses

    from fleet.quality import gate

    for rows, price, held in ((100, 1.0, []), (40, 1.0, []), (5, 1.0, ["volume"]), (100, 0.0, ["coverage"])):
        source = fixture(tmp_path, {"rows": 100, "fill": {"price": 1.0}})
        res = first_week(source, frame(rows, price_filled=price))
        store.write_json(week(0), checks.checks_key(SRC), [dataclasses.asdict(o) for o in res.values()])
        assert [c["name"] for c in gate.blocking_failures(store, week(0), SRC)] == held


def test_empty_frame(store):
    w = with_history(store)
    res = run(store, w, frame(0))
    assert (res["non_empty"].passed, res["non_empty"].severity) == (False, "ERROR")
    assert res["non_empty"].message == f"empty feed: source {SRC} returned no rows for week {w}"
    assert res["coverage"].passed and "skipped" in res["coverage"].message
    assert res["schema"].passed
    assert res["volume"].severity == "ERROR" and not res["volume"].passed


def test_schema_mismatch_error(store):
    w = with_history(store)
    bad = frame(50).with_columns(pl.col("price").cast(pl.String)).drop("sku").with_columns(pl.lit(1).alias("extra"))
    res = run(store, w, bad)
    sch = res["schema"]
    assert (sch.passed, sch.severity) == (False, "ERROR")
    assert "missing columns `sku`" in sch.message
    assert "unexpected columns `extra` (Int32)" in sch.message
    assert "column `price` is String, declared Float64" in sch.message


def test_history_falls_back_to_parquet_and_caches_profile(store):
    for i in range(3):
        put(store, week(i), frame(50), save_profile=False)
    assert not store.exists(week(0), checks.profile_key(SRC))
    past = checks.history(store, SRC, week(3))
    assert [p["rows"] for p in past] == [50, 50, 50]
    assert store.exists(week(0), checks.profile_key(SRC))
    assert past[0]["bands"]["title"] == [16, 16]


def test_profile_is_json_ready(store):
    prof = checks.profile(frame(10, price_filled=0.5))
    assert prof["rows"] == 10 and prof["coverage"]["price"] == 0.5 and prof["coverage"]["sku"] == 1.0
    assert set(prof["shape"]) == {"sku", "title"} and prof["bands"]["sku"] == [9, 9]


# ---------------------------------------------------------------------------------------------- week checks


def by(results, check, source=None):
    return [r for r in results if r["check"] == check and r["source"] == source][0]


def test_staleness_error_after_k_weeks(store):
    put(store, week(0), frame(50))
    put(store, week(1), frame(50))
    put(store, week(2), None, status="failed", category="source")
    # week(3): did not run at all for this source; another source keeps the week directory alive.
    put(store, week(3), frame(10), source="other")
    put(store, week(4), None, status="timeout", category="infra")

    r = checks.week_checks(store, week(2), [SRC], k_stale=2)
    assert by(r, "stale", SRC)["passed"]
    r = checks.week_checks(store, week(3), [SRC], k_stale=2)
    stale = by(r, "stale", SRC)
    assert (stale["passed"], stale["severity"]) == (False, "ERROR")
    assert stale["message"] == f"stale: no successful week since {week(1)} (2 weeks)"
    assert stale["last_good_week"] == week(1)
    r = checks.week_checks(store, week(4), [SRC], k_stale=3)
    assert by(r, "stale", SRC)["message"] == f"stale: no successful week since {week(1)} (3 weeks)"
    # Never reads the future: at week(1) the source is fine.
    assert by(checks.week_checks(store, week(1), [SRC]), "stale", SRC)["passed"]


def test_never_succeeded_is_not_stale(store):
    put(store, week(0), None, status="failed", category="source")
    put(store, week(5), None, status="failed", category="source")
    stale = by(checks.week_checks(store, week(5), [SRC]), "stale", SRC)
    assert stale["passed"] and stale["last_good_week"] is None


def test_missing_sources_with_categories(store):
    put(store, week(0), frame(50))
    put(store, week(0), frame(30), source="b")
    put(store, week(1), None, status="timeout", category="infra")
    put(store, week(1), frame(30), source="b")
    r = checks.week_checks(store, week(1), [SRC, "b", "c"])
    miss = by(r, "missing", SRC)
    assert not miss["passed"] and miss["category"] == "infra" and miss["status"] == "timeout"
    assert miss["evidence"]["screenshot"].endswith("shot.png") and miss["last_good_week"] == week(0)
    assert miss["message"] == f"missing: source {SRC} has no data for week {week(1)}: timeout (infra): timeout for a reason"
    assert by(r, "missing", "b")["passed"]
    c = by(r, "missing", "c")
    assert not c["passed"] and c["status"] == "not run" and c["category"] is None


def test_total_volume(store):
    for i in range(4):
        put(store, week(i), frame(60))
        put(store, week(i), frame(40), source="b")
    put(store, week(4), frame(20))
    put(store, week(4), frame(20), source="b")
    tot = by(checks.week_checks(store, week(4), [SRC, "b"]), "total_volume")
    assert (tot["passed"], tot["severity"]) == (False, "WARN")
    assert tot["message"] == "total volume collapse: 40 rows across 2 sources, usual 100"
    put(store, week(5), frame(5))
    put(store, week(5), None, status="failed", source="b")
    tot = by(checks.week_checks(store, week(5), [SRC, "b"]), "total_volume")
    assert (tot["passed"], tot["severity"], tot["rows"], tot["usual_rows"]) == (False, "ERROR", 5, 100)
    tot = by(checks.week_checks(store, week(1), [SRC, "b"]), "total_volume")
    assert tot["passed"] and tot["message"] == "not enough history (1 week); check skipped"
    tot = by(checks.week_checks(store, week(3), [SRC, "b"]), "total_volume")
    assert tot["passed"] and tot["message"] == "total volume normal: 100 rows across 2 sources, usual 100"


def test_optional_is_validated_and_reaches_the_source(tmp_path):
    from fleet.scraping.discovery import discover

    head = "import polars as pl\nfrom fleet import Scraper\n\n\nclass S(Scraper):\n"
    body = ("    schema = {'sku': pl.String, 'discount': pl.Float64}\n    key = ('sku',)\n"
            "    async def scrape(self, page, ctx):\n        yield {'sku': 'a'}\n")
    for name, optional in (("good", "('discount',)"), ("unknown", "('rebate',)"), ("keyed", "('sku',)"),
                           ("text", "'discount'")):
        (tmp_path / f"{name}.py").write_text(head + f"    name = {name!r}\n    optional = {optional}\n" + body)
    tmp_path.chmod(0o755)  # as root, discovery imports them as the sandbox's user
    found = {s.name: s for s in discover([tmp_path])}
    assert found["good"].optional == ("discount",) and not found["good"].broken
    assert "optional columns ['rebate'] are not in the schema" in found["unknown"].error
    assert "key columns ['sku'] cannot be optional: a row's key is never null" in found["keyed"].error
    assert "optional must be a tuple of column names, got 'discount'" in found["text"].error
