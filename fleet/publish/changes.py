"""Week-over-week change summary of a stage (raw | processed): per source, the rows added, removed and changed by
natural key against the previous committed week, computed from the stored artifacts (never from LFS pointers).
It goes into the stage's commit message (shortened) and into ``CHANGES.md`` beside the week's data."""
from __future__ import annotations

import polars as pl

from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore

STAGE_KEYS = {"raw": keys.CONSOLIDATED_KEY, "processed": keys.PROCESSED_KEY}
LANDED = ("committed", "up_to_date")
NOT_DATA = ("source", "week", "row_id", *provenance.COLUMNS)  # fleet's columns: not what a source reported
MESSAGE_SOURCES = 12  # sources listed in a commit message; the rest are in CHANGES.md
MD_KEY = "CHANGES.md"


def changes_key(stage: str) -> str:
    return f"changes/{stage}.json"


def previous_committed_week(store: ArtifactStore, week: str, stage: str) -> str | None:
    """The newest week before ``week`` whose ``stage`` commit landed and whose artifact is still stored."""
    for w in reversed(store.weeks()):
        if w >= week:
            continue
        rec = store.read_json(w, keys.commit_key(stage)) or {}
        if (rec.get("status") in LANDED or rec.get("last_landed")) and store.exists(w, STAGE_KEYS[stage]):
            return w
    return None


def _source_keys(store: ArtifactStore, week: str, names) -> dict[str, list[str]]:
    """Each source's natural key, as its stored outcome recorded it (None: unknown, compare whole rows)."""
    out = {}
    for name in names:
        rec, _ = keys.consolidated_outcome(store, week, name)
        out[name] = list((rec or {}).get("key") or []) or None
    return out


def _frame(store: ArtifactStore, week: str, stage: str) -> pl.DataFrame:
    return store.read_parquet(week, STAGE_KEYS[stage])


def compare(prev: pl.DataFrame, cur: pl.DataFrame, key: list[str] | None) -> dict:
    """Rows added, removed and changed (same key, other values) of one source's two weeks."""
    prev_cols = [c for c in prev.columns if c not in NOT_DATA]
    cur_cols = [c for c in cur.columns if c not in NOT_DATA]
    common = [c for c in cur_cols if c in prev_cols]
    key = [c for c in (key or common) if c in common] or common
    out = {"rows": cur.height, "previous_rows": prev.height,
           "columns_added": [c for c in cur_cols if c not in prev_cols],
           "columns_removed": [c for c in prev_cols if c not in cur_cols]}
    if not key:
        return {**out, "added": cur.height, "removed": prev.height, "changed": 0}
    p = prev.select(common).unique(subset=key, keep="last")
    c = cur.select(common).unique(subset=key, keep="last")
    out["added"] = c.join(p, on=key, how="anti", nulls_equal=True).height
    out["removed"] = p.join(c, on=key, how="anti", nulls_equal=True).height
    values = [col for col in common if col not in key]
    if values:
        both = c.join(p, on=key, how="inner", nulls_equal=True, suffix="__prev")
        differs = pl.any_horizontal([pl.col(v).ne_missing(pl.col(f"{v}__prev")) for v in values])
        out["changed"] = both.filter(differs).height
    else:
        out["changed"] = 0
    return out


def summarise(store: ArtifactStore, week: str, stage: str) -> dict:
    """The stage's change summary for ``week`` (stored at ``changes/<stage>.json``): the previous committed week and,
    per source in either week, its figures; a source new this week has no previous rows, one gone has no rows."""
    previous = previous_committed_week(store, week, stage)
    cur = _frame(store, week, stage)
    prev = _frame(store, previous, stage) if previous else None
    names = sorted(set(cur["source"].unique()) | (set(prev["source"].unique()) if prev is not None else set()))
    source_keys = _source_keys(store, week, names)
    sources = {}
    for name in names:
        now = cur.filter(pl.col("source") == name)
        if prev is None:
            sources[name] = {"rows": now.height, "previous_rows": None, "added": now.height, "removed": 0,
                             "changed": 0, "columns_added": [], "columns_removed": []}
            continue
        before = prev.filter(pl.col("source") == name)
        sources[name] = compare(before, now, source_keys.get(name))
    summary = {"week": week, "stage": stage, "previous_week": previous, "sources": sources}
    store.write_json(week, changes_key(stage), summary)
    return summary


def _figures(s: dict) -> str:
    return f"+{s['added']} -{s['removed']} ~{s['changed']}"


def message_lines(summary: dict) -> list[str]:
    """The summary for a commit message: one line, at most ``MESSAGE_SOURCES`` sources, changed ones first."""
    prev = summary.get("previous_week")
    sources = summary["sources"]
    moved = sorted(sources, key=lambda n: (-(sources[n]["added"] + sources[n]["removed"] + sources[n]["changed"]), n))
    shown = [f"{n} {_figures(sources[n])}" for n in moved[:MESSAGE_SOURCES]]
    more = f", and {len(moved) - MESSAGE_SOURCES} more" if len(moved) > MESSAGE_SOURCES else ""
    against = f"against week {prev}" if prev else "with no previous committed week"
    return [f"Changes {against} (+added -removed ~changed by natural key, all in CHANGES.md): "
            + (", ".join(shown) or "no rows") + more]


def render(week: str, summaries: list[dict]) -> str:
    """``CHANGES.md``: one table per committed stage. Nothing run-specific, so a rerun of the week writes it
    byte for byte again and makes no new commit."""
    lines = [f"# Changes in week {week}", ""]
    for s in summaries:
        prev = s.get("previous_week")
        lines += [f"## {s['stage']} rows " + (f"against week {prev}" if prev else "(no previous committed week)"), "",
                  "Rows added, removed and changed by each source's natural key, from the stored files.", "",
                  "| source | rows | previous | added | removed | changed | columns |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for name, f in sorted(s["sources"].items()):
            cols = ", ".join([f"+{c}" for c in f.get("columns_added", [])] + [f"-{c}" for c in f.get("columns_removed", [])])
            prev_rows = "-" if f.get("previous_rows") is None else f["previous_rows"]
            lines.append(f"| {name} | {f['rows']} | {prev_rows} | {f['added']} | {f['removed']} | {f['changed']} | {cols} |")
        lines.append("")
    return "\n".join(lines)


def for_commit(store: ArtifactStore, week: str, stage: str) -> tuple[list[str], str]:
    """(message lines, store key of ``CHANGES.md``) for ``stage``'s commit of ``week``. The file holds the raw
    stage's table and, from the processed commit on, the processed one's too."""
    summary = summarise(store, week, stage)
    stages = ["raw", "processed"] if stage == "processed" else ["raw"]
    tables = [summary if st == stage else store.read_json(week, changes_key(st)) for st in stages]
    store.write_bytes(week, MD_KEY, render(week, [t for t in tables if t]).encode())
    return message_lines(summary), MD_KEY
