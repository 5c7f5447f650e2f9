"""The bytes a commit lands: the artifacts checked, then a snapshot of each taken once, before the first attempt,
so that every attempt commits the same bytes.

A snapshot is a hard link to the artifact where the file system allows, else a private copy. fleet's store never
rewrites a file in place (it writes a new one beside it and renames it over the old), so a link keeps the bytes the
loop started with even if the artifact is replaced meanwhile. Copying a 1 GB snapshot took 2.4-3.4 s here and
wrote 1 GB that a plain `git add` + `git push` never writes. An artifact rewritten in place would change under a
link: each linked snapshot remembers the file's inode, size and mtime, and an attempt that finds them changed after
staging takes a private copy instead and starts over. (File times tick coarsely, every few ms on ext4, so a
same-size rewrite within one tick of the snapshot goes unnoticed; a copy taken during such a rewrite would be no
better.)
"""
from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from fleet.publish.lfs import is_pointer_file
from fleet.publish.remote import Say

CHUNK = 1 << 20
# Names an artifact may not take: they would change how git treats the data (e.g. turn LFS off).
_GIT_NAMES = {".git", ".gitattributes", ".gitignore", ".gitmodules", ".lfsconfig"}

LINK = True  # False: always copy (tests of the copy path)


# Test seams: module-level no-ops that tests (and only tests) replace.
def _on_copy_chunk(dest: Path, copied: int) -> None:
    """Called after each chunk written while copying an artifact into its snapshot (tests slow it down)."""


def _after_snapshot(arts: list) -> None:
    """Called once the snapshots are taken, before the first attempt (tests rewrite an artifact here)."""


@dataclass(frozen=True)
class Artifact:
    rel: str          # relative to the prefix
    path: str         # repository path: prefix + rel
    source: Path      # the artifact as given
    snapshot: Path    # the loop's snapshot of it: a hard link to it, or a private copy
    size: int
    linked: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of a linked snapshot; None: a copy
    sha256: str | None = None   # known once git-lfs has staged it
    lfs: bool = False           # staged as an LFS pointer (its object must reach the remote's LFS store)


def relative(rel: str, say: Say) -> str:
    """``rel`` as a path under the data prefix, refused when it would leave it or name git's own files."""
    parts = PurePosixPath(rel).parts
    if (not parts or rel.startswith("/") or "\\" in rel
            or any(p in ("..", ".") or p in _GIT_NAMES for p in parts)):
        raise say.fail(f"{rel!r} is not a file path inside the data prefix")
    return "/".join(parts)


def check_inputs(files: dict[str, Path], prefix: str, say: Say) -> list[tuple[str, str, Path]]:
    """``(rel, repository path, artifact)`` of each file to commit, sorted; refuses paths that leave the prefix or
    name git's own files, missing artifacts, and LFS pointers given as content."""
    if not files:
        raise say.fail("commit_files needs at least one file")
    out = []
    for rel, src in sorted(files.items()):
        parts = PurePosixPath(relative(rel, say)).parts
        src = Path(src)
        if not src.is_file():
            raise say.fail(f"artifact for {rel} is missing or not a file: {src}")
        if is_pointer_file(src):
            raise say.fail(f"artifact for {rel} is a Git LFS pointer, not content: {src}")
        out.append((rel, prefix + "/".join(parts), src))
    return out


def take_all(checked: list[tuple[str, str, Path]], where: Path) -> list[Artifact]:
    """Snapshot every artifact into ``where`` (emptied first: a previous loop may have been killed)."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    arts = [take(Artifact(rel=rel, path=path, source=src, snapshot=where / f"{i}-{PurePosixPath(rel).name}", size=0),
                 link=LINK)
            for i, (rel, path, src) in enumerate(checked)]
    _after_snapshot(arts)
    return arts


def take(a: Artifact, *, link: bool) -> Artifact:
    a.snapshot.unlink(missing_ok=True)
    if link:
        try:
            os.link(a.source, a.snapshot)
        except OSError:  # another file system, or links not allowed here: copy
            pass
        else:
            st = a.snapshot.stat()
            return replace(a, size=st.st_size, linked=(st.st_ino, st.st_size, st.st_mtime_ns))
    return replace(a, size=copy(a.source, a.snapshot, progress=_on_copy_chunk), linked=None)


def rewritten(arts: list[Artifact]) -> list[Artifact]:
    """The linked snapshots whose file changed since they were taken: rewritten in place by someone."""
    changed = []
    for a in arts:
        if a.linked is not None:
            st = a.snapshot.stat()
            if (st.st_ino, st.st_size, st.st_mtime_ns) != a.linked:
                changed.append(a)
    return changed


def copy(src: Path, dest: Path, progress=None) -> int:
    """Copy ``src`` to ``dest`` in chunks (bounded memory); return the bytes copied."""
    copied = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(src, "rb") as fin, open(dest, "wb") as out:
        while n := fin.readinto(buf):
            out.write(view[:n])
            copied += n
            if progress is not None:
                progress(dest, copied)
    return copied


def digest(path: Path) -> str:
    """sha256 of a file, in chunks (only for the small files that git keeps out of LFS)."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb") as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
