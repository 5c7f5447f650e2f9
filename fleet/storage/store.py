"""The artifact store: every stage's output, addressed by week, written atomically (temp file, then rename).

``ArtifactStore`` is the interface the stages use; ``LocalArtifactStore`` keeps it in a directory under
``FLEET_HOME``. An object store can replace it by implementing the same few methods.
"""
from __future__ import annotations

import abc
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import polars as pl


class ArtifactStore(abc.ABC):
    """Week-addressed artifacts. Keys are relative paths such as ``raw/book_prices.parquet``."""

    @abc.abstractmethod
    def path(self, week: str, key: str) -> Path:
        """A local path for the artifact (for an object store: a local cache of it)."""

    @abc.abstractmethod
    def exists(self, week: str, key: str) -> bool: ...

    @abc.abstractmethod
    def write_parquet(self, week: str, key: str, frame: pl.DataFrame) -> Path: ...

    @abc.abstractmethod
    def write_json(self, week: str, key: str, data: Any) -> Path: ...

    @abc.abstractmethod
    def write_bytes(self, week: str, key: str, data: bytes) -> Path: ...

    @abc.abstractmethod
    def read_json(self, week: str, key: str, default: Any = None) -> Any: ...

    @abc.abstractmethod
    def list(self, week: str, prefix: str) -> list[str]: ...

    @abc.abstractmethod
    def weeks(self) -> list[str]: ...

    def remove(self, week: str, key: str) -> int:
        """Delete the artifact or folder at ``key`` (retention, ``fleet gc``); returns the bytes it held. An
        object store overrides this to delete its objects as well as the local copy."""
        p = self.path(week, key)
        if p.is_dir():
            size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            shutil.rmtree(p, ignore_errors=True)
            return size
        if p.exists():
            size = p.stat().st_size
            p.unlink(missing_ok=True)
            return size
        return 0

    def size(self, week: str, key: str) -> int:
        """Bytes held at ``key`` (a file, or everything under a folder); 0 when there is nothing."""
        p = self.path(week, key)
        if p.is_dir():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return p.stat().st_size if p.exists() else 0

    def workdir(self, week: str, key: str) -> Path:
        """A scratch directory that persists across attempts for this week (spools, checkpoints)."""
        p = self.path(week, key)
        p.mkdir(parents=True, exist_ok=True)
        return p


def _atomic_write(target: Path, write) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


class LocalArtifactStore(ArtifactStore):
    def __init__(self, root: Path | str):
        self.root = Path(root)

    def path(self, week: str, key: str) -> Path:
        p = (self.root / week / key).resolve()
        if self.root.resolve() not in p.parents:
            raise ValueError(f"artifact key {key!r} escapes the store")
        return p

    def exists(self, week: str, key: str) -> bool:
        return self.path(week, key).exists()

    def write_parquet(self, week: str, key: str, frame: pl.DataFrame) -> Path:
        return _atomic_write(self.path(week, key), lambda fh: frame.write_parquet(fh))

    def write_json(self, week: str, key: str, data: Any) -> Path:
        payload = json.dumps(data, indent=1, sort_keys=True, default=str).encode()
        return _atomic_write(self.path(week, key), lambda fh: fh.write(payload))

    def write_bytes(self, week: str, key: str, data: bytes) -> Path:
        return _atomic_write(self.path(week, key), lambda fh: fh.write(data))

    def copy_in(self, week: str, key: str, src: Path) -> Path:
        def write(fh):
            with open(src, "rb") as inp:
                shutil.copyfileobj(inp, fh, 1 << 20)
        return _atomic_write(self.path(week, key), write)

    def read_json(self, week: str, key: str, default: Any = None) -> Any:
        p = self.path(week, key)
        if not p.exists():
            return default
        return json.loads(p.read_text())

    def list(self, week: str, prefix: str) -> list[str]:
        base = self.path(week, prefix)
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.root / week)) for p in base.iterdir() if not p.name.startswith("."))

    def weeks(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))


# Keys, in one place, so every stage agrees on where things live.
def raw_key(source: str) -> str:
    return f"raw/{source}.parquet"


USABLE_STATUSES = ("ok", "empty", "partial")  # an outcome whose stored rows consolidation takes


def usable_outcome(store: "ArtifactStore", week: str, source: str) -> dict | None:
    """``source``'s latest stored outcome for ``week`` if consolidation takes its rows (ok, empty or partial, with
    the rows stored), else None."""
    rec = store.read_json(week, outcome_key(source)) or {}
    return rec if rec.get("status") in USABLE_STATUSES and store.exists(week, raw_key(source)) else None


def consolidated_outcome(store: "ArtifactStore", week: str, source: str) -> tuple[dict | None, bool]:
    """The outcome whose stored rows consolidation takes for ``source``'s week, and whether it is kept from an
    earlier attempt: the latest outcome if usable, else, when the latest attempt failed after an earlier one
    stored rows (a failed ``--refresh``), that attempt's (``good_outcome_key``); ``(None, False)`` when there
    are none. The one rule for consolidation (fleet/transform/consolidate.py) and the week's checks."""
    latest = usable_outcome(store, week, source)
    if latest is not None:
        return latest, False
    if not store.exists(week, raw_key(source)):
        return None, False
    good = store.read_json(week, good_outcome_key(source)) or {}
    return (good, True) if good.get("status") in USABLE_STATUSES else (None, False)


def stored_complete(store: "ArtifactStore", week: str, source: str, *, deep: bool = False) -> dict | None:
    """The stored outcome of ``source``'s week when its raw artifact is stored and complete (ok or empty; with
    its expensive phase if ``deep`` is asked for), so a step reuses it and fetches nothing; else None. The one
    rule for the runner (fleet/scraping/runner.py), the first wave's estimate and the past-week rule (fleet/policy/pastweek.py)."""
    previous = store.read_json(week, outcome_key(source)) or {}
    complete = (previous.get("status") in ("ok", "empty") and store.exists(week, raw_key(source))
                and (previous.get("deep", False) or not deep))  # a shallow artifact does not answer a deep request
    return previous if complete else None


def outcome_key(source: str) -> str:
    return f"raw/{source}.outcome.json"


def good_outcome_key(source: str) -> str:
    """The outcome of the attempt that stored the week's raw rows (``raw_key``): the last good one. The outcome
    at ``outcome_key`` is the latest attempt's, which may have failed after them (a ``--refresh`` that failed)."""
    return f"raw/{source}.good.json"


def evidence_key(source: str) -> str:
    return f"evidence/{source}"


def spool_key(source: str) -> str:
    return f"work/{source}"


CONSOLIDATED_KEY = "consolidated_raw_rows.parquet"
CONSOLIDATED_META_KEY = "consolidated_raw_rows.json"
PROCESSED_KEY = "post_processed.parquet"


def commit_key(stage: str) -> str:
    return f"commits/{stage}.json"
