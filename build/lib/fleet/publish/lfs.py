"""What Git LFS asks of the loop: recognising pointers, tracking parquet under the prefix, and uploading the objects
to the remote's LFS store before the commit that points to them (a push without them is refused, GH008)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import git

from fleet.publish.remote import Remote, failure

if TYPE_CHECKING:
    from fleet.publish.snapshot import Artifact

POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"
POINTER_MAX = 1024
ATTRIBUTES_LINE = "*.parquet filter=lfs diff=lfs merge=lfs -text"


class UploadFailed(Exception):
    """The LFS objects did not all reach the remote's store (a transient failure: the attempt starts over)."""


def parse_pointer(data: bytes | str) -> tuple[str, int] | None:
    """``(oid, size)`` of an LFS pointer, or None when ``data`` is not one."""
    if isinstance(data, str):
        data = data.encode()
    if len(data) > POINTER_MAX or not data.startswith(POINTER_PREFIX):
        return None
    m_oid = re.search(rb"^oid sha256:([0-9a-f]{64})$", data, re.MULTILINE)
    m_size = re.search(rb"^size (\d+)$", data, re.MULTILINE)
    if not (m_oid and m_size):
        return None
    return m_oid.group(1).decode(), int(m_size.group(1))


def is_pointer_file(path: Path) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(POINTER_MAX + 1)
    return len(head) <= POINTER_MAX and head.startswith(POINTER_PREFIX)


def install(repo: git.Repo) -> None:
    """The LFS filters and hooks in the clone's own config: staging runs the clean filter, a push the upload."""
    if repo.git.config("--local", "--get", "filter.lfs.process", with_exceptions=False) == "":
        repo.git.lfs("install", "--local")


def ensure_attributes(workdir: Path, prefix: str) -> str:
    """``<prefix>.gitattributes`` tracks parquet with LFS; it lives inside the prefix, so fleet may write it (the
    caller has checked that it is no link). Returns its repository path."""
    rel = prefix + ".gitattributes"
    path = workdir / rel
    text = path.read_text() if path.is_file() else ""
    if ATTRIBUTES_LINE not in text.splitlines():
        path.parent.mkdir(parents=True, exist_ok=True)
        sep = "" if not text or text.endswith("\n") else "\n"
        path.write_text(f"{text}{sep}{ATTRIBUTES_LINE}\n")
    return rel


def push_objects(repo: git.Repo, remote: Remote, objects: list[Artifact]) -> None:
    """Upload the staged artifacts' objects to the remote's LFS store; for a remote on this machine, check they are
    there, whole, afterwards."""
    oids = sorted({a.sha256 for a in objects})
    try:
        for i in range(0, len(oids), 100):
            repo.git.lfs("push", "origin", "--object-id", *oids[i:i + 100])
    except git.CommandError as e:
        raise UploadFailed(f"LFS upload failed: {failure(e)}") from None
    store = remote.local_path
    if store is None:
        return
    for a in objects:
        oid = a.sha256
        obj = next((root / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
                    for root in (store, store / ".git") if (root / "lfs").is_dir()), None)
        if obj is None or not obj.is_file() or obj.stat().st_size != a.size:
            raise UploadFailed(f"LFS object {oid} ({a.path}, {a.size} bytes) is not in the remote's store after upload")
