"""fleet.checks against a real LocalArtifactStore with parquet artifacts and outcome json for several weeks."""
import datetime as dt

import polars as pl
import pytest

from fleet.quality import checks
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
def test_not_enough_history_skips(store, n_weeks):
    w = with_history(store, (50,) * n_weeks)
    res = run(store, w, frame(2, price_filled=0.0))
    text = "0 weeks" if n_weeks == 0 else "1 week"
    for name in ("volume", "coverage"):
        assert res[name].passed
        assert res[name].message == f"not enough history ({text}); check skipped"


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
