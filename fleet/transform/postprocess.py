"""Post-processing: the expensive stage, which reads only the stored consolidated raw rows (polars, lazy)."""
from __future__ import annotations

import polars as pl

from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore


def post_process(store: ArtifactStore, week: str) -> int:
    """The demo's expensive stage: normalise strings, drop rows duplicated across sources, derive columns.

    Reads only the stored consolidated raw rows; writes ``post_processed.parquet``. Returns the row count."""
    lf = store.scan_parquet(week, keys.CONSOLIDATED_KEY)
    schema = lf.collect_schema()
    strings = [c for c, t in schema.items() if t == pl.String and c != "source"]
    # provenance differs between two sources' copies of one row, and between weeks: not part of a row's identity
    data_cols = [c for c in schema.names() if c != "source" and c not in provenance.COLUMNS]
    lf = (
        lf.with_columns([pl.col(c).str.strip_chars().str.replace_all(r"\s+", " ") for c in strings])
        # the same row reported by several sources is kept once, attributed to the first source by name
        .sort("source", maintain_order=True)  # stable: rows keep their order within a source, so the file is too
        .unique(subset=data_cols, keep="first", maintain_order=True)
        .with_columns(
            pl.lit(week).str.to_date().alias("week"),
            pl.concat_str([pl.col("source")] + [pl.col(c).cast(pl.String).fill_null("") for c in data_cols],
                          separator="\x1f").hash(seed=0).cast(pl.String).alias("row_id"),
        )
    )
    written = store.sink_parquet(week, keys.PROCESSED_KEY, lf)
    return pl.scan_parquet(written).select(pl.len()).collect().item()
