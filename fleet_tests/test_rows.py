"""Row validation is strict: a value polars would null, round, cast or refuse without a column name is a
BadRowError that names the source, the column, the row's key and the value."""
import datetime as dt
import decimal
import re

import polars as pl
import pytest

from fleet import BadRowError
from fleet.scraping.discovery import discover
from fleet.storage import store as keys
from fleet.storage.frames import build_frame, decode_row, encode_row, validate_row
from fleet.storage.store import LocalArtifactStore

D = decimal.Decimal


def _bad(schema, row, key=("id",), index=3):
    with pytest.raises(BadRowError) as raised:
        validate_row("src", schema, key, row, index)
    return str(raised.value)


@pytest.mark.parametrize("dtype, value, lo, hi", [
    (pl.Int64, 2 ** 70, -2 ** 63, 2 ** 63 - 1), (pl.Int64, -2 ** 63 - 1, -2 ** 63, 2 ** 63 - 1),
    (pl.UInt8, -5, 0, 255), (pl.UInt8, 256, 0, 255), (pl.Int8, 128, -128, 127), (pl.UInt64, 2 ** 64, 0, 2 ** 64 - 1),
    (pl.Int32(), 2 ** 31, -2 ** 31, 2 ** 31 - 1),
])
def test_an_out_of_range_integer_names_source_column_key_and_value(dtype, value, lo, hi):
    msg = _bad({"id": pl.String, "n": dtype}, {"id": "a7", "n": value})
    assert msg == (f"source src: column 'n' expects {dtype}, got {value} (int): out of range ({lo} to {hi}) "
                   f"in row 3 (key {{'id': 'a7'}})")


def test_an_out_of_range_key_names_the_row_by_its_number():
    msg = _bad({"id": pl.Int64}, {"id": 2 ** 70}, index=1)
    assert msg.startswith("source src: column 'id' expects Int64, got 1180591620717411303424 (int): out of range")
    assert msg.endswith("in row 1")


@pytest.mark.parametrize("dtype, value, detail", [
    (pl.List(pl.String), "not-a-list", ""),
    (pl.List(pl.String), b"ab", ""),
    (pl.List(pl.String), {"a": 1}, ""),
    (pl.List(pl.String), [1, 2], ": item 0 expects String, got 1 (int)"),
    (pl.List(pl.String), ["a", None, 3], ": item 2 expects String, got 3 (int)"),
    (pl.List(pl.Int8), [1, 300], ": item 1 expects Int8, got 300 (int): out of range (-128 to 127)"),
    (pl.List(pl.List(pl.Int64)), [[1], ["x"]], ": item 1 expects List(Int64), got ['x'] (list): item 0 expects Int64, "
                                               "got 'x' (str)"),
    (pl.Array(pl.Int64, 2), [1], ": 1 items, the array has 2"),
    (pl.Struct({"a": pl.Int64}), {"b": 1}, ": field 'b' is not in the struct (fields: a)"),
    (pl.Struct({"a": pl.Int64}), {"a": "1"}, ": field 'a' expects Int64, got '1' (str)"),
    (pl.Struct({"a": pl.Int64}), [1], ""),
    (pl.Decimal(10, 2), "abc", ""),
    (pl.Decimal(10, 2), "1.5", ""),
    (pl.Decimal(10, 2), True, ""),
    (pl.Decimal(10, 2), D("1.234"), ": more than 2 digits after the point (it would be rounded to 1.23)"),
    (pl.Decimal(10, 2), 1.005, ": more than 2 digits after the point (it would be rounded to 1.00)"),
    (pl.Decimal(10, 2), 10 ** 8, ": more than 8 digits before the point"),
    (pl.Decimal(10, 2), 10 ** 300, ": more than 8 digits before the point"),
    (pl.Decimal(10, 2), D("NaN"), ": not a finite number"),
    (pl.Decimal(10, 2), D("-Infinity"), ": not a finite number"),
    (pl.Enum(["a", "b"]), "c", ": not one of the categories ['a', 'b']"),
    (pl.Float32, 1e39, ": out of range (a Float32 is at most 3.40282e+38 in size)"),
    (pl.Float64, 10 ** 400, ": too large for a float"),
    (pl.Int64, 1.0, ""),
    (pl.Binary, "text", ""),
    (pl.Time, dt.datetime(2026, 1, 1), ""),
    (pl.Datetime("ns"), dt.datetime(2500, 1, 1), ": out of range for nanoseconds (1677-09-21 to 2262-04-11, or 292 years)"),
    (pl.Datetime("ns", "UTC"), dt.datetime(1600, 1, 1, tzinfo=dt.timezone.utc),
     ": out of range for nanoseconds (1677-09-21 to 2262-04-11, or 292 years)"),
    (pl.Duration("ns"), dt.timedelta(days=400 * 365), ": out of range for nanoseconds (1677-09-21 to 2262-04-11, or 292 years)"),
])
def test_a_wrong_nested_decimal_or_enum_value_is_an_error_not_a_null(dtype, value, detail):
    msg = _bad({"id": pl.Int64, "v": dtype}, {"id": 7, "v": value})
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    assert msg == (f"source src: column 'v' expects {dtype}, got {shown} ({type(value).__name__}){detail} "
                   f"in row 3 (key {{'id': 7}})")


@pytest.mark.parametrize("dtype, value, stored", [
    (pl.List(pl.String), ["a", None], ["a", None]),
    (pl.List(pl.String), ("a", "b"), ["a", "b"]),
    (pl.List(pl.List(pl.Int64)), [[1], [], None], [[1], [], None]),
    (pl.Array(pl.Int64, 2), [1, 2], [1, 2]),
    (pl.Struct({"a": pl.Int64, "b": pl.String}), {"a": 1}, {"a": 1, "b": None}),
    (pl.Decimal(10, 2), D("1.5"), D("1.50")),
    (pl.Decimal(10, 2), D("1.500"), D("1.50")),
    (pl.Decimal(10, 2), 5, D("5.00")),
    (pl.Decimal(10, 2), 1.25, D("1.25")),
    (pl.Decimal(10, 2), D("-99999999.99"), D("-99999999.99")),
    (pl.Enum(["a", "b"]), "b", "b"),
    (pl.Float32, 1.5, 1.5),
    (pl.Float64, 3, 3.0),
    (pl.UInt64, 2 ** 64 - 1, 2 ** 64 - 1),
    (pl.Int8, -128, -128),
    (pl.Time, dt.time(6, 30), dt.time(6, 30)),
    (pl.Duration("us"), dt.timedelta(days=1, microseconds=5), dt.timedelta(days=1, microseconds=5)),
    (pl.Binary, b"\x00\xff", b"\x00\xff"),
    (pl.Datetime("us", "UTC"), dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
     dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)),
    (pl.Datetime("ns"), dt.datetime(2262, 4, 11), dt.datetime(2262, 4, 11)),
    (pl.Datetime("us"), dt.datetime(2500, 1, 1), dt.datetime(2500, 1, 1)),
    (pl.Duration("ns"), dt.timedelta(days=-290 * 365), dt.timedelta(days=-290 * 365)),
])
def test_a_good_value_is_stored_as_it_was_through_the_spool(dtype, value, stored):
    schema = {"id": pl.Int64, "v": dtype}
    row = validate_row("src", schema, ("id",), {"id": 1, "v": value}, 0)
    spooled = decode_row(encode_row(row))  # the worker spools each row as JSON; the runner builds the frame
    frame = build_frame("src", schema, ("id",), [spooled])
    assert frame.schema == pl.Schema(schema)
    assert frame.row(0) == (1, stored)


def test_the_frame_checks_rows_again_and_never_raises_a_raw_polars_error():
    """Rows spooled by an older fleet were checked by older rules; building the frame checks them again
    (polars would raise a ComputeError naming no column for the first two, and make ['x'] of the third)."""
    schema = {"id": pl.Int64, "n": pl.UInt8, "tags": pl.List(pl.String)}
    good = {"id": 1, "n": 1, "tags": ["a"]}
    with pytest.raises(BadRowError, match=re.escape(
            "source src: column 'n' expects UInt8, got -5 (int): out of range (0 to 255) in row 1 (key {'id': 2})")):
        build_frame("src", schema, ("id",), [good, {"id": 2, "n": -5, "tags": []}])
    with pytest.raises(BadRowError, match=re.escape("source src: column 'id' expects Int64, got 1180591620717411303424")):
        build_frame("src", schema, ("id",), [good, {"id": 2 ** 70, "n": 1, "tags": []}])
    with pytest.raises(BadRowError, match=re.escape("column 'tags' expects List(String), got 'x' (str) in row 1")):
        build_frame("src", schema, ("id",), [good, {"id": 2, "n": 1, "tags": "x"}])


def test_a_row_polars_refuses_after_validation_is_still_a_bad_row_naming_the_source(monkeypatch):
    """Should the checks ever miss a value polars refuses, the frame still fails as the source's bad row."""
    from fleet.storage import frames

    monkeypatch.setattr(frames, "_problem", lambda dtype, value: None)  # a gap in the checks
    with pytest.raises(BadRowError, match=r"^source src: its rows do not make a frame of its schema: could not append"):
        build_frame("src", {"id": pl.Int64}, ("id",), [{"id": 1}, {"id": 2 ** 70}])


HUGE_INT = '''
import polars as pl
from fleet import Scraper

class HugeInt(Scraper):
    name = "huge_int"
    schema = {"id": pl.Int64, "tags": pl.List(pl.String)}
    key = ("id",)
    async def scrape(self, page, ctx):
        yield {"id": 1, "tags": ["a"]}
'''


def test_the_runner_records_a_bad_spooled_row_as_the_source_failing(tmp_path):
    """What the runner does with an attempt's spool (reviewer's s1/huge_int.py): the old code let polars'
    ComputeError out of run_source, so no outcome was stored and the step failed with an error naming nothing."""
    from fleet.engine import outcome

    (tmp_path / "scrapers").mkdir()
    (tmp_path / "scrapers" / "huge_int.py").write_text(HUGE_INT)
    (source,) = discover([tmp_path / "scrapers"])
    store = LocalArtifactStore(tmp_path / "artifacts")
    week = "2026-11-16"
    work = store.workdir(week, keys.spool_key(source.name))
    (work / "rows-1.jsonl").write_text(encode_row({"id": 1, "tags": ["a"]}) + "\n"
                                       + encode_row({"id": 2 ** 70, "tags": ["b"]}) + "\n")
    out = outcome.finish(source, week, store, "run", "1", False, work, {"status": "ok", "category": None}, 0.5)
    assert (out.status, out.category) == ("failed", "source")
    assert out.error.startswith("source huge_int: column 'id' expects Int64, got 1180591620717411303424 (int): "
                                "out of range")
    assert keys.read_outcome(store, week, source.name)["error"] == out.error
    assert not store.exists(week, keys.raw_key(source.name, "1"))
