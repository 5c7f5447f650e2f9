"""Commit messages: a one-line subject, a body (for a week: what it holds, from the consolidation's summary), and the
idempotency trailer by which a rerun recognises a commit that landed the same content already."""
from __future__ import annotations

from fleet.publish.remote import Say

TRAILER = "Fleet-Idempotency-Key"


def check(subject: str, key: str, say: Say) -> None:
    """Refuse a subject or key that would not make a well-formed message, before anything is touched."""
    subject = subject.strip()
    if not subject or "\n" in subject:
        raise say.fail(f"commit subject must be one non-empty line, got {subject!r}")
    key = key.strip()
    if not key or any(c in key for c in "\r\n"):
        raise say.fail(f"idempotency key must be one non-empty line, got {key!r}")


def content_key(key: str, oids: list[str]) -> str:
    """``key`` followed by ``:<sha256>`` of each file, in path order."""
    return ":".join([key.strip(), *oids])


def build(subject: str, body: str, key: str, say: Say) -> str:
    check(subject, key, say)
    parts = [say.redact(subject.strip())]
    if body.strip():
        parts.append(say.redact(body.strip()))
    parts.append(f"{TRAILER}: {say.redact(key.strip())}")
    return "\n\n".join(parts) + "\n"


def for_week(week: str, stage: str, run_id: str, summary: dict) -> tuple[str, str]:
    """Subject and body of a week's stage commit: the sources included, kept from an earlier attempt, and missing,
    and the ones scraped into this past week from a later day's web (``fleet/force=true``)."""
    included, kept, missing = (summary.get(k, {}) for k in ("included", "kept", "missing"))
    lines = [f"Week: {week}", f"Stage: {stage}", f"Run: {run_id}",
             f"Sources included ({len(included)}): "
             + (", ".join(f"{k} ({v} rows)" for k, v in sorted(included.items())) or "none")]
    if kept:
        lines.append("Sources whose latest attempt failed, with the rows of an earlier attempt this week "
                     f"({len(kept)}): {_outcomes(kept)}")
    quarantined = {k: v for k, v in missing.items() if v.get("status") == "quarantined"}
    missing = {k: v for k, v in missing.items() if k not in quarantined}
    if missing:
        lines.append(f"Sources missing ({len(missing)}): {_outcomes(missing)}")
    if quarantined:
        lines.append(f"Sources quarantined, not scraped ({len(quarantined)}): {', '.join(sorted(quarantined))}")
    carried = summary.get("carried") or {}
    if carried:
        lines.append(f"Sources carried forward, their rows marked _fleet_stale_since ({len(carried)}): "
                     + ", ".join(f"{k} ({v['rows']} rows of week {v['from']})" for k, v in sorted(carried.items())))
    held, released = summary.get("held") or {}, summary.get("released") or {}
    if held:
        lines.append(f"Sources held by the quality gate ({len(held)}; rows stored, `fleet release` commits them): "
                     + "; ".join(f"{k} ({v['rows']} rows: {', '.join(v['checks'])})" for k, v in sorted(held.items())))
    for name, rec in sorted(released.items()):
        lines.append(f"Released from the quality gate: {name} ({', '.join(rec['checks'])})"
                     + (f"; note: {rec['note']}" if rec.get("note") else ""))
    by_day: dict[str, list[str]] = {}
    for name, day in sorted((summary.get("forced") or {}).items()):
        by_day.setdefault(day, []).append(name)
    for day, names in sorted(by_day.items()):
        lines.append(f"Forced: sources scraped on {day} for past week {week} (fleet/force=true): {', '.join(names)}")
    return f"fleet: {stage} rows for week {week}", "\n".join(lines)


def _outcomes(sources: dict[str, dict]) -> str:
    return ", ".join(f"{k} ({v.get('status')}"
                     f"{', ' + v['category'] if v.get('category') and v['category'] != v.get('status') else ''})"
                     for k, v in sorted(sources.items()))


def folder_lines(sources: dict, shas: bool = True) -> list[str]:
    """What a stage's commit does to the week's folder on the branch
    (fleet/publish/week.py ``sort_sources``): the sources it adds, writes again, keeps without writing them (and
    which commit wrote them, unless ``shas`` is False), drops as the operator named them, and an older layout's file
    left in place."""
    lines = []
    if sources.get("added"):
        lines.append(f"Sources new in this week's folder ({len(sources['added'])}): {', '.join(sources['added'])}")
    if sources.get("updated"):
        lines.append(f"Sources written again ({len(sources['updated'])}): {', '.join(sources['updated'])}")
    kept = sources.get("kept") or {}
    if kept:
        lines.append(f"Sources kept as committed, not in this run ({len(kept)}): "
                     + ", ".join(f"{n} (from commit {sha[:12]})" if shas else n for n, sha in sorted(kept.items())))
    if sources.get("dropped"):
        lines.append(f"Sources dropped by the operator (fleet/drop) ({len(sources['dropped'])}): "
                     + ", ".join(sources["dropped"]))
    for path in sources.get("legacy") or []:
        lines.append(f"{path} (an older fleet's one-file layout of this week) is left as it was; the per-source "
                     f"files supersede it")
    return lines


def week_folder_report(week: str, records: list[dict]) -> list[str]:
    """What a week's stage commits (their records) did to its folder, for a terminal, in one line: how many sources
    each adds and writes again, and by name those it keeps without this run and those the operator dropped (the
    commit messages have them all, with the commits that wrote the kept files)."""
    if not records:
        return []
    union = lambda key: sorted({n for rec in records for n in (rec.get(key) or [])})  # noqa: E731
    kept, dropped = union("kept"), union("dropped")
    line = (f"week folder {week}/: {len(union('added'))} source(s) added, {len(union('updated'))} written again, "
            f"{len(kept)} kept as committed, not in this run{': ' + ', '.join(kept) if kept else ''}; "
            f"{len(dropped)} dropped{': ' + ', '.join(dropped) if dropped else ''}")
    return [line, *folder_lines({"legacy": sorted({path for rec in records for path in rec.get("legacy") or []})})]
