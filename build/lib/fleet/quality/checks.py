"""Data-quality checks on the stored artifacts: pure logic over polars frames and the artifact store (no Dagster).

Per source and week (``source_checks``):
  non_empty  ERROR when the week's frame has no rows.
  volume     rows against the median of the source's last 4 successful weeks: below ``warn_ratio`` x median is WARN,
             below ``error_ratio`` x median is ERROR. With fewer than 2 weeks of history, against the row count of
             the source's recorded fixture instead (fleet/quality/baseline.py), or skipped (passed) without one.
  coverage   selector rot: per column, the share of rows with a value; for string columns also the share of rows whose
             value has the usual *shape* (see below). A drop of more than 20 percentage points against the median of
             the trailing weeks is WARN. With fewer than 2 weeks of history, the fill is judged against the fixture's
             (the same 20 points) or, without one, the declared schema (a column null in nearly all rows); skipped
             for an empty frame. A column the scraper declares ``optional`` is never judged on its fill.
  Each outcome's ``skipped`` says why its usual judgement was not made, and what judged instead.
  schema     the stored columns and dtypes equal the declared schema; ERROR listing the differences.

Shape signature (string columns, kept deliberately simple): every profile stores the column's *length band*, the 5th
and 95th percentile of the lengths of its non-null values that week. The usual band of a source is the median of the
trailing weeks' bounds, widened by ``1 + hi // 10`` characters on each side. A row "has the usual shape" when its
value is non-null and its length falls inside the band. A stored profile's own ``shape`` share is measured against
its own week's band (so about 90 % of the filled share by construction); this week's share is measured against the
usual band, so a selector that starts returning "Add to basket" instead of "£12.99" shows up as a drop. A shape
problem is reported only for columns whose fill rate did not already drop (one message per column).

Across sources (``week_checks``): sources missing this week (with the category from their outcome), the week's
total rows against the trailing weeks, and staleness.

A week is a Monday ``YYYY-MM-DD``; "now" is always the week being checked, never today's date.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import statistics
from typing import Any, Mapping

import polars as pl

from fleet.quality import baseline as first_weeks
from fleet.quality import gate
from fleet.quality.outcome import (  # noqa: F401  (CheckOutcome: fleet.quality.checks.CheckOutcome, as ever)
    COVERAGE_DROP, HISTORY_WEEKS, MIN_HISTORY, CheckOutcome, checks_key, short_history,
)
from fleet.quality.outcome import fmt_num as _fmt_num, pct as _pct, weeks_text as _weeks_text
from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore

SUCCESS_STATUSES = ("ok", "partial")          # a week that counts as history / as "last good"
_WEEK_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def profile_key(source: str) -> str:
    return f"raw/{source}.profile.json"


# --------------------------------------------------------------------------------------------------- profiles


def _is_string(dtype) -> bool:
    return dtype == pl.String or dtype == pl.Categorical or dtype == pl.Enum


def _length_band(lengths: pl.Series) -> list[int] | None:
    lengths = lengths.drop_nulls()
    if lengths.len() == 0:
        return None
    lo = lengths.quantile(0.05, interpolation="lower")
    hi = lengths.quantile(0.95, interpolation="higher")
    return [int(lo), int(hi)]


def _widen(band: list[int]) -> tuple[int, int]:
    slack = 1 + int(band[1]) // 10
    return max(0, int(band[0]) - slack), int(band[1]) + slack


def _lengths(frame: pl.DataFrame, col: str) -> pl.Series:
    return frame.get_column(col).cast(pl.String).str.len_chars()


def _shape_share(frame: pl.DataFrame, col: str, band: tuple[int, int]) -> float:
    if frame.height == 0:
        return 0.0
    lengths = _lengths(frame, col)
    inside = lengths.is_between(band[0], band[1], closed="both").fill_null(False)
    return float(inside.sum()) / frame.height


def profile(frame: pl.DataFrame, bands: Mapping[str, list[int]] | None = None) -> dict:
    """``{"rows", "coverage": {col: share non-null}, "shape": {col: share in band}, "bands": {col: [lo, hi]}}``.

    ``bands`` are the lengths bands to measure ``shape`` against (the usual ones); by default each string column is
    measured against its own band, which is what ``save_profile`` should store. Shares are of all rows, 0.0 when
    the frame is empty.
    """
    n = frame.height
    coverage: dict[str, float] = {}
    shape: dict[str, float] = {}
    own_bands: dict[str, list[int]] = {}
    for col, dtype in frame.schema.items():
        coverage[col] = (float(n - frame.get_column(col).null_count()) / n) if n else 0.0
        if not _is_string(dtype):
            continue
        band = _length_band(_lengths(frame, col)) if n else None
        if band is not None:
            own_bands[col] = band
        if bands and col in bands:
            measure = _widen(list(bands[col]))
        else:
            measure = tuple(band) if band is not None else None
        shape[col] = _shape_share(frame, col, measure) if measure is not None else 0.0
    return {"rows": n, "coverage": coverage, "shape": shape, "bands": own_bands}


def save_profile(store: ArtifactStore, week: str, source: str, prof: dict) -> None:
    store.write_json(week, profile_key(source), prof)


def _successful(store: ArtifactStore, week: str, source: str) -> bool:
    out = keys.read_outcome(store, week, source) or {}
    return out.get("status") in SUCCESS_STATUSES and keys.rows_stored(store, week, out)


def _store_weeks(store: ArtifactStore) -> list[str]:
    return sorted(w for w in store.weeks() if _WEEK_RE.match(w))


def history(store: ArtifactStore, source: str, week: str, weeks: int = HISTORY_WEEKS) -> list[dict]:
    """Profiles of the source's last ``weeks`` successful weeks strictly before ``week``, newest first.

    Successful = outcome status ok/partial and the raw artifact exists, and not held by the quality gate (unless
    released): rows judged wrong are not what is usual, or a new source's all-null column, held in its first two
    weeks, would be the usual from its third. Each profile gets a ``"week"`` key. A week without a stored profile
    is profiled from its parquet file, and the profile is stored for next time.
    """
    found: list[dict] = []
    for w in reversed(_store_weeks(store)):
        if len(found) >= weeks:
            break
        if w >= week or not _successful(store, w, source) or gate.held(store, w, source):
            continue
        prof = store.read_json(w, profile_key(source))
        if not isinstance(prof, dict) or "rows" not in prof:
            prof = profile(store.read_parquet(w, keys.rows_key(keys.read_outcome(store, w, source))))
            try:
                save_profile(store, w, source, prof)
            except OSError:
                pass
        found.append({**prof, "week": w})
    return found


# --------------------------------------------------------------------------------------------------- per source


def _dtype_text(dtype) -> str:
    return str(dtype)


def _schema_check(schema: Mapping[str, Any], frame: pl.DataFrame) -> CheckOutcome:
    declared = pl.Schema(dict(schema))
    stored = frame.schema
    missing = [c for c in declared if c not in stored]
    extra = [c for c in stored if c not in declared and c not in provenance.COLUMNS]  # fleet's own, on every row
    wrong = [(c, declared[c], stored[c]) for c in declared if c in stored and stored[c] != declared[c]]
    problems = []
    if missing:
        problems.append("missing columns " + ", ".join(f"`{c}`" for c in missing))
    if extra:
        problems.append("unexpected columns " + ", ".join(f"`{c}` ({_dtype_text(stored[c])})" for c in extra))
    for c, want, got in wrong:
        problems.append(f"column `{c}` is {_dtype_text(got)}, declared {_dtype_text(want)}")
    meta = {"missing_columns": len(missing), "extra_columns": len(extra), "dtype_mismatches": len(wrong)}
    if problems:
        return CheckOutcome("schema", False, "ERROR", "schema mismatch: " + "; ".join(problems), meta)
    return CheckOutcome("schema", True, "ERROR", f"schema matches ({len(declared)} columns)", meta)


def _volume_check(rows: int, past: list[dict], warn_ratio: float, error_ratio: float,
                  base: first_weeks.Baseline) -> CheckOutcome:
    recent = past[:HISTORY_WEEKS]
    if len(recent) < MIN_HISTORY:
        out = first_weeks.volume(rows, base, short_history(len(recent)), warn_ratio, error_ratio)
        return dataclasses.replace(out, metadata={**out.metadata, "history_weeks": len(recent)})
    usual = float(statistics.median(int(p.get("rows", 0)) for p in recent))
    meta = {"rows": rows, "usual_rows": usual, "ratio": (rows / usual) if usual else 1.0, "history_weeks": len(recent)}
    text = f"{rows} rows, usual {_fmt_num(usual)}"
    if rows < error_ratio * usual:
        return CheckOutcome("volume", False, "ERROR", f"volume collapse: {text}", meta)
    if rows < warn_ratio * usual:
        return CheckOutcome("volume", False, "WARN", f"volume collapse: {text}", meta)
    return CheckOutcome("volume", True, "WARN", f"volume normal: {text}", meta)


def _median_of(past: list[dict], section: str, col: str) -> float | None:
    vals = [float(p[section][col]) for p in past if col in (p.get(section) or {})]
    return float(statistics.median(vals)) if len(vals) >= MIN_HISTORY else None


def _usual_bands(past: list[dict]) -> dict[str, list[int]]:
    cols = {c for p in past for c in (p.get("bands") or {})}
    out = {}
    for col in cols:
        bands = [p["bands"][col] for p in past if col in (p.get("bands") or {})]
        if len(bands) >= MIN_HISTORY:
            out[col] = [int(math.floor(statistics.median(b[0] for b in bands))),
                        int(math.ceil(statistics.median(b[1] for b in bands)))]
    return out


def _coverage_check(frame: pl.DataFrame, past: list[dict], schema: Mapping[str, Any], base: first_weeks.Baseline,
                    optional: tuple[str, ...]) -> CheckOutcome:
    recent = past[:HISTORY_WEEKS]
    if frame.height == 0:
        return CheckOutcome("coverage", True, "WARN", "no rows this week; coverage check skipped", {"rows": 0},
                            skipped="no rows (see non_empty)")
    if len(recent) < MIN_HISTORY:
        out = first_weeks.coverage(frame, schema, base, short_history(len(recent)), optional)
        return dataclasses.replace(out, metadata={**out.metadata, "history_weeks": len(recent)})
    bands = _usual_bands(recent)
    now = profile(frame, bands=bands)
    meta: dict[str, float] = {"rows": frame.height, "history_weeks": len(recent)}
    problems: list[str] = []
    for col in frame.columns:
        share = now["coverage"][col]
        meta[f"coverage/{col}"] = share
        usual = _median_of(recent, "coverage", col)
        if usual is not None:
            meta[f"usual_coverage/{col}"] = usual
            if usual - share > COVERAGE_DROP and col not in optional:
                problems.append(f"column `{col}` filled in {_pct(share)} of rows, usually {_pct(usual)}")
                continue
        if col in bands and col in now["shape"]:
            s_share = now["shape"][col]
            s_usual = _median_of(recent, "shape", col)
            meta[f"shape/{col}"] = s_share
            if s_usual is not None:
                meta[f"usual_shape/{col}"] = s_usual
                if s_usual - s_share > COVERAGE_DROP:
                    lo, hi = _widen(bands[col])
                    problems.append(f"column `{col}` has the usual shape (length {lo}-{hi}) in {_pct(s_share)} "
                                    f"of rows, usually {_pct(s_usual)}")
    if problems:
        return CheckOutcome("coverage", False, "WARN", "selector rot suspected: " + "; ".join(problems), meta)
    return CheckOutcome("coverage", True, "WARN", "column coverage as usual", meta)


def source_checks(source_name: str, schema: Mapping[str, Any], frame: pl.DataFrame, past: list[dict], *,
                  warn_ratio: float = 0.5, error_ratio: float = 0.1, week: str | None = None,
                  baseline: first_weeks.Baseline | None = None, optional: tuple[str, ...] = ()) -> list[CheckOutcome]:
    """The checks of one source's week, in the order non_empty, volume, coverage, schema (the asset adds
    structure; fleet/defs/assets.py carries them as one Dagster check).

    ``past`` is ``history(store, source, week)`` (newest first). ``week`` only appears in messages. ``baseline``
    (``baseline.for_source``: its fixture, else its schema, the default) judges a source with too little history.
    ``optional``: the columns the scraper allows to be null in any share of rows.
    """
    base = baseline or first_weeks.schema_only()
    rows = frame.height
    when = f" for week {week}" if week else ""
    non_empty = CheckOutcome(
        "non_empty", rows > 0, "ERROR",
        f"{rows} rows" if rows else f"empty feed: source {source_name} returned no rows{when}", {"rows": rows})
    return [non_empty, _volume_check(rows, past, warn_ratio, error_ratio, base),
            _coverage_check(frame, past, schema, base, tuple(optional)),
            _schema_check(schema, frame)]


# --------------------------------------------------------------------------------------------------- per week


def _weeks_between(a: str, b: str) -> int:
    return (dt.date.fromisoformat(b) - dt.date.fromisoformat(a)).days // 7


def last_good_week(store: ArtifactStore, source: str, week: str) -> str | None:
    """The newest week <= ``week`` in which the source succeeded (ok/partial with its artifact stored)."""
    for w in reversed(_store_weeks(store)):
        if w <= week and _successful(store, w, source):
            return w
    return None


def _week_rows(store: ArtifactStore, week: str, source: str) -> int | None:
    """The source's rows in the week's data, by consolidation's rule: those of its latest outcome, or, when that
    failed after an earlier attempt stored rows (a failed ``--refresh``), those kept from that attempt."""
    out, _ = keys.consolidated_outcome(store, week, source)
    if out is None:
        return None
    if isinstance(out.get("rows"), int):
        return out["rows"]
    return store.scan_parquet(week, keys.rows_key(out)).select(pl.len()).collect().item()


def week_checks(store: ArtifactStore, week: str, sources: list[str], k_stale: int = 2) -> list[dict]:
    """Checks across the week's sources. Returns every result, passed or not; alert on ``not d["passed"]``.

    Each dict: ``check`` ("missing" | "total_volume" | "stale"), ``source`` (None for total_volume), ``severity``,
    ``passed``, ``message``, ``last_good_week``; "missing" also carries ``category``, ``status``, ``error``,
    ``evidence`` and ``url`` from the source's outcome, "total_volume" ``rows`` and ``usual_rows``.

    missing       WARN: the source has no consolidated data this week (status not ok/empty/partial, or no artifact).
    total_volume  the sum of rows over ``sources`` against the median of the last 4 earlier weeks with any rows:
                  < 50 % WARN, < 10 % ERROR; skipped (passed) with fewer than 2 such weeks.
    stale         ERROR when the source succeeded once and then failed or did not run for ``k_stale`` or more
                  consecutive weeks up to and including ``week``: "stale: no successful week since W (N weeks)".
    """
    results: list[dict] = []
    total = 0
    for name in sources:
        good = last_good_week(store, name, week)
        rows = _week_rows(store, week, name)
        if rows is None:
            out = keys.read_outcome(store, week, name) or {}
            status = out.get("status") or "not run"
            error = out.get("error") or ("no attempt recorded this week" if not out else "no artifact stored")
            category = out.get("category")
            results.append({
                "check": "missing", "source": name, "severity": "WARN", "passed": False,
                "message": f"missing: source {name} has no data for week {week}: {status}"
                           f"{f' ({category})' if category else ''}: {error}",
                "last_good_week": good, "category": category, "status": status, "error": out.get("error"),
                "evidence": dict(out.get("evidence") or {}), "url": out.get("url")})
        else:
            total += rows
            results.append({"check": "missing", "source": name, "severity": "WARN", "passed": True,
                            "message": f"present: {rows} rows", "last_good_week": good, "category": None})
        if good is None:
            results.append({"check": "stale", "source": name, "severity": "ERROR", "passed": True,
                            "message": "never succeeded; staleness not applicable", "last_good_week": None})
            continue
        gap = _weeks_between(good, week)
        stale = gap >= max(1, k_stale)
        results.append({
            "check": "stale", "source": name, "severity": "ERROR", "passed": not stale,
            "message": (f"stale: no successful week since {good} ({_weeks_text(gap)})" if stale
                        else f"last successful week {good}"),
            "last_good_week": good})

    trailing: list[int] = []
    for w in reversed(_store_weeks(store)):
        if len(trailing) >= HISTORY_WEEKS:
            break
        if w >= week:
            continue
        t = sum(r for r in (_week_rows(store, w, n) for n in sources) if r)
        if t > 0:
            trailing.append(t)
    entry = {"check": "total_volume", "source": None, "severity": "WARN", "passed": True, "last_good_week": None,
             "rows": total, "usual_rows": None}
    if len(trailing) < MIN_HISTORY:
        entry["message"] = f"not enough history ({_weeks_text(len(trailing))}); check skipped"
    else:
        usual = float(statistics.median(trailing))
        entry["usual_rows"] = usual
        text = f"{total} rows across {len(sources)} sources, usual {_fmt_num(usual)}"
        if total < 0.1 * usual:
            entry.update(severity="ERROR", passed=False, message=f"total volume collapse: {text}")
        elif total < 0.5 * usual:
            entry.update(severity="WARN", passed=False, message=f"total volume collapse: {text}")
        else:
            entry["message"] = f"total volume normal: {text}"
    results.append(entry)
    return results
