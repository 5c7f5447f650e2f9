"""Carry-forward: a ``carry_forward`` source whose week failed contributes the rows of its last good week to the
week's consolidated data, marked in the ``_fleet_stale_since`` column (that week), for at most ``carry_forward_weeks``
weeks in a row, and never while quarantined."""
from __future__ import annotations

import polars as pl

from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore

STALE_COLUMN = provenance.STALE_SINCE
STALE_DTYPE = pl.Date


def fresh(lf: pl.LazyFrame) -> pl.LazyFrame:
    """A source's own rows of the week: ``_fleet_stale_since`` null, so every week's files have the column."""
    return lf.with_columns(pl.lit(None, dtype=STALE_DTYPE).alias(STALE_COLUMN))


def _carried_before(store: ArtifactStore, week: str, source: str) -> int:
    """Weeks in a row, just before ``week``, in which ``source`` was carried forward."""
    n = 0
    for w in sorted((w for w in store.weeks() if w < week), reverse=True):
        meta = store.read_json(w, keys.CONSOLIDATED_META_KEY) or {}
        if source not in (meta.get("carried") or {}):
            break
        n += 1
    return n


def _last_good(store: ArtifactStore, week: str, source: str) -> tuple[str, dict] | None:
    for w in sorted((w for w in store.weeks() if w < week), reverse=True):
        out, _ = keys.consolidated_outcome(store, w, source)
        if out is not None and out.get("status") in ("ok", "partial"):
            return w, out
    return None


def carry(store: ArtifactStore, week: str, missing: dict[str, dict], limits: dict[str, int]
          ) -> tuple[dict[str, dict], dict[str, pl.LazyFrame]]:
    """For each source of ``missing`` (name -> its outcome) that carries forward (``limits``: name ->
    carry_forward_weeks): what was carried (``{"from": week, "rows": n}``) and the frames of those rows by source,
    ``_fleet_stale_since`` set. One that is quarantined, or was carried its limit already, is not."""
    carried, frames = {}, {}
    for name, why in sorted(missing.items()):
        if name not in limits or why.get("status") in ("quarantined", "not run"):
            continue
        if _carried_before(store, week, name) >= limits[name]:
            continue
        found = _last_good(store, week, name)
        if found is None:
            continue
        good, out = found
        carried[name] = {"from": good, "rows": int(out.get("rows") or 0), "status": why.get("status")}
        frames[name] = provenance.upgrade_raw(store.scan_parquet(good, keys.rows_key(out))).with_columns(
            pl.lit(good).str.to_date().alias(STALE_COLUMN))
    return carried, frames
