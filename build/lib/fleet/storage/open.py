"""Which artifact store a URL names (FLEET_ARTIFACTS): a local folder, or an S3 bucket through s3fs."""
from __future__ import annotations

from pathlib import Path

from fleet.errors import FleetError
from fleet.storage.store import STORE_SETTING, ArtifactStore, LocalArtifactStore


def open_store(url: str | Path, cache_dir: str | Path | None = None) -> ArtifactStore:
    """The store at ``url``: a local folder, or ``s3://bucket/prefix`` (needs ``fleet[distributed]``; reads are
    cached under ``cache_dir``, this host's own). Anything else is a FleetError naming FLEET_ARTIFACTS."""
    text = str(url).strip()
    if "://" not in text:
        return LocalArtifactStore(text)
    if not text.startswith("s3://"):
        raise FleetError(f"{STORE_SETTING} must be a local folder or an s3://bucket/prefix URL, got {text!r}")
    try:
        from fleet.storage.s3 import S3ArtifactStore
    except ImportError as exc:
        raise FleetError(f"{STORE_SETTING}={text} needs s3fs: install fleet[distributed] ({exc})") from None
    if cache_dir is None:
        raise FleetError(f"{STORE_SETTING}={text}: a remote store needs a local cache folder")
    return S3ArtifactStore(text, Path(cache_dir))


def host_store() -> ArtifactStore:
    """The artifact store of this host's settings: FLEET_ARTIFACTS, read through this host's cache of it."""
    from fleet.config import settings

    s = settings()
    return open_store(s.store_url, s.artifact_cache)


def check_store(store: ArtifactStore) -> None:
    """Refuse, before anything runs, a store that cannot be used: one line naming FLEET_ARTIFACTS (a bucket that
    does not exist, an endpoint that does not answer, no right to write)."""
    store.check()
