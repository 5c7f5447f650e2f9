"""Where a week's consolidated (raw) and post-processed rows are: one parquet file per source, each with its own
columns and types, in the store (``consolidated/<source>.parquet``, ``processed/<source>.parquet``, listed by the
stage's summary) and in the data repository (``<week>/raw/<source>.parquet``, ``<week>/processed/<source>.parquet``).

Weeks made before this layout (one wide ``consolidated_raw_rows.parquet`` / ``raw.parquet`` with a ``source``
column) are read as per-source frames too (``split_legacy``)."""
from __future__ import annotations

import polars as pl

from fleet.errors import FleetError
from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore

STAGES = ("raw", "processed")
SUMMARY = {"raw": keys.CONSOLIDATED_META_KEY, "processed": keys.PROCESSED_META_KEY}
LEGACY_KEY = {"raw": keys.CONSOLIDATED_KEY, "processed": keys.PROCESSED_KEY}
LEGACY_REPO_FILE = {"raw": "raw.parquet", "processed": "processed.parquet"}
_STORE_DIR = {"raw": "consolidated", "processed": "processed"}


def store_key(stage: str, source: str) -> str:
    return f"{_STORE_DIR[stage]}/{source}.parquet"


def repo_path(week: str, stage: str, source: str) -> str:
    """A source's file of ``stage`` in the data repository, under the data prefix."""
    return f"{week}/{stage}/{source}.parquet"


def source_of(path: str) -> str | None:
    """The source a repository path ``<week>/<stage>/<source>.parquet`` holds, else None."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[-2] in STAGES and parts[-1].endswith(".parquet"):
        return parts[-1][: -len(".parquet")]
    return None


def files(store: ArtifactStore, week: str, stage: str) -> dict[str, str] | None:
    """source -> store key of the files ``stage``'s last run wrote for ``week`` (its summary lists them: a file
    of an earlier run that this one did not write is not the week's); None when the stage was not run in this
    layout."""
    summary = store.read_json(week, SUMMARY[stage]) or {}
    listed = summary.get("files")
    return dict(listed) if isinstance(listed, dict) else None


def required(store: ArtifactStore, week: str, stage: str) -> dict[str, str]:
    """``files``, refused in one line when the stage was not run for ``week`` in this layout (nothing stored, or
    only an older fleet's one file)."""
    listed = files(store, week, stage)
    if listed is None:
        legacy = store.exists(week, LEGACY_KEY[stage])
        raise FleetError(f"week {week}: no stored {stage} rows in this fleet's layout"
                         + (" (an older fleet consolidated them into one file)" if legacy else "")
                         + f"; run `fleet run --week {week}` first (stored rows are reused)")
    return listed


def frames(store: ArtifactStore, week: str, stage: str) -> dict[str, pl.LazyFrame] | None:
    """Each source's rows of ``stage`` for ``week``, lazily, in this layout or the legacy one; None when the
    store holds neither."""
    listed = files(store, week, stage)
    if listed is not None:
        return {name: store.scan_parquet(week, key) for name, key in sorted(listed.items())}
    if store.exists(week, LEGACY_KEY[stage]):
        return split_legacy(store.read_parquet(week, LEGACY_KEY[stage]))
    return None


def split_legacy(wide: pl.DataFrame) -> dict[str, pl.LazyFrame]:
    """A legacy week's one wide table -> each source's rows, with the columns that source filled (in that layout
    a column another source had was null for this one's rows) and fleet's columns under their current names.
    Types are as the legacy file stored them: a column two sources disagreed on was cast to text then."""
    wide = wide.rename({old: new for old, new in provenance.LEGACY.items() if old in wide.columns})
    out = {}
    for (name,), rows in wide.partition_by(provenance.SOURCE, as_dict=True, maintain_order=True).items():
        own = [c for c in rows.columns if provenance.is_fleet_column(c) or rows[c].null_count() < rows.height]
        out[str(name)] = rows.select(own).lazy()
    return dict(sorted(out.items()))
