"""Row validation against a scraper's schema, dedup by natural key, and the polars frames built from them."""
from __future__ import annotations

import datetime as dt
import json
from typing import Any, Iterable, Mapping

import polars as pl

from fleet.errors import BadRowError

_PY_TYPES: list[tuple[tuple, tuple]] = [
    ((pl.String, pl.Utf8), (str,)),
    ((pl.Float64, pl.Float32), (int, float)),
    ((pl.Int64, pl.Int32, pl.Int16, pl.Int8, pl.UInt64, pl.UInt32, pl.UInt16, pl.UInt8), (int,)),
    ((pl.Boolean,), (bool,)),
    ((pl.Datetime,), (dt.datetime,)),
    ((pl.Date,), (dt.date,)),
]


def _accepts(dtype, value) -> bool:
    for dtypes, pytypes in _PY_TYPES:
        if any(dtype == d or dtype is d for d in dtypes):
            if isinstance(value, bool) and bool not in pytypes:
                return False
            if pl.Date in dtypes and isinstance(value, dt.datetime):
                return False
            return isinstance(value, pytypes)
    return True  # other dtypes: let polars decide when the frame is built


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_row(source: str, schema: Mapping[str, Any], key: tuple[str, ...], row: Any, index: int) -> dict:
    """Return the row as a dict with exactly the schema's columns, or raise ``BadRowError`` naming source and column."""
    if not isinstance(row, Mapping):
        raise BadRowError(f"source {source}: row {index} is a {type(row).__name__}, not a dict: {_show(row)}")
    extra = [c for c in row if c not in schema]
    if extra:
        raise BadRowError(f"source {source}: row {index} has column {extra[0]!r}, which is not in the schema "
                          f"(columns: {', '.join(schema)})")
    out = {}
    for col, dtype in schema.items():
        value = row.get(col)
        if value is None:
            if col in key:
                raise BadRowError(f"source {source}: key column {col!r} is missing or null in row {index}: {_show(dict(row))}")
            out[col] = None
            continue
        if not _accepts(dtype, value):
            raise BadRowError(f"source {source}: column {col!r} expects {dtype}, got {_show(value)} "
                              f"({type(value).__name__}) in row {index}")
        out[col] = value
    return out


def add_unique(source: str, schema: Mapping[str, Any], key: tuple[str, ...], by_key: dict, row: dict) -> bool:
    """Record ``row`` in ``by_key``; False for an exact duplicate, ``BadRowError`` for the same key with other values."""
    k = tuple(row[c] for c in key)
    prev = by_key.get(k)
    if prev is not None:
        if prev != row:
            diff = next(c for c in schema if prev.get(c) != row.get(c))
            raise BadRowError(f"source {source}: duplicate key {dict(zip(key, k))} with different values in column "
                              f"{diff!r}: {_show(prev.get(diff))} vs {_show(row.get(diff))}")
        return False
    by_key[k] = row
    return True


def build_frame(source: str, schema: Mapping[str, Any], key: tuple[str, ...], rows: Iterable[dict]) -> pl.DataFrame:
    """Validated rows -> a frame with the schema, unique by ``key``.

    Exact duplicates collapse to one row; the same key with different values is a ``BadRowError``."""
    by_key: dict[tuple, dict] = {}
    for row in rows:
        add_unique(source, schema, key, by_key, row)
    frame = pl.DataFrame(list(by_key.values()), schema=dict(schema), orient="row") if by_key else pl.DataFrame(schema=dict(schema))
    return frame.sort(list(key))


# Spool encoding: rows are appended as JSON lines while a scraper runs, so a timeout keeps what was collected.
def encode_row(row: dict) -> str:
    def default(v):
        if isinstance(v, dt.datetime):
            return {"__dt__": v.isoformat()}
        if isinstance(v, dt.date):
            return {"__d__": v.isoformat()}
        raise TypeError(f"cannot store {type(v).__name__}")
    return json.dumps(row, default=default, separators=(",", ":"))


def decode_row(line: str) -> dict:
    def hook(obj):
        if "__dt__" in obj:
            return dt.datetime.fromisoformat(obj["__dt__"])
        if "__d__" in obj:
            return dt.date.fromisoformat(obj["__d__"])
        return obj
    return json.loads(line, object_hook=hook)


def read_spool(path) -> list[dict]:
    """Rows from a spool file; a torn last line (the writer was killed mid-write) is dropped."""
    rows = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.endswith("\n"):
                    break
                try:
                    rows.append(decode_row(line))
                except ValueError:
                    break
    except FileNotFoundError:
        pass
    return rows
