"""Consolidation: every successful source's stored raw rows for a week, each source in a file of its own with its
own columns and types (polars, lazy, streamed into the store; fleet/transform/layout.py), with the rows carried
forward for sources that failed (fleet/lifecycle/carry.py)."""
from __future__ import annotations

import uuid

import polars as pl

from fleet.lifecycle import carry as carrying
from fleet.quality import gate
from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore
from fleet.transform import layout


def week_outcomes(store: ArtifactStore, week: str, sources: list[str]) -> dict[str, dict]:
    """Each source's stored outcome for the week; a source with none is reported as not run."""
    out = {}
    for name in sources:
        rec = keys.read_outcome(store, week, name)
        out[name] = rec or {"source": name, "status": "not run", "category": None, "error": "no attempt recorded this week"}
    return out


def consolidate(store: ArtifactStore, week: str, sources: list[str], carry: dict[str, int] | None = None) -> dict:
    """Every successful source's raw rows for ``week``, each source in its own file (``layout.store_key``) with its
    own columns and types and fleet's ``_fleet_source`` column; no source's shape touches another's.

    A source whose latest attempt failed after an earlier one of the week stored rows (``fleet run --refresh``
    against a site that is down now) keeps those rows: they are included, and listed under ``kept`` with the
    latest attempt's failure, which is still the source's status. Dropping them would take them out of the week's
    next raw commit.

    A source the quality gate holds (fleet/quality/gate.py) is left out, as a failed one is, under ``held``; one
    released from it is included and listed under ``released`` with its note.

    Returns a summary: included sources with row counts, kept ones, missing sources with why, the included ones
    scraped into this (past) week under ``fleet/force=true`` with the date they were scraped on, and total rows.
    A missing source named in ``carry`` (name -> its carry_forward_weeks) may contribute its last good week's rows,
    listed under ``carried`` (fleet/lifecycle/carry.py); every row has a ``_fleet_stale_since`` column, null when
    fresh. The summary, written last, lists the files (``files``): a source's file that an earlier consolidation
    wrote and this one did not is not part of the week."""
    outcomes = week_outcomes(store, week, sources)
    included, kept, missing, forced, held, released, frames = {}, {}, {}, {}, {}, {}, {}
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
        frames[name] = carrying.fresh(provenance.upgrade_raw(store.scan_parquet(week, keys.rows_key(taken))))
    carried, stale = carrying.carry(store, week, missing, carry or {})
    frames.update(stale)
    total = sum(included.values()) + sum(c["rows"] for c in carried.values())
    summary = {"week": week, "included": included, "kept": kept, "missing": missing, "forced": forced, "rows": total,
               "carried": carried, "held": held, "released": released}
    if total == 0:
        return summary
    written = {}
    for name, lf in sorted(frames.items()):
        written[name] = layout.store_key("raw", name)
        store.sink_parquet(week, written[name], with_source(lf, name))
    # ``made`` names this consolidation: post-processing records the one it read (fleet/publish/week.py)
    store.write_json(week, keys.CONSOLIDATED_META_KEY, {**summary, "files": written, "made": uuid.uuid4().hex})
    return summary


def with_source(lf: pl.LazyFrame, name: str) -> pl.LazyFrame:
    """``lf`` with fleet's ``_fleet_source`` column first, so files read together still say whose each row is."""
    return lf.select(pl.lit(name, dtype=pl.String).alias(provenance.SOURCE), pl.all())
