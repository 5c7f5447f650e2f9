"""The artifact store: every stage's output, addressed by week and key, each object written whole or not at all.

``ArtifactStore`` is the interface the stages use. ``LocalArtifactStore`` keeps it in a folder (the default,
``FLEET_HOME/artifacts``); ``fleet.storage.s3.S3ArtifactStore`` in an ``s3://bucket/prefix`` (``fleet[distributed]``).
``open_store`` (fleet/storage/open.py) builds either from ``FLEET_ARTIFACTS``. The keys every stage agrees on are at the end of this module.
"""
from __future__ import annotations

import abc
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import polars as pl

from fleet.errors import FleetError
from fleet.weeks import utc_now


class ArtifactStore(abc.ABC):
    """Week-addressed artifacts. Keys are relative paths such as ``raw/book_prices/<attempt>.parquet``.

    Every write makes the whole object visible at once (a rename, or one PUT / multipart upload), so a reader
    never sees a partial one. Reads of parquet go through ``local_copy``: the object itself for a local store,
    a cached download under the host's FLEET_HOME for a remote one."""

    url: str  # where the store is: a folder or an s3:// URL (FLEET_ARTIFACTS)

    @abc.abstractmethod
    def location(self, week: str, key: str) -> str:
        """The object's address, for messages and links: a local path or an ``s3://`` URL."""

    @abc.abstractmethod
    def exists(self, week: str, key: str) -> bool: ...

    @abc.abstractmethod
    def write_bytes(self, week: str, key: str, data: bytes, content_type: str | None = None) -> str:
        """Store ``data`` as the object; returns its location."""

    @abc.abstractmethod
    def put_file(self, week: str, key: str, src: Path, content_type: str | None = None) -> str:
        """Store the local file ``src`` as the object; returns its location."""

    @abc.abstractmethod
    def read_bytes(self, week: str, key: str) -> bytes:
        """The object's bytes; FileNotFoundError when there is none."""

    @abc.abstractmethod
    def local_copy(self, week: str, key: str) -> Path:
        """A local file with the object's content, to read, never to write: the object itself for a local store,
        a cached download for a remote one. FileNotFoundError when there is none."""

    @abc.abstractmethod
    def delete(self, week: str, key: str) -> None:
        """Remove the object, if there is one."""

    @abc.abstractmethod
    def modified_ns(self, week: str, key: str) -> int | None:
        """When the object was last written (ns since the epoch; whole seconds on S3), or None."""

    @abc.abstractmethod
    def list(self, week: str, prefix: str) -> list[str]:
        """Keys (and sub-folders) directly under ``prefix``, relative to the week, sorted."""

    @abc.abstractmethod
    def weeks(self) -> list[str]: ...

    @abc.abstractmethod
    def local_dir(self, week: str, key: str) -> Path:
        """A host-local folder for ``key`` (not created): for a local store the store's own folder, for a remote
        one scratch under FLEET_HOME that this host alone sees."""

    def check(self) -> None:
        """Refuse a store that cannot be used (FleetError, one line naming the setting). Local: nothing to ask."""

    def read_location(self, location: str) -> bytes:
        """The bytes of an object named by its ``location`` (a path here; an s3:// URL in an object store)."""
        return Path(location).read_bytes()

    def sign(self, location: str, content_type: str | None = None, expires_s: int = 7 * 86400) -> str | None:
        """A URL a browser elsewhere can open for an object stored at ``location`` (served as ``content_type``),
        or None when the location is a local path."""
        return None

    def sync_down(self, week: str, key: str) -> Path:
        """``local_dir(week, key)``, created, with the files a rerun resumes from (``save_work``). Local: as is."""
        return self.workdir(week, key)

    def save_work(self, week: str, key: str, files: dict[str, Path]) -> None:
        """Keep ``files`` (name under ``key`` -> local file) where a rerun on any host finds them. Local: they
        already are (the work folder is the store's)."""

    def save_evidence(self, week: str, key: str, attempt: str, evidence: dict) -> dict:
        """Evidence of one attempt: ``evidence`` (what -> local path, plus the page's URL) with the files kept
        where the UI can reach them; returns it with their new locations. Local: they already are."""
        return evidence

    @abc.abstractmethod
    def remove(self, week: str, key: str) -> int:
        """Delete the artifact or folder at ``key`` (retention, ``fleet gc``); returns the bytes it held."""

    @abc.abstractmethod
    def size(self, week: str, key: str) -> int:
        """Bytes held at ``key`` (a file, or everything under a folder); 0 when there is nothing."""

    # Conveniences every store shares.
    def workdir(self, week: str, key: str) -> Path:
        """A host-local scratch folder for this week's ``key`` (spools, checkpoints), created."""
        p = self.local_dir(week, key)
        p.mkdir(parents=True, exist_ok=True)
        return p

    def write_json(self, week: str, key: str, data: Any) -> str:
        return self.write_bytes(week, key, json.dumps(data, indent=1, sort_keys=True, default=str).encode(),
                                "application/json")

    def read_json(self, week: str, key: str, default: Any = None) -> Any:
        try:
            return json.loads(self.read_bytes(week, key))
        except FileNotFoundError:
            return default

    def write_parquet(self, week: str, key: str, frame: pl.DataFrame) -> str:
        with tempfile.TemporaryDirectory(prefix="fleet-parquet-") as tmp:
            path = Path(tmp) / "frame.parquet"
            frame.write_parquet(path)
            return self.put_file(week, key, path)

    def sink_parquet(self, week: str, key: str, lf: pl.LazyFrame) -> Path:
        """Stream ``lf`` into the object (polars' sink, so it need not fit in memory); returns a local copy."""
        with tempfile.TemporaryDirectory(prefix="fleet-sink-") as tmp:
            path = Path(tmp) / "frame.parquet"
            lf.sink_parquet(path)
            self.put_file(week, key, path)
        return self.local_copy(week, key)

    def scan_parquet(self, week: str, key: str) -> pl.LazyFrame:
        return pl.scan_parquet(self.local_copy(week, key))

    def read_parquet(self, week: str, key: str) -> pl.DataFrame:
        return pl.read_parquet(self.local_copy(week, key))


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
    """The store in a local folder: a temp file renamed into place makes each object appear whole."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.url = str(self.root)

    def path(self, week: str, key: str) -> Path:
        p = (self.root / week / key).resolve()
        if self.root.resolve() not in p.parents:
            raise ValueError(f"artifact key {key!r} escapes the store")
        return p

    def location(self, week: str, key: str) -> str:
        return str(self.path(week, key))

    def local_dir(self, week: str, key: str) -> Path:
        return self.path(week, key)

    def local_copy(self, week: str, key: str) -> Path:
        p = self.path(week, key)
        if not p.is_file():
            raise FileNotFoundError(str(p))
        return p

    def exists(self, week: str, key: str) -> bool:
        return self.path(week, key).exists()

    def write_parquet(self, week: str, key: str, frame: pl.DataFrame) -> str:
        return str(_atomic_write(self.path(week, key), lambda fh: frame.write_parquet(fh)))

    def write_bytes(self, week: str, key: str, data: bytes, content_type: str | None = None) -> str:
        return str(_atomic_write(self.path(week, key), lambda fh: fh.write(data)))

    def put_file(self, week: str, key: str, src: Path, content_type: str | None = None) -> str:
        def write(fh):
            with open(src, "rb") as inp:
                shutil.copyfileobj(inp, fh, 1 << 20)
        return str(_atomic_write(self.path(week, key), write))

    def sink_parquet(self, week: str, key: str, lf: pl.LazyFrame) -> Path:
        target = self.path(week, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        try:
            lf.sink_parquet(tmp)
            with open(tmp, "rb") as fh:  # on disk before it is renamed into place, as _atomic_write does
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    def read_bytes(self, week: str, key: str) -> bytes:
        return self.path(week, key).read_bytes()

    def delete(self, week: str, key: str) -> None:
        self.path(week, key).unlink(missing_ok=True)

    def modified_ns(self, week: str, key: str) -> int | None:
        try:
            return self.path(week, key).stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def list(self, week: str, prefix: str) -> list[str]:
        base = self.path(week, prefix)
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.root / week)) for p in base.iterdir() if not p.name.startswith("."))

    def remove(self, week: str, key: str) -> int:
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
        p = self.path(week, key)
        if p.is_dir():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return p.stat().st_size if p.exists() else 0

    def weeks(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))


STORE_SETTING = "FLEET_ARTIFACTS"
# Keys, in one place, so every stage agrees on where things live.
def new_attempt_id() -> str:
    """An attempt's id: its start time in UTC to the microsecond, then a random tail. Ids sort in start order on
    every host (clocks agree to far less than the seconds between an attempt and its rerun), which is what decides
    whose outcome counts (``read_outcome``)."""
    return f"{utc_now():%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex[:6]}"


def raw_key(source: str, attempt: str) -> str:
    """The raw rows stored by one attempt (with the rows of earlier attempts of the week it merged). Each attempt
    has its own key, so a late write of an attempt cut off from the rest never replaces a rerun's rows."""
    return f"raw/{source}/{attempt}.parquet"


def outcome_key(source: str, attempt: str) -> str:
    return f"raw/{source}/{attempt}.outcome.json"


_OUTCOME_SUFFIX = ".outcome.json"


def write_outcome(store: ArtifactStore, week: str, out: dict) -> None:
    """Store an attempt's outcome under its own key (``out`` names its source and attempt)."""
    store.write_json(week, outcome_key(out["source"], out["attempt"]), out)


def outcomes(store: ArtifactStore, week: str, source: str) -> list[str]:
    """The attempts of ``source``'s week that stored an outcome, oldest first."""
    return sorted(k.rsplit("/", 1)[-1][:-len(_OUTCOME_SUFFIX)] for k in store.list(week, f"raw/{source}")
                  if k.endswith(_OUTCOME_SUFFIX))


def read_outcome(store: ArtifactStore, week: str, source: str) -> dict | None:
    """``source``'s outcome for ``week``: the one of the attempt that started last. An attempt that was cut off
    and wrote after its rerun had finished started before it, so its outcome never counts over the rerun's. A
    garbled one counts as an infra failure that names it (:func:`attempt_outcome`): the source is scraped again."""
    attempts = outcomes(store, week, source)
    return attempt_outcome(store, week, source, attempts[-1]) if attempts else None


CORRUPT = "source {}: the store's {} of week {} is corrupt ({}); it is not used"  # source, key, week, what
def attempt_outcome(store: ArtifactStore, week: str, source: str, attempt: str) -> dict:
    """One attempt's stored outcome, checked as it is read: one that is not JSON, or not an outcome of
    ``source``, is an infra failure whose error names it (``corrupt``: its key), never taken for a result."""
    key = outcome_key(source, attempt)
    try:
        rec = store.read_json(week, key)
        what = None if isinstance(rec, dict) and rec.get("source") == source else "not an outcome of this source"
    except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
        rec, what = None, f"not JSON: {exc}"
    if what is None:
        return rec
    return {"source": source, "week": week, "status": "failed", "category": "infra", "attempt": None, "rows": 0,
            "error": CORRUPT.format(source, key, week, what), "corrupt": key}


def rows_stored(store: ArtifactStore, week: str, rec: dict | None) -> bool:
    return bool(rec and rec.get("attempt")) and store.exists(week, raw_key(rec["source"], rec["attempt"]))


def rows_problem(store: ArtifactStore, week: str, rec: dict) -> str | None:
    """Why the stored rows of outcome ``rec`` cannot be taken (a truncated or garbled parquet, or not as many rows
    as its outcome says), in one line naming the source, week and key; None when they can. Reads the file's footer."""
    key = rows_key(rec)
    try:
        height = pl.scan_parquet(store.local_copy(week, key)).select(pl.len()).collect().item()
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        return CORRUPT.format(rec["source"], key, week, f"unreadable parquet: {str(exc).splitlines()[0][:200]}")
    if rec.get("rows") is not None and height != rec["rows"]:
        return CORRUPT.format(rec["source"], key, week, f"{height} rows where its outcome says {rec['rows']}")
    return None


def rows_key(rec: dict) -> str:
    """The key of the raw rows an outcome record stands for."""
    return raw_key(rec["source"], rec["attempt"])


USABLE_STATUSES = ("ok", "empty", "partial")  # an outcome whose stored rows consolidation takes


def usable_outcome(store: "ArtifactStore", week: str, source: str) -> dict | None:
    """``source``'s latest stored outcome for ``week`` if consolidation takes its rows (ok, empty or partial, with
    the rows stored), else None."""
    rec = read_outcome(store, week, source) or {}
    return rec if rec.get("status") in USABLE_STATUSES and rows_stored(store, week, rec) else None


def consolidated_outcome(store: "ArtifactStore", week: str, source: str) -> tuple[dict | None, bool]:
    """The outcome whose stored rows consolidation takes for ``source``'s week, and whether it is kept from an
    earlier attempt: the latest outcome if usable, else, when the latest attempt failed after an earlier one
    stored rows (a failed ``--refresh``), the latest attempt that did; ``(None, False)`` when there are none.
    The one rule for consolidation (fleet/transform/consolidate.py) and the week's checks."""
    attempts = outcomes(store, week, source)
    for i, attempt in enumerate(reversed(attempts)):
        rec = attempt_outcome(store, week, source, attempt)
        if (rec.get("status") in USABLE_STATUSES and rows_stored(store, week, rec)
                and rows_problem(store, week, rec) is None):  # a corrupt object is never consolidated
            return rec, i > 0
    return None, False


def stored_complete(store: "ArtifactStore", week: str, source: str, *, deep: bool = False) -> dict | None:
    """The stored outcome of ``source``'s week when its raw artifact is stored and complete (ok or empty; with
    its expensive phase if ``deep`` is asked for), so a step reuses it and fetches nothing; else None. The one
    rule for the runner (fleet/engine/runner.py), the first wave's estimate and the past-week rule (fleet/policy/pastweek.py)."""
    previous = read_outcome(store, week, source) or {}
    complete = (previous.get("status") in ("ok", "empty") and rows_stored(store, week, previous)
                and (previous.get("deep", False) or not deep))  # a shallow artifact does not answer a deep request
    return previous if complete else None


def evidence_key(source: str) -> str:
    return f"evidence/{source}"


def spool_key(source: str) -> str:
    return f"work/{source}"


def structure_key(source: str) -> str:
    """The week's aria structure of the regions the source's scraper reads (fleet/quality/structure.py)."""
    return f"raw/{source}.structure.json"


CONSOLIDATED_META_KEY = "consolidated_raw_rows.json"  # the consolidation's summary; it lists the week's files
PROCESSED_META_KEY = "post_processed.json"
# The one-file layout of weeks consolidated before fleet kept each source in its own file (fleet/transform/layout.py)
CONSOLIDATED_KEY = "consolidated_raw_rows.parquet"
PROCESSED_KEY = "post_processed.parquet"


def commit_key(stage: str) -> str:
    return f"commits/{stage}.json"
