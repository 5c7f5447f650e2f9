"""Quarantine: a source whose last K weeks (its ``quarantine_after``) each ended failed or timed out as ``source`` is
skipped by the weekly run, without a browser, until `fleet unquarantine` or a passing live check (`fleet smoke`,
`fleet canary`) lifts it. State is derived from the stored outcomes; a lift is a small record in the store."""
from __future__ import annotations

import dataclasses
import datetime as dt

from fleet.errors import FleetError
from fleet.storage import store as keys
from fleet.storage.store import ArtifactStore

QUARANTINED = "quarantined"  # the same word as fleet.policy.taxonomy.QUARANTINED (this layer imports no dagster)
COUNTED = ("failed", "timeout")  # with category "source"; empty, partial, infra, refused, blocked... never count


def lift_key(source: str) -> str:
    return f"lifecycle/{source}.lift.json"


@dataclasses.dataclass(frozen=True)
class Quarantine:
    source: str
    weeks: tuple[str, ...]   # the failed weeks that put it there, oldest first

    @property
    def since(self) -> str:
        return self.weeks[-1]

    def describe(self) -> str:
        return (f"quarantined after {len(self.weeks)} weeks failing as source ({', '.join(self.weeks)}); "
                f"lift with `fleet unquarantine {self.source}` or a passing `fleet smoke`/`fleet canary`")


def _read(store: ArtifactStore, week: str, key: str) -> dict | None:
    try:
        rec = store.read_json(week, key)
    except ValueError as exc:
        raise FleetError(f"{store.location(week, key)}: unreadable quarantine record ({exc})") from None
    if rec is not None and not isinstance(rec, dict):
        raise FleetError(f"{store.location(week, key)}: unreadable quarantine record (not a JSON object)")
    return rec


def lifted_after(store: ArtifactStore, source: str) -> str | None:
    """The latest week whose failures a lift forgave, or None."""
    found = [w for w in store.weeks() if _read(store, w, lift_key(source))]
    return max(found) if found else None


def state(store: ArtifactStore, source: str, k: int, before: str | None = None) -> Quarantine | None:
    """Whether ``source`` is quarantined for a run of week ``before`` (counting the weeks before it; all stored
    weeks when None): its last ``k`` weeks with an outcome since the last lift all failed as ``source``. Weeks it
    was skipped in, and weeks it did not run, neither count nor break the streak."""
    since = lifted_after(store, source)
    streak: list[str] = []
    for week in sorted(store.weeks(), reverse=True):
        if (before is not None and week >= before) or (since is not None and week <= since):
            continue
        rec = keys.read_outcome(store, week, source)
        if not rec or rec.get("status") in (QUARANTINED, "not run"):
            continue
        if rec.get("category") == "source" and rec.get("status") in COUNTED:
            streak.append(week)
            if len(streak) >= k:
                return Quarantine(source, tuple(reversed(streak)))
        else:
            break
    return None


def lift(store: ArtifactStore, source: str, by: str) -> str | None:
    """Forgive ``source``'s failures so far; the week the record is kept in, or None when it has no stored week."""
    weeks = [w for w in store.weeks() if keys.outcomes(store, w, source)]
    if not weeks:
        return None
    at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    store.write_json(weeks[-1], lift_key(source), {"source": source, "by": by, "at": at})
    return weeks[-1]


def skip(store: ArtifactStore, source: str, week: str, run_id: str, q: Quarantine) -> str:
    """Store ``source``'s outcome for ``week`` as skipped by quarantine; the reason."""
    from fleet.engine import outcome

    why = f"source {source}: {q.describe()}"
    outcome.failed(store, source, week, run_id, why, QUARANTINED, status=QUARANTINED)
    return why


def newly_quarantined(store: ArtifactStore, week: str, limits: dict[str, int]) -> list[Quarantine]:
    """Sources whose failure this ``week`` completed their streak (so quarantined from the next week on): the week
    to raise the one alert in."""
    out = []
    for name, k in limits.items():
        q = state(store, name, k, before=_next(week))
        if q is not None and q.since == week:
            out.append(q)
    return out


def held(store: ArtifactStore, week: str, sources) -> set[str]:
    """The sources ``week`` skipped as quarantined."""
    return {n for n in sources if (keys.read_outcome(store, week, n) or {}).get("status") == QUARANTINED}


def _next(week: str) -> str:
    return (dt.date.fromisoformat(week) + dt.timedelta(days=7)).isoformat()


def alerts(store: ArtifactStore, week: str, limits: dict[str, int], run_id: str | None) -> list:
    """One alert per source that ``week`` put in quarantine (the alert ledger keeps it to one)."""
    from fleet.quality.alerts import Alert
    from fleet.quality.checks import last_good_week

    return [Alert(source=q.source, week=week, check=QUARANTINED, severity="ERROR", category="source",
                  message=f"source {q.source}: {q.describe()}; the weekly run skips it from the next week",
                  evidence={}, last_good_week=last_good_week(store, q.source, week), run_id=run_id)
            for q in newly_quarantined(store, week, limits)]


def current(store: ArtifactStore, sources) -> list[Quarantine]:
    """The ``sources`` (discovered ``Source``s) in quarantine now, as the next week's run would find them."""
    return [q for q in (state(store, s.name, s.quarantine_after) for s in sources) if q is not None]
