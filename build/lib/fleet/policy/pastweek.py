"""The past-week rule: today's web is never scraped into a week older than the last complete one, judged when the
week's run was created; its stored complete raw rows are reused instead, and only ``fleet/force=true`` scrapes it."""
from __future__ import annotations

import datetime as dt

from fleet import records
from fleet.policy import taxonomy as tx
from fleet.storage import store as keys
from fleet.weeks import last_complete_week, parse_week, utc_now

FORCE_TAG = "fleet/force"  # "true": scrape a past week from today's web anyway (`fleet run --force` sets it)


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment.replace(tzinfo=dt.timezone.utc) if moment.tzinfo is None else moment.astimezone(dt.timezone.utc)


def oldest_week(as_of: dt.datetime) -> dt.date:
    """The last complete week as of ``as_of`` (in UTC, as the partitions are): the oldest week still scraped."""
    return last_complete_week(_utc(as_of).date())


def is_past(week: str, as_of: dt.datetime) -> bool:
    return parse_week(week) < oldest_week(as_of)


def to_fetch(store, week: str, names, deep=(), refresh: bool = False) -> list[str]:
    """The sources among ``names`` a run of ``week`` would scrape: all of them with ``refresh``, else those
    without stored complete raw rows (``store.stored_complete``, the runner's rule for reusing them)."""
    names = list(names)
    return names if refresh else [n for n in names if keys.stored_complete(store, week, n, deep=n in deep) is None]


def refusal(week: str, names, *, store, as_of: dt.datetime, deep=(), refresh: bool = False,
            judged: str = "", how_to_force: str) -> str | None:
    """Why running ``names`` for ``week`` must not go ahead, or None: the week was past at ``as_of`` and some
    of them would be scraped now, so today's web would be committed as that week's."""
    names = list(names)
    if not is_past(week, as_of):
        return None
    fetch = to_fetch(store, week, names, deep, refresh)
    if not fetch:
        return None
    listing = ", ".join(fetch[:10]) + (", ..." if len(fetch) > 10 else "")
    if refresh:
        what = f"a refresh would scrape {f'source {listing}' if len(names) == 1 else 'every source'} again"
    elif len(names) == 1:
        what = f"source {listing} has no complete stored rows for it and would be scraped now"
    else:
        what = (f"{len(fetch)} of its {len(names)} source(s) have no complete stored rows for it and would be "
                f"scraped now: {listing}")
    return (f"week {week} is older than the last complete week ({oldest_week(as_of)}){judged}, and {what}; the web "
            f"cannot be fetched as it was then. {how_to_force}")


def origin(instance, run):
    """The run whose creation time judges ``run``: for a rerun the follow-up policy launched (``fleet/kind=rerun``,
    ``fleet/recovers``), the run it recovers, followed back; a crash re-execution of a current week is not
    refused because it runs later."""
    seen = {run.run_id}
    while run.tags.get(tx.TAG_KIND) == "rerun" and run.tags.get(tx.TAG_RECOVERS) not in seen:
        earlier = records.run_by_id(instance, run.tags[tx.TAG_RECOVERS])
        if earlier is None:
            break
        seen.add(earlier.run_id)
        run = earlier
    return run


def _forced(run) -> bool | None:
    """The run's ``fleet/force`` tag: True, False (absent), or None for a value that is neither true nor false."""
    value = (run.tags.get(FORCE_TAG) or "false").strip().lower()
    return {"true": True, "false": False}.get(value)


def judge_step(instance, run, week: str, source: str, *, store, deep: bool = False, refresh: bool = False,
               now: dt.datetime | None = None) -> tuple[str | None, str | None]:
    """``(refused, forced)`` for ``source``'s step of ``week`` starting in ``run``: why it must not scrape, or the
    UTC date (``now``'s) on which it scrapes a past week under ``fleet/force=true``; ``(None, None)`` otherwise.

    Past means older than the last complete week when the week's run (its :func:`origin`) was created, never at
    ``now``: a retried step of an old run judges as its first attempt did."""
    now = _utc(now or utc_now())
    # A run created before now holds no week past that is not past now: most steps need no query at all.
    if not is_past(week, now) or not to_fetch(store, week, [source], [source] if deep else (), refresh):
        return None, None
    first = origin(instance, run)
    record = records.run_record(instance, first.run_id)
    created = _utc(record.create_timestamp) if record is not None else now
    if not is_past(week, created):
        return None, None
    runs = [run] if first.run_id == run.run_id else [run, first]  # a rerun carries its origin's force
    bad = next((r for r in runs if _forced(r) is None), None)
    if bad is not None:
        return (f"week {week}, source {source}: run tag {FORCE_TAG}={bad.tags.get(FORCE_TAG)!r} is neither true "
                f"nor false; not scraping a past week on it"), None
    if any(_forced(r) for r in runs):
        return None, now.date().isoformat()
    return refusal(week, [source], store=store, as_of=created, deep=[source] if deep else (), refresh=refresh,
                   judged=f" when its run was created ({created:%Y-%m-%d %H:%M} UTC)",
                   how_to_force=f"Launch it with the run tag {FORCE_TAG}=true to scrape anyway"), None
