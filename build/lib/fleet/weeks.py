"""Weeks: the partition key is the ISO week's Monday as YYYY-MM-DD, the only notion of "when"."""
from __future__ import annotations

import dataclasses
import datetime as dt
import re

from fleet.errors import FleetError

_ISO_WEEK = re.compile(r"^(\d{4})-?W(\d{1,2})$", re.IGNORECASE)


def parse_week(value: str | dt.date) -> dt.date:
    """Accept a Monday (``2026-11-16``), an ISO week (``2026-W47``) or a date; return the Monday."""
    if isinstance(value, dt.datetime):
        value = value.date()
    if isinstance(value, dt.date):
        return value - dt.timedelta(days=value.weekday())
    text = str(value).strip()
    m = _ISO_WEEK.match(text)
    if m:
        try:
            return dt.date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)
        except ValueError as exc:
            raise ValueError(f"not an ISO week: {text!r} ({exc})") from None
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a week: {text!r}; give a Monday (2026-11-16) or an ISO week (2026-W47)") from None
    if day.weekday() != 0:
        raise ValueError(f"{text} is a {day:%A}, not a Monday; give the week's Monday or an ISO week (2026-W47)")
    return day


def week_key(value: str | dt.date) -> str:
    """The partition key of a week."""
    return parse_week(value).isoformat()


def iso_label(value: str | dt.date) -> str:
    y, w, _ = parse_week(value).isocalendar()
    return f"{y}-W{w:02d}"


def utc_now() -> dt.datetime:
    """fleet's one clock: now, in UTC. Drivers and records ask it; a task never does (its week is its partition)."""
    return dt.datetime.now(dt.timezone.utc)


def today(now: dt.datetime | None = None) -> dt.date:
    """Today's date in UTC (``now``'s, when given): the same day on every host, whatever its ``TZ``."""
    now = now or utc_now()
    return (now if now.tzinfo else now.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc).date()


def last_complete_week(day: dt.date | None = None) -> dt.date:
    """The Monday of the last fully finished week before ``day`` (default: :func:`today`, in UTC): what "past"
    means to the past-week guard and what a driver runs by default. Used only by drivers, never by tasks."""
    return parse_week(day or today()) - dt.timedelta(days=7)


def current_week(now: dt.datetime | None = None) -> dt.date:
    """The Monday of the week in progress in UTC."""
    return parse_week(today(now))


def check_week_in_partitions(week: str | dt.date, start_week: str, now: dt.datetime | None = None) -> str:
    """The partition key of ``week``, or a FleetError when the weekly partitions do not hold it: before
    ``FLEET_START_WEEK`` (``start_week``) or after the week in progress. Without importing Dagster; the
    partitions definition agrees (fleet_tests/test_definitions.py)."""
    day, first = parse_week(week), parse_week(start_week)
    last = max(first, current_week(now))  # the partitions' end_offset=1 (fleet/defs/assets.py): the week in progress
    if day < first:
        raise FleetError(f"week {day.isoformat()} is before the first weekly partition, {first.isoformat()} "
                         f"(FLEET_START_WEEK); give a later week or set FLEET_START_WEEK earlier")
    if day > last:
        raise FleetError(f"week {day.isoformat()} has not started: the last weekly partition is {last.isoformat()}, "
                         f"the week in progress")
    return day.isoformat()


DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DEADLINE = re.compile(r"^\s*([a-z]{3})[a-z]*\s+(\d{1,2}):(\d{2})\s*$", re.I)


@dataclasses.dataclass(frozen=True)
class Deadline:
    """A weekday and UTC time in the week after the week whose raw commit is due (``mon 12:00``: the Monday
    after the week that ended on Sunday): FLEET_FRESHNESS_DEADLINE, for fleet/policy/freshness.py."""

    day: int
    hour: int
    minute: int

    def of(self, week: dt.date) -> dt.datetime:
        day = week + dt.timedelta(days=7 + self.day)
        return dt.datetime(day.year, day.month, day.day, self.hour, self.minute, tzinfo=dt.timezone.utc)


def parse_deadline(raw: str | None, setting: str, default: str = "mon 12:00") -> Deadline:
    text = (raw or "").strip() or default
    m = _DEADLINE.match(text)
    day = DAYS.index(m.group(1).lower()) if m and m.group(1).lower() in DAYS else None
    if m is None or day is None or int(m.group(2)) > 23 or int(m.group(3)) > 59:
        raise FleetError(f"{setting} must be a weekday and a UTC time in the week after the week, such as "
                         f"'mon 12:00', got {raw!r}")
    return Deadline(day, int(m.group(2)), int(m.group(3)))
