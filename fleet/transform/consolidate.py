"""Consolidation: every successful source's stored raw rows for a week in one file (polars, lazy, streamed into the
store), with the rows carried forward for sources that failed (fleet/lifecycle/carry.py)."""
from __future__ import annotations

import polars as pl

from fleet.lifecycle import carry as carrying
from fleet.quality import gate
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore


def week_outcomes(store: ArtifactStore, week: str, sources: list[str]) -> dict[str, dict]:
    """Each source's stored outcome for the week; a source with none is reported as not run."""
    out = {}
    for name in sources:
        rec = keys.read_outcome(store, week, name)
        out[name] = rec or {"source": name, "status": "not run", "category": None, "error": "no attempt recorded this week"}
    return out


def consolidate(store: ArtifactStore, week: str, sources: list[str], carry: dict[str, int] | None = None) -> dict:
    """Union every successful source's raw rows for ``week`` into one file with a ``source`` column.

    A source whose latest attempt failed after an earlier one of the week stored rows (``fleet run --refresh``
    against a site that is down now) keeps those rows: they are included, and listed under ``kept`` with the
    latest attempt's failure, which is still the source's status. Dropping them would take them out of the week's
    next raw commit.

    A source the quality gate holds (fleet/quality/gate.py) is left out, as a failed one is, under ``held``; one
    released from it is included and listed under ``released`` with its note.

    Returns a summary: included sources with row counts, kept ones, missing sources with why, the included ones
    scraped into this (past) week under ``fleet/force=true`` with the date they were scraped on, and total rows.
    A missing source named in ``carry`` (name -> its carry_forward_weeks) may contribute its last good week's rows,
    listed under ``carried`` (fleet/lifecycle/carry.py); every row has a ``stale_since`` column, null when fresh."""
    outcomes = week_outcomes(store, week, sources)
    included, kept, missing, forced, held, released, frames = {}, {}, {}, {}, {}, {}, []
    for name, rec in sorted(outcomes.items()):  # sources in name order: the file is deterministic without a sort
        taken, from_earlier = keys.consolidated_outcome(store, week, name)
        if taken is None:  # a usable outcome whose parquet is corrupt (keys.rows_problem) is reported, never taken
            why = keys.rows_stored(store, week, rec) and keys.rows_problem(store, week, rec)
            missing[name] = ({"status": "failed", "category": "infra", "error": why} if why else
                             {"status": rec.get("status"), "category": rec.get("category"), "error": rec.get("error")})
            continue
        judged = gate.verdict(store, week, name, taken)
        if judged and judged[0] == "held":
            held[name] = judged[1]
            continue
        if judged:
            released[name] = {"note": judged[1].get("note", ""), "checks": judged[1].get("checks", [])}
        if from_earlier:
            kept[name] = {"status": rec.get("status"), "category": rec.get("category"), "error": rec.get("error"),
                          "rows_from_run": taken.get("run_id"), "rows_from_attempt": taken.get("attempt")}
        included[name] = int(taken.get("rows") or 0)
        if taken.get("forced"):
            forced[name] = taken["forced"]
        frames.append(carrying.fresh(store.scan_parquet(week, keys.rows_key(taken)).with_columns(pl.lit(name).alias("source"))))
    carried, stale = carrying.carry(store, week, missing, carry or {})
    frames += stale
    total = sum(included.values()) + sum(c["rows"] for c in carried.values())
    summary = {"week": week, "included": included, "kept": kept, "missing": missing, "forced": forced, "rows": total,
               "carried": carried, "held": held, "released": released}
    if total == 0:
        return summary
    lf = pl.concat(frames, how="diagonal_relaxed")
    cols = ["source"] + [c for c in lf.collect_schema().names() if c != "source"]
    store.sink_parquet(week, keys.CONSOLIDATED_KEY, lf.select(cols))
    store.write_json(week, keys.CONSOLIDATED_META_KEY, summary)
    return summary
