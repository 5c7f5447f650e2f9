"""fleet's own columns, all in one namespace (``_fleet_``) that no scraper's schema may use, so no site's column
name (``source``, ``url``, ``fetched_at``…) is ever taken: the provenance of every raw row (when its page was
fetched, UTC, and the revision of the scraper module that produced it, its git blob id), and the columns the week's
files add (the source, carried rows' ``stale_since``, the processed rows' week and row id)."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

import polars as pl

from fleet.weeks import utc_now as now  # noqa: F401  (a row's fetched_at: fleet's one clock, as the attempt stamps it)

PREFIX = "_fleet_"
FETCHED_AT, SCRAPER_REV = f"{PREFIX}fetched_at", f"{PREFIX}scraper_rev"
SOURCE, STALE_SINCE, WEEK, ROW_ID = f"{PREFIX}source", f"{PREFIX}stale_since", f"{PREFIX}week", f"{PREFIX}row_id"
COLUMNS = (FETCHED_AT, SCRAPER_REV)  # stored with every raw row
DTYPES = {FETCHED_AT: pl.Datetime("us", "UTC"), SCRAPER_REV: pl.String}
# The names fleet used before its namespace (stores and data repositories written then still hold them).
LEGACY = {"fetched_at": FETCHED_AT, "scraper_rev": SCRAPER_REV, "stale_since": STALE_SINCE, "source": SOURCE,
          "week": WEEK, "row_id": ROW_ID}
LEGACY_RAW = ("fetched_at", "scraper_rev")  # the two a raw attempt's frame held then


def is_fleet_column(name: str) -> bool:
    return name.startswith(PREFIX)


def data_columns(names) -> list[str]:
    """What a source reported: every column of ``names`` but fleet's own."""
    return [c for c in names if not is_fleet_column(c)]


def upgrade_raw(frame):
    """A stored raw attempt's frame (or LazyFrame) with fleet's columns under their current names: one stored
    before the namespace holds ``fetched_at``/``scraper_rev`` as fleet's (no scraper could declare them then)."""
    names = frame.collect_schema().names()
    if FETCHED_AT in names:
        return frame
    return frame.rename({old: LEGACY[old] for old in LEGACY_RAW if old in names})


def revision(module_path: Path | str) -> str:
    """The git blob id of the module file (what ``git hash-object`` prints), whether or not it is in a repository."""
    data = Path(module_path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def split(rows: Iterable[dict], key: tuple[str, ...]) -> tuple[list[dict], dict[tuple, tuple]]:
    """Spooled rows -> (the rows without their provenance, {key: (fetched_at, scraper_rev)})."""
    plain, prov = [], {}
    for row in rows:
        # a row spooled before the namespace (a resumed week across an upgrade) has the legacy names as fleet's
        ours = COLUMNS if FETCHED_AT in row or "fetched_at" not in row else LEGACY_RAW
        plain.append({k: v for k, v in row.items() if k not in ours})
        prov[tuple(row.get(c) for c in key)] = (row.get(ours[0]), row.get(ours[1]))
    return plain, prov


def attach(frame: pl.DataFrame, key: tuple[str, ...], prov: dict[tuple, tuple]) -> pl.DataFrame:
    """``frame`` with the provenance columns, by each row's key (null for a row spooled without them)."""
    found = [prov.get(k, (None, None)) for k in frame.select(list(key)).iter_rows()]
    return frame.with_columns(pl.Series(FETCHED_AT, [f for f, _ in found], dtype=DTYPES[FETCHED_AT]),
                              pl.Series(SCRAPER_REV, [r for _, r in found], dtype=DTYPES[SCRAPER_REV]))
