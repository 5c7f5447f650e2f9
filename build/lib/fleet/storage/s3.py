"""The artifact store in an S3 bucket (``s3://bucket/prefix``), through fsspec's s3fs: what lets hosts share a week.

Endpoint and credentials come from the standard AWS variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION). Each object is one PUT (or one multipart upload, for a large file), so
none is ever visible half-written. Reads of parquet go through a cache under this host's FLEET_HOME, kept by
ETag; scratch (work folders, a worker's evidence before it is uploaded) lives there too.
"""
from __future__ import annotations

import glob
import os
import shutil
import tempfile
from pathlib import Path

import s3fs

from fleet import config
from fleet.errors import FleetError
from fleet.storage.store import STORE_SETTING, ArtifactStore

CONTENT_TYPES = {".png": "image/png", ".json": "application/json", ".parquet": "application/vnd.apache.parquet",
                 ".zip": "application/zip"}
TEXT = "text/plain; charset=utf-8"  # page HTML is a third party's: never served to a browser as a page


def _content_type(name: str) -> str:
    return CONTENT_TYPES.get(Path(name).suffix, TEXT)


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class S3ArtifactStore(ArtifactStore):
    def __init__(self, url: str, cache_dir: Path):
        self.url = url.rstrip("/")
        self.base = self.url[len("s3://"):]
        if not self.base or self.base.startswith("/"):
            raise FleetError(f"{STORE_SETTING} must name a bucket (s3://bucket/prefix), got {url!r}")
        self.bucket = self.base.split("/", 1)[0]
        self.cache_dir = Path(cache_dir)
        endpoint = config.aws_endpoint_url()
        # No listings cache: another host writes into the same prefixes, and a cached listing would hide it.
        # Short connect timeouts: an endpoint that does not answer is refused at start-up, not after minutes.
        self.fs = s3fs.S3FileSystem(endpoint_url=endpoint, use_listings_cache=False, skip_instance_cache=True,
                                    config_kwargs={"connect_timeout": 5, "read_timeout": 60,
                                                   "retries": {"max_attempts": 3, "mode": "standard"}})

    def _path(self, week: str, key: str) -> str:
        parts = [p for p in f"{week}/{key}".split("/") if p and p != "."]  # "." is the week itself
        if any(p == ".." for p in parts) or not week:
            raise ValueError(f"artifact key {key!r} escapes the store")
        return f"{self.base}/{'/'.join(parts)}"

    def location(self, week: str, key: str) -> str:
        return f"s3://{self._path(week, key)}"

    def local_dir(self, week: str, key: str) -> Path:
        return self.cache_dir / "scratch" / week / key

    def exists(self, week: str, key: str) -> bool:
        return self.fs.exists(self._path(week, key))

    def write_bytes(self, week: str, key: str, data: bytes, content_type: str | None = None) -> str:
        self.fs.pipe_file(self._path(week, key), data, ContentType=content_type or _content_type(key))
        return self.location(week, key)

    def put_file(self, week: str, key: str, src: Path, content_type: str | None = None) -> str:
        self.fs.put_file(str(src), self._path(week, key), ContentType=content_type or _content_type(key))
        return self.location(week, key)

    def read_bytes(self, week: str, key: str) -> bytes:
        return self.fs.cat_file(self._path(week, key))

    def local_copy(self, week: str, key: str) -> Path:
        """The object, downloaded into this host's cache once per version: the file is named after the object's
        ETag, so a copy is never taken for another version, whichever process fetched it."""
        remote = self._path(week, key)
        etag = "".join(c for c in str(self.fs.info(remote).get("ETag", "")) if c.isalnum() or c == "-")
        folder = self.cache_dir / "objects" / week / Path(key).parent
        name = Path(key).name
        target = folder / f"{name}@{etag}"
        if target.is_file():
            return target
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        os.close(fd)
        try:
            self.fs.get_file(remote, tmp)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        for older in folder.glob(f"{glob.escape(name)}@*"):  # earlier versions (a reader keeps its open file)
            if older != target:
                older.unlink(missing_ok=True)
        return target

    def delete(self, week: str, key: str) -> None:
        try:
            self.fs.rm_file(self._path(week, key))
        except FileNotFoundError:
            pass

    def modified_ns(self, week: str, key: str) -> int | None:
        try:
            info = self.fs.info(self._path(week, key))
        except FileNotFoundError:
            return None
        stamp = info.get("LastModified")
        return int(stamp.timestamp() * 1e9) if stamp is not None else None

    def list(self, week: str, prefix: str) -> list[str]:
        base = self._path(week, "")
        try:
            names = self.fs.ls(self._path(week, prefix), detail=False)
        except FileNotFoundError:
            return []
        return sorted(n[len(base) + 1:] for n in names
                      if n.startswith(base + "/") and not n.rsplit("/", 1)[-1].startswith("."))

    def weeks(self) -> list[str]:
        try:
            found = self.fs.ls(self.base, detail=True)
        except FileNotFoundError:
            return []
        return sorted(e["name"].rsplit("/", 1)[-1] for e in found
                      if e.get("type") == "directory" and not e["name"].rsplit("/", 1)[-1].startswith("."))

    def check(self) -> None:
        endpoint = config.aws_endpoint_url()
        where = f" at {endpoint} (AWS_ENDPOINT_URL)" if endpoint else ""
        try:
            self.fs.ls(self.bucket, detail=False)
        except FileNotFoundError:
            raise FleetError(f"{STORE_SETTING}={self.url}: bucket {self.bucket!r} does not exist{where}") from None
        except Exception as exc:
            raise FleetError(f"{STORE_SETTING}={self.url}: cannot list bucket {self.bucket!r}{where}: "
                             f"{_one_line(exc)}") from None
        probe = f"{self.base}/.fleet-check-{os.getpid()}"
        try:
            self.fs.pipe_file(probe, b"")
            self.fs.rm_file(probe)
        except Exception as exc:
            raise FleetError(f"{STORE_SETTING}={self.url}: the store cannot be written{where}: {_one_line(exc)}") from None

    def remove(self, week: str, key: str) -> int:
        size = self.size(week, key)
        if size or self.fs.exists(self._path(week, key)):
            self.fs.rm(self._path(week, key), recursive=True)
        shutil.rmtree(self.local_dir(week, key), ignore_errors=True)
        return size

    def size(self, week: str, key: str) -> int:
        try:
            return int(self.fs.du(self._path(week, key)))
        except FileNotFoundError:
            return 0

    def read_location(self, location: str) -> bytes:
        if not location.startswith("s3://"):
            return Path(location).read_bytes()
        return self.fs.cat_file(location[len("s3://"):])

    def sign(self, location: str, content_type: str | None = None, expires_s: int = 7 * 86400) -> str | None:
        if not location.startswith("s3://"):
            return None
        extra = {"ResponseContentType": content_type} if content_type else {}
        return self.fs.sign(location[len("s3://"):], expiration=expires_s, **extra)

    def sync_down(self, week: str, key: str) -> Path:
        """The work folder, with what the week's attempts on every host kept in the store: each attempt's spooled
        rows (missing ones fetched), the newest checkpoint, and the union of the URLs seen."""
        work = self.workdir(week, key)
        names = [k.rsplit("/", 1)[-1] for k in self.list(week, key)]
        for name in names:
            if name.startswith("rows-") and not (work / name).exists():
                _write_whole(work / name, self.read_bytes(week, f"{key}/{name}"))
        # rows of an attempt here whose step died before it could keep them (it never reached save_work)
        self.save_work(week, key, {p.name: p for p in work.glob("rows-*.jsonl") if p.name not in names})
        checkpoints = sorted(n for n in names if n.startswith("checkpoint-"))
        local = work / "checkpoint.json"
        if checkpoints:
            newest = f"{key}/{checkpoints[-1]}"
            # this host's own, saved by an attempt whose step died unseen, may be newer than any kept one
            if not local.exists() or local.stat().st_mtime_ns < (self.modified_ns(week, newest) or 0):
                _write_whole(local, self.read_bytes(week, newest))
        seen = [n for n in names if n.startswith("seen-")]
        if seen:
            local = work / "seen.txt"
            lines = set(local.read_text(encoding="utf-8").splitlines()) if local.exists() else set()
            for name in seen:
                lines |= set(self.read_bytes(week, f"{key}/{name}").decode("utf-8").splitlines())
            _write_whole(local, "".join(f"{line}\n" for line in sorted(lines) if line).encode("utf-8"))
        return work

    def save_work(self, week: str, key: str, files: dict[str, Path]) -> None:
        for name, path in files.items():
            if path.is_file():
                self.put_file(week, f"{key}/{name}", path, TEXT if name.endswith((".jsonl", ".txt", ".log")) else None)

    def save_evidence(self, week: str, key: str, attempt: str, evidence: dict) -> dict:
        """Every file of the attempt's evidence folder uploaded under ``key/<attempt>/`` (its own keys: a late
        attempt never replaces a rerun's); the evidence then names their s3:// locations (``error`` too)."""
        out, uploaded = dict(evidence), {}
        folder = self.local_dir(week, key)
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            if path.is_file():
                uploaded[str(path)] = self.put_file(week, f"{key}/{attempt}/{path.name}", path, _content_type(path.name))
        for what, value in evidence.items():
            if what != "page_url" and isinstance(value, str) and value in uploaded:
                out[what] = uploaded[value]
        error = str(folder / "error.txt")
        if error in uploaded and "error" not in out:
            out["error"] = uploaded[error]
        return out

def _write_whole(target: Path, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)
