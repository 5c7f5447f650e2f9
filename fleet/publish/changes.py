"""Week-over-week change summary of a stage (raw | processed): per source, the rows added, removed and changed by
natural key against the previous committed week, computed from the stored artifacts (never from LFS pointers).
It goes into the stage's commit message (shortened) and into ``CHANGES.md`` beside the week's data."""
from __future__ import annotations

import polars as pl

from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore
from fleet.transform import layout

LANDED = ("committed", "up_to_date")
MESSAGE_SOURCES = 12  # sources listed in a commit message; the rest are in CHANGES.md
MD_KEY = "CHANGES.md"


def changes_key(stage: str) -> str:
    return f"changes/{stage}.json"


def previous_committed_week(store: ArtifactStore, week: str, stage: str) -> str | None:
    """The newest week before ``week`` whose ``stage`` commit landed and whose artifacts are still stored."""
    for w in reversed(store.weeks()):
        if w >= week:
            continue
        rec = store.read_json(w, keys.commit_key(stage)) or {}
        if (rec.get("status") in LANDED or rec.get("last_landed")) and (
                layout.files(store, w, stage) is not None or store.exists(w, layout.LEGACY_KEY[stage])):
            return w
    return None


def _source_keys(store: ArtifactStore, week: str, names) -> dict[str, list[str]]:
    """Each source's natural key, as its stored outcome recorded it (None: unknown, compare whole rows)."""
    out = {}
    for name in names:
        rec, _ = keys.consolidated_outcome(store, week, name)
        out[name] = list((rec or {}).get("key") or []) or None
    return out


def _has_text(dtype: pl.DataType) -> bool:
    """Whether a value of ``dtype`` has one text form to compare by: a scalar's (a nested value has none: polars
    casts a struct field by field, and a list not at all)."""
    return not dtype.is_nested() and dtype not in (pl.Object, pl.Binary)


def _hashes(frame: pl.DataFrame, exprs: list[pl.Expr], name: str) -> pl.Series:
    return frame.select(pl.struct(exprs).hash(seed=0).alias(name))[name] if exprs else pl.Series(name, [0] * frame.height, dtype=pl.UInt64)


def compare(prev: pl.DataFrame, cur: pl.DataFrame, key: list[str] | None) -> dict:
    """Rows added, removed and changed (same key, other values) of one source's two weeks, whatever their types:
    a column whose type changed is reported under ``columns_retyped`` and compared by its text form (a value
    whose type has none, a list, counts as changed), never a crash."""
    prev_cols, cur_cols = provenance.data_columns(prev.columns), provenance.data_columns(cur.columns)
    common = [c for c in cur_cols if c in prev_cols]
    retyped = {c: f"{prev.schema[c]} -> {cur.schema[c]}" for c in common if prev.schema[c] != cur.schema[c]}
    out = {"rows": cur.height, "previous_rows": prev.height,
           "columns_added": [c for c in cur_cols if c not in prev_cols],
           "columns_removed": [c for c in prev_cols if c not in cur_cols], "columns_retyped": retyped}

    def exprs(cols):  # what compares ``cols`` across the two weeks: a retyped one by its text; None when it has none
        if any(c in retyped and not (_has_text(prev.schema[c]) and _has_text(cur.schema[c])) for c in cols):
            return None
        return [pl.col(c).cast(pl.String, strict=False) if c in retyped else pl.col(c) for c in cols]

    key = [c for c in (key or common) if c in common] or common
    by_key = exprs(key) if key else None
    if by_key is None:
        return {**out, "added": cur.height, "removed": prev.height, "changed": 0}
    p = prev.with_columns(_hashes(prev, by_key, "_fleet_key")).unique(subset="_fleet_key", keep="last")
    c = cur.with_columns(_hashes(cur, by_key, "_fleet_key")).unique(subset="_fleet_key", keep="last")
    # joins, not is_in: polars changed what is_in means for a collection of the column's own type (1.25 -> 2.x)
    out["added"] = c.select("_fleet_key").join(p.select("_fleet_key"), on="_fleet_key", how="anti").height
    out["removed"] = p.select("_fleet_key").join(c.select("_fleet_key"), on="_fleet_key", how="anti").height
    values = [col for col in common if col not in key]
    by_value = exprs(values)
    both = c.select("_fleet_key").join(p.select("_fleet_key"), on="_fleet_key", how="inner")
    if not values:
        out["changed"] = 0
    elif by_value is None:  # a retyped column with no text form: every row seen both weeks changed
        out["changed"] = both.height
    else:
        pv = p.select("_fleet_key", _hashes(p, by_value, "_fleet_value"))
        cv = c.select("_fleet_key", _hashes(c, by_value, "_fleet_value"))
        joined = cv.join(pv, on="_fleet_key", how="inner", suffix="_prev")
        out["changed"] = joined.filter(pl.col("_fleet_value") != pl.col("_fleet_value_prev")).height
    return out


def summarise(store: ArtifactStore, week: str, stage: str, drop=()) -> dict:
    """The stage's change summary for ``week`` (stored at ``changes/<stage>.json``): the previous committed week and,
    per source this week, its figures against that week's file of the same source; a source new this week has no
    previous rows. A source an earlier run of this week summarised and this run does not (a narrower run, which
    keeps its committed file: fleet/publish/week.py) keeps its figures, under ``kept``, unless ``drop`` names it.
    Sources the previous week had and this week has not are listed under ``absent``."""
    earlier = store.read_json(week, changes_key(stage)) or {}
    previous = previous_committed_week(store, week, stage)
    cur = layout.frames(store, week, stage) or {}
    prev = (layout.frames(store, previous, stage) or {}) if previous else {}
    kept = {name: f for name, f in {**(earlier.get("kept") or {}), **(earlier.get("sources") or {})}.items()
            if name not in cur and name not in drop}
    source_keys = _source_keys(store, week, cur)
    sources = {}
    for name, lf in cur.items():
        now = lf.collect()
        if name not in prev:
            sources[name] = {"rows": now.height, "previous_rows": None, "added": now.height, "removed": 0,
                             "changed": 0, "columns_added": [], "columns_removed": [], "columns_retyped": {}}
            continue
        sources[name] = compare(prev[name].collect(), now, source_keys.get(name))
    summary = {"week": week, "stage": stage, "previous_week": previous, "sources": sources, "kept": kept,
               "absent": sorted(set(prev) - set(cur) - set(kept))}
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
    lines = [f"Changes {against} (+added -removed ~changed by natural key, all in CHANGES.md): "
             + (", ".join(shown) or "no rows") + more]
    retyped = [f"{n}.{c} {t}" for n in sorted(sources) for c, t in sorted((sources[n].get("columns_retyped") or {}).items())]
    if retyped:
        lines.append(f"Columns whose type changed ({len(retyped)}): {', '.join(retyped)}")
    return lines


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
        # a source kept from an earlier run of the week (a narrower run since): its file and figures are unchanged
        rows = ([(name, f, False) for name, f in s["sources"].items()]
                + [(name, f, True) for name, f in (s.get("kept") or {}).items()])
        for name, f, kept in sorted(rows, key=lambda r: r[0]):
            cols = ", ".join([f"+{c}" for c in f.get("columns_added", [])] + [f"-{c}" for c in f.get("columns_removed", [])]
                             + [f"{c}: {t}" for c, t in sorted((f.get("columns_retyped") or {}).items())]
                             + (["kept from an earlier run of this week"] if kept else []))
            prev_rows = "-" if f.get("previous_rows") is None else f["previous_rows"]
            lines.append(f"| {name} | {f['rows']} | {prev_rows} | {f['added']} | {f['removed']} | {f['changed']} | {cols} |")
        lines.append("")
    return "\n".join(lines)


def for_commit(store: ArtifactStore, week: str, stage: str, drop=()) -> tuple[list[str], str]:
    """(message lines, store key of ``CHANGES.md``) for ``stage``'s commit of ``week``, which removes the sources
    ``drop`` names. The file holds the raw stage's table and, from the processed commit on, the processed one's
    too."""
    summary = summarise(store, week, stage, drop)
    stages = ["raw", "processed"] if stage == "processed" else ["raw"]
    tables = [summary if st == stage else store.read_json(week, changes_key(st)) for st in stages]
    store.write_bytes(week, MD_KEY, render(week, [t for t in tables if t]).encode())
    return message_lines(summary), MD_KEY
