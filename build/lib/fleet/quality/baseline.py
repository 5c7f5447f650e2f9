"""A source's baseline while it has too little history: the expectation of its recorded fixture (row count and
per-column fill, fleet/lifecycle/fixtures.py), or, with none, its declared schema (every column not declared
``optional`` filled). Until the source has ``MIN_HISTORY`` successful weeks, the volume and coverage checks judge
its week against it, so a new source whose selector matches nothing is caught in its first week."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

import polars as pl

from fleet.quality.outcome import COVERAGE_DROP, CheckOutcome, fmt_num, pct

# Judged against its schema alone, a declared column filled in fewer rows than this is "null in (nearly) all
# rows": a selector that matches nothing, or matches a row or two by accident. A column that may legitimately be
# that empty is declared in the scraper's ``optional``.
SCHEMA_MIN_FILL = 0.05


@dataclass(frozen=True)
class Baseline:
    origin: str                                 # "fixture" | "schema"
    rows: int | None = None                     # the fixture's row count; None: the schema sets none
    fill: dict = field(default_factory=dict)    # the fixture's share of non-null values per column
    unusable: str = ""                          # why a fixture that is there could not be used


def schema_only(unusable: str = "") -> Baseline:
    return Baseline("schema", unusable=unusable)


def for_source(source) -> Baseline:
    """The baseline of a discovered source (fleet/scraping/discovery.py ``Source``): its fixture's expectation when
    ``<scrapers>/fixtures/NAME.fixture.json`` is there and readable, else its schema. Only the expectation is
    read, not the recording: the check needs no HAR."""
    from fleet.lifecycle import fixtures

    path = fixtures.meta_path(source)
    if not path.exists():
        return schema_only()
    try:
        data = json.loads(path.read_text())
        expect = data["expect"]
        if data.get("fleet_fixture") != fixtures.FORMAT or data.get("source") != source.name:
            raise ValueError(f"not a format-{fixtures.FORMAT} fixture of source {source.name}")
        fill = {str(c): float(v) for c, v in (expect.get("fill") or {}).items()}
        return Baseline("fixture", int(expect["rows"]), fill)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return schema_only(f"the fixture {path} is unreadable ({type(exc).__name__}: {exc}); record it again "
                           f"with `fleet record {source.name}`")


def _instead(base: Baseline, what: str) -> str:
    if base.origin == "fixture":
        return f"{what} judged against the fixture instead"
    return (f"{base.unusable}; " if base.unusable else "") + f"{what} judged against the declared schema instead"


def volume(rows: int, base: Baseline, short: str, warn_ratio: float, error_ratio: float) -> CheckOutcome:
    """Rows against the fixture's count as against a trailing median (WARN below ``warn_ratio``, ERROR below
    ``error_ratio``); skipped, saying so, when the baseline is the schema, which sets no count."""
    meta = {"rows": rows}
    if base.rows is None:
        why = (f"{short}; " + (f"{base.unusable}, so " if base.unusable else "")
               + "no fixture to judge the row count against (`fleet record` records one)")
        return CheckOutcome("volume", True, "WARN", f"skipped: {why}", meta, skipped=why)
    meta.update(fixture_rows=base.rows, ratio=(rows / base.rows) if base.rows else 1.0)
    text, skipped = f"{rows} rows, the fixture {base.rows}", f"{short}; {_instead(base, 'rows')}"
    if rows < error_ratio * base.rows:
        return CheckOutcome("volume", False, "ERROR", f"volume collapse: {text}", meta, skipped=skipped)
    if rows < warn_ratio * base.rows:
        return CheckOutcome("volume", False, "WARN", f"volume collapse: {text}", meta, skipped=skipped)
    return CheckOutcome("volume", True, "WARN", f"volume normal: {text}", meta, skipped=skipped)


def coverage(frame: pl.DataFrame, schema: Mapping, base: Baseline, short: str,
             optional: tuple[str, ...] = ()) -> CheckOutcome:
    """Per declared column, its share of rows with a value against the fixture's (a drop of more than
    ``COVERAGE_DROP``), or, for a column the fixture does not know, against the schema (below ``SCHEMA_MIN_FILL``).
    A column in ``optional`` may be null in any share of rows. Value shapes need weeks of history: not judged."""
    n = frame.height
    meta: dict[str, float] = {"rows": n}
    problems = []
    for col in schema:
        if col not in frame.columns:
            continue  # the schema check names it
        share = (n - frame.get_column(col).null_count()) / n
        meta[f"coverage/{col}"] = share
        if col in optional:
            continue
        want = base.fill.get(col)
        if want is not None:
            meta[f"fixture_coverage/{col}"] = want
            if want - share > COVERAGE_DROP:
                problems.append(f"column `{col}` filled in {pct(share)} of rows, the fixture {pct(want)}")
        elif share < SCHEMA_MIN_FILL:
            nulls = n - round(share * n)
            problems.append(f"column `{col}` is null in {nulls} of {fmt_num(n)} rows; a declared column must be filled "
                            f"in at least {pct(SCHEMA_MIN_FILL)} of rows, or be named in the scraper's `optional`")
    skipped = f"{short}; {_instead(base, 'fill')}, value shape not judged"
    if problems:
        return CheckOutcome("coverage", False, "WARN", "selector rot suspected: " + "; ".join(problems), meta,
                            skipped=skipped)
    text = ("column coverage as the fixture's" if base.origin == "fixture" else
            f"every declared column filled in at least {pct(SCHEMA_MIN_FILL)} of rows")
    return CheckOutcome("coverage", True, "WARN", text, meta, skipped=skipped)
