"""Provenance columns of every raw row: when its page was fetched (UTC) and the revision of the scraper module
that produced it (its git blob id, which is also a hash of its content)."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

import polars as pl

from fleet.weeks import utc_now as now  # noqa: F401  (a row's fetched_at: fleet's one clock, as the attempt stamps it)

FETCHED_AT, SCRAPER_REV = "fetched_at", "scraper_rev"
COLUMNS = (FETCHED_AT, SCRAPER_REV)
DTYPES = {FETCHED_AT: pl.Datetime("us", "UTC"), SCRAPER_REV: pl.String}


def revision(module_path: Path | str) -> str:
    """The git blob id of the module file (what ``git hash-object`` prints), whether or not it is in a repository."""
    data = Path(module_path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def split(rows: Iterable[dict], key: tuple[str, ...]) -> tuple[list[dict], dict[tuple, tuple]]:
    """Spooled rows -> (the rows without their provenance, {key: (fetched_at, scraper_rev)})."""
    plain, prov = [], {}
    for row in rows:
        plain.append({k: v for k, v in row.items() if k not in COLUMNS})
        prov[tuple(row.get(c) for c in key)] = (row.get(FETCHED_AT), row.get(SCRAPER_REV))
    return plain, prov


def attach(frame: pl.DataFrame, key: tuple[str, ...], prov: dict[tuple, tuple]) -> pl.DataFrame:
    """``frame`` with the provenance columns, by each row's key (null for a row spooled without them)."""
    found = [prov.get(k, (None, None)) for k in frame.select(list(key)).iter_rows()]
    return frame.with_columns(pl.Series(FETCHED_AT, [f for f, _ in found], dtype=DTYPES[FETCHED_AT]),
                              pl.Series(SCRAPER_REV, [r for _, r in found], dtype=DTYPES[SCRAPER_REV]))
