"""Post-processing: the expensive stage, which reads only the stored consolidated raw rows (polars, lazy) and writes
each source's processed rows to a file of its own, in that source's own columns and types."""
from __future__ import annotations

import polars as pl

from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore
from fleet.transform import layout


def consolidated(store: ArtifactStore, week: str) -> dict:
    """The week's consolidation summary, refused in one line when there is none in this layout."""
    layout.required(store, week, "raw")
    return store.read_json(week, keys.CONSOLIDATED_META_KEY) or {}


def post_process(store: ArtifactStore, week: str) -> int:
    """The demo's expensive stage: normalise strings, drop duplicated rows, derive columns, per source.

    - Each source keeps its own columns and types: nothing is cast, so a nested, decimal or zoned column passes.
    - A row reported again by a later source (by name) of the same shape (column names and types) is dropped:
      the same row from two sources is kept once, attributed to the first.
    - Derived: ``_fleet_week`` (the week's Monday) and ``_fleet_row_id``, a hash of the source and the row's data.

    Reads only the stored consolidated raw rows; writes ``processed/<source>.parquet`` and the stage's summary,
    which names the consolidation it read. Returns the row count."""
    made = consolidated(store, week).get("made")
    seen: dict[frozenset, pl.Series] = {}  # a shape -> hashes of the rows its earlier sources kept
    written, rows = {}, {}
    for name, lf in (layout.frames(store, week, "raw") or {}).items():
        schema = lf.collect_schema()
        data = provenance.data_columns(schema.names())
        strings = [c for c in data if schema[c] == pl.String]
        digest = pl.struct(data).hash(seed=0) if data else pl.lit(0, dtype=pl.UInt64)
        lf = (lf.with_columns([pl.col(c).str.strip_chars().str.replace_all(r"\s+", " ") for c in strings])
              .unique(subset=data or None, keep="first", maintain_order=True))  # stable: the file is deterministic
        shape = frozenset((c, str(schema[c])) for c in data)
        if shape in seen:  # an anti-join, not is_in (whose meaning for a same-typed collection polars changed)
            lf = (lf.with_columns(digest.alias("_fleet_seen"))
                  .join(pl.LazyFrame({"_fleet_seen": seen[shape]}), on="_fleet_seen", how="anti", maintain_order="left")
                  .drop("_fleet_seen"))
        lf = lf.with_columns(pl.lit(week).str.to_date().alias(provenance.WEEK),
                             pl.struct(pl.lit(name).alias(provenance.SOURCE), digest.alias("row"))
                             .hash(seed=0).cast(pl.String).alias(provenance.ROW_ID))
        written[name] = layout.store_key("processed", name)
        path = store.sink_parquet(week, written[name], lf)
        kept = pl.scan_parquet(path).select(digest.alias("h")).collect()["h"]
        seen[shape] = pl.concat([seen[shape], kept]) if shape in seen else kept
        rows[name] = kept.len()
    store.write_json(week, keys.PROCESSED_META_KEY, {"week": week, "files": written, "rows": rows, "from": made})
    return sum(rows.values())
