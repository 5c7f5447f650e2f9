"""Row validation against a scraper's schema, dedup by natural key, and the polars frames built from them."""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from typing import Any, Iterable, Mapping

import polars as pl

from fleet.errors import BadRowError

_INT_BITS = {pl.Int8: 8, pl.Int16: 16, pl.Int32: 32, pl.Int64: 64,
             pl.UInt8: -8, pl.UInt16: -16, pl.UInt32: -32, pl.UInt64: -64}  # negative: unsigned
for _name, _bits in (("Int128", 128), ("UInt128", -128)):
    if hasattr(pl, _name):
        _INT_BITS[getattr(pl, _name)] = _bits
_FLOAT32_MAX = 3.4028234663852886e38
_DECIMAL_CONTEXT = decimal.Context(prec=200)
_SCALARS: dict[Any, tuple[type, ...]] = {
    pl.String: (str,), pl.Categorical: (str,), pl.Boolean: (bool,), pl.Date: (dt.date,),
    pl.Datetime: (dt.datetime,), pl.Time: (dt.time,), pl.Duration: (dt.timedelta,), pl.Binary: (bytes, bytearray),
}
_EPOCH, _EPOCH_UTC = dt.datetime(1970, 1, 1), dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_WRONG_TYPE = object()  # a problem: the value is not of a Python type the dtype takes


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _got(dtype, value, problem) -> str:
    text = f"expects {dtype}, got {_show(value)} ({type(value).__name__})"
    return text if problem is _WRONG_TYPE else f"{text}: {problem}"


def _problem(dtype, value) -> Any:
    """What is wrong with non-null ``value`` in a column of ``dtype``: None (nothing), ``_WRONG_TYPE``, or a text.

    Strict, where polars is not: building a frame, polars turns a wrong value of a nested or decimal column into
    a null, casts list items to the item type, rounds decimals, makes a float32 inf, accepts a str as a one-item
    list and True as an integer, and fails on an out-of-range integer without naming its column."""
    kind = dtype if isinstance(dtype, type) else type(dtype)
    if isinstance(dtype, type):
        try:
            dtype = dtype()  # pl.Int64 -> Int64(), pl.Datetime -> Datetime('us'), pl.Decimal -> Decimal(38, 0)
        except TypeError:  # pl.List, pl.Struct… without their parameters: polars decides
            return _polars_problem(kind, value)
    if kind in _INT_BITS:
        if isinstance(value, bool) or not isinstance(value, int):
            return _WRONG_TYPE
        bits = _INT_BITS[kind]
        lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if bits > 0 else (0, 2 ** -bits - 1)
        return None if lo <= value <= hi else f"out of range ({lo} to {hi})"
    if kind in (pl.Float64, pl.Float32):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return _WRONG_TYPE
        try:
            f = float(value)
        except OverflowError:
            return "too large for a float"
        if kind is pl.Float32 and math.isfinite(f) and abs(f) > _FLOAT32_MAX:
            return f"out of range (a Float32 is at most {_FLOAT32_MAX:g} in size)"
        return None
    if kind in _SCALARS:
        if isinstance(value, bool) and bool not in _SCALARS[kind]:
            return _WRONG_TYPE
        if kind is pl.Date and isinstance(value, dt.datetime):
            return _WRONG_TYPE
        if not isinstance(value, _SCALARS[kind]):
            return _WRONG_TYPE
        if kind in (pl.Datetime, pl.Duration) and dtype.time_unit == "ns":
            # int64 nanoseconds reach from 1677 to 2262; polars wraps a datetime outside round (2500 -> 1915)
            span = value if kind is pl.Duration else value - (_EPOCH_UTC if value.utcoffset() is not None else _EPOCH)
            ns = (span.days * 86_400 + span.seconds) * 10 ** 9 + span.microseconds * 1000
            if not -(2 ** 63) <= ns < 2 ** 63:
                return "out of range for nanoseconds (1677-09-21 to 2262-04-11, or 292 years)"
        return None
    if kind is pl.Enum:
        if not isinstance(value, str):
            return _WRONG_TYPE
        categories = dtype.categories.to_list()
        return None if value in categories else f"not one of the categories {categories}"
    if kind is pl.Decimal:
        return _decimal_problem(dtype, value)
    if kind is pl.List or kind is pl.Array:
        if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, (list, tuple)):
            return _WRONG_TYPE
        if kind is pl.Array and len(value) != dtype.size:
            return f"{len(value)} items, the array has {dtype.size}"
        for i, item in enumerate(value):
            if item is not None:
                problem = _problem(dtype.inner, item)
                if problem is not None:
                    return f"item {i} {_got(dtype.inner, item, problem)}"
        return None
    if kind is pl.Struct:
        if not isinstance(value, Mapping):
            return _WRONG_TYPE
        fields = {f.name: f.dtype for f in dtype.fields}
        for name, item in value.items():
            if name not in fields:
                return f"field {name!r} is not in the struct (fields: {', '.join(fields)})"
            if item is not None:
                problem = _problem(fields[name], item)
                if problem is not None:
                    return f"field {name!r} {_got(fields[name], item, problem)}"
        return None
    if kind is pl.Null:
        return _WRONG_TYPE  # only None fits
    if kind is pl.Object:
        return None
    return _polars_problem(dtype, value)


def _decimal_problem(dtype, value) -> Any:
    if isinstance(value, bool) or not isinstance(value, (decimal.Decimal, int, float)):
        return _WRONG_TYPE
    d = decimal.Decimal(repr(value)) if isinstance(value, float) else decimal.Decimal(value)
    if not d.is_finite():
        return "not a finite number"
    scale, precision = dtype.scale or 0, dtype.precision or 38
    try:
        exact = d.quantize(decimal.Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT)
    except decimal.InvalidOperation:  # more digits than even the context holds
        return f"more than {precision - scale} digits before the point"
    if exact != d:
        return f"more than {scale} digits after the point (it would be rounded to {exact})"
    if abs(exact) >= decimal.Decimal(10) ** (precision - scale):
        return f"more than {precision - scale} digits before the point"
    return None


def _polars_problem(dtype, value) -> Any:
    """For a dtype fleet has no rule of its own for: whether polars builds a one-value column of it, strictly."""
    try:
        pl.Series("value", [value], dtype=dtype, strict=True)
    except BaseException as exc:  # polars can panic (pyo3 PanicException is a BaseException) on odd values
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def validate_row(source: str, schema: Mapping[str, Any], key: tuple[str, ...], row: Any, index: int) -> dict:
    """Return the row as a dict with exactly the schema's columns, or raise ``BadRowError`` naming the source, the
    column, the value and the row (its key, once the key columns are checked)."""
    if not isinstance(row, Mapping):
        raise BadRowError(f"source {source}: row {index} is a {type(row).__name__}, not a dict: {_show(row)}")
    extra = [c for c in row if c not in schema]
    if extra:
        raise BadRowError(f"source {source}: row {index} has column {extra[0]!r}, which is not in the schema "
                          f"(columns: {', '.join(schema)})")
    out = {}
    where = f"row {index}"
    # the key columns first, so that an error in another column can name the row by its key
    for col in [*key, *(c for c in schema if c not in key)]:
        dtype = schema[col]
        value = row.get(col)
        if value is None:
            if col in key:
                raise BadRowError(f"source {source}: key column {col!r} is missing or null in row {index}: {_show(dict(row))}")
            out[col] = None
            continue
        problem = _problem(dtype, value)
        if problem is not None:
            raise BadRowError(f"source {source}: column {col!r} {_got(dtype, value, problem)} in {where}")
        out[col] = value
        if key and col == key[-1]:
            where = f"row {index} (key {_show({k: out[k] for k in key})})"
    return {col: out[col] for col in schema}


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
    """Rows -> a frame with the schema, unique by ``key``; a bad row is a ``BadRowError``, never a null.

    Each row is checked again (rows spooled by an older fleet were checked by older rules), and the frame is
    built strictly. Exact duplicates collapse to one row; the same key with different values is a ``BadRowError``."""
    by_key: dict[tuple, dict] = {}
    for index, row in enumerate(rows):
        add_unique(source, schema, key, by_key, validate_row(source, schema, key, row, index))
    if not by_key:
        return pl.DataFrame(schema=dict(schema))
    try:
        frame = pl.DataFrame(list(by_key.values()), schema=dict(schema), orient="row", strict=True)
    except BaseException as exc:  # polars' ComputeError, TypeError, or a panic: never a raw one to the runner
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadRowError(f"source {source}: its rows do not make a frame of its schema: {first}") from exc
    return frame.sort(list(key))


# Spool encoding: rows are appended as JSON lines while a scraper runs, so a timeout keeps what was collected.
# Values JSON has no type for are objects of one marker key (a Decimal as its exact text, bytes as base64).
def encode_row(row: dict) -> str:
    def default(v):
        if isinstance(v, dt.datetime):
            return {"__dt__": v.isoformat()}
        if isinstance(v, dt.date):
            return {"__d__": v.isoformat()}
        if isinstance(v, dt.time):
            return {"__t__": v.isoformat()}
        if isinstance(v, dt.timedelta):
            return {"__td__": [v.days, v.seconds, v.microseconds]}
        if isinstance(v, decimal.Decimal):
            return {"__dec__": str(v)}
        if isinstance(v, (bytes, bytearray)):
            return {"__b__": base64.b64encode(v).decode("ascii")}
        raise TypeError(f"cannot store {type(v).__name__}")
    return json.dumps(row, default=default, separators=(",", ":"))


_DECODE = {
    "__dt__": dt.datetime.fromisoformat, "__d__": dt.date.fromisoformat, "__t__": dt.time.fromisoformat,
    "__td__": lambda v: dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    "__dec__": decimal.Decimal, "__b__": base64.b64decode,
}


def decode_row(line: str) -> dict:
    def hook(obj):
        if len(obj) == 1:
            (marker, value), = obj.items()
            if marker in _DECODE:
                return _DECODE[marker](value)
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
