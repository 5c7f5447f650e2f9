"""The quality gate before the commit: a source whose week fails a blocking check (schema drift, a volume collapse
below its ERROR ratio, 10% of the trailing median by default, or a coverage drop: selector rot; in a source's first
weeks, against its fixture or schema: fleet/quality/baseline.py) is held out of the week's commit as a failed
source is. Its rows stay stored; ``fleet release`` or the run tag ``fleet/release``
on a publish run commits them, with a note."""
from __future__ import annotations


from fleet.errors import FleetError
from fleet.quality.outcome import checks_key
from fleet.storage.store import ArtifactStore
from fleet.weeks import utc_now

BLOCKING = ("schema", "volume", "coverage")
RELEASE_TAG = "fleet/release"          # comma-separated sources whose held rows the publish run commits
RELEASE_NOTE_TAG = "fleet/release_note"


def release_key(source: str) -> str:
    return f"raw/{source}.release.json"


def blocking_failures(store: ArtifactStore, week: str, source: str) -> list[dict]:
    """The source's failed blocking checks of the week, as its raw step stored them. A volume drop blocks only
    at ERROR severity; a WARN is alerted and committed."""
    return [c for c in store.read_json(week, checks_key(source)) or []
            if not c["passed"] and c["name"] in BLOCKING and (c["name"] != "volume" or c["severity"] == "ERROR")]


def verdict(store: ArtifactStore, week: str, source: str, taken: dict) -> tuple[str, dict] | None:
    """``("held", {"checks": [...]})``, ``("released", release record)`` or None (the gate lets it through) for
    the rows of ``taken``, the outcome consolidation takes. A release is for the attempt whose rows it saw: rows
    a later attempt stores are judged again."""
    failed = blocking_failures(store, week, source)
    if not failed:
        return None
    rec = store.read_json(week, release_key(source)) or {}
    if rec and rec.get("attempt") == taken.get("attempt"):
        return "released", rec
    return "held", {"checks": [f"{c['name']}: {c['message'].splitlines()[0]}" for c in failed],
                    "rows": int(taken.get("rows") or 0)}


def held(store: ArtifactStore, week: str, source: str) -> bool:
    """Whether the gate holds the rows of ``source``'s week that consolidation takes (not released)."""
    from fleet.storage import store as keys

    taken, _ = keys.consolidated_outcome(store, week, source)
    judged = verdict(store, week, source, taken) if taken else None
    return judged is not None and judged[0] == "held"


def parse_release(value: str | None) -> list[str]:
    from fleet.scraping.contract import valid_name

    names = [n.strip() for n in (value or "").split(",") if n.strip()]
    bad = [n for n in names if not valid_name(n)]
    if bad:
        raise FleetError(f"{RELEASE_TAG}: {', '.join(map(repr, bad))} is not a source name")
    return names


def check_held(store: ArtifactStore, week: str, sources: list[str]) -> dict[str, tuple[dict, dict]]:
    """{source: (the outcome whose rows are held, why)}; a source that is not held is a FleetError naming it."""
    from fleet.storage import store as keys

    found = {}
    for name in sources:
        taken, _ = keys.consolidated_outcome(store, week, name)
        judged = verdict(store, week, name, taken) if taken else None
        if judged is None or judged[0] != "held":
            raise FleetError(f"source {name} is not held by the quality gate in week {week}; nothing to release")
        found[name] = (taken, judged[1])
    return found


def release(store: ArtifactStore, week: str, sources: list[str], *, by: str, note: str = "") -> None:
    """Let the held rows of ``sources`` through the gate for ``week``'s next commit (:func:`check_held` first)."""
    for name, (taken, held) in check_held(store, week, sources).items():
        store.write_json(week, release_key(name), {
            "attempt": taken.get("attempt"), "by": by, "note": note, "checks": held["checks"],
            "released_at": utc_now().isoformat(timespec="seconds")})
