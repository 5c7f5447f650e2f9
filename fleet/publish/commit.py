"""The LFS-safe commit loop: land persisted artifacts under the data prefix of a Git-LFS data repository,
touching nothing else, never force-pushing, retrying when another writer moves the branch first.

Each attempt starts from the remote branch (hard reset), restores the artifacts from their snapshot,
stages only the prefix, pushes the LFS objects before the commit that references them, and confirms that
the remote branch contains the commit.

The snapshot of each artifact is taken once before the first attempt, next to the clone: a hard link to the
artifact where the file system allows, else a private copy. fleet's store never rewrites a file in place (it
writes a new one beside it and renames it over the old), so a link keeps the bytes the loop started with even
if the artifact is replaced meanwhile, and every attempt commits the same bytes. Copying a 1 GB snapshot took
2.4-3.4 s here and wrote 1 GB that a plain `git add` + `git push` never writes. An artifact rewritten in
place would change under a link: each linked snapshot remembers the file's inode, size and mtime, and an
attempt that finds them changed after staging takes a private copy instead and starts over. (File times tick
coarsely, every few ms on ext4, so a same-size rewrite within one tick of the snapshot goes unnoticed; a copy
taken during such a rewrite would be no better.) Git replaces a working-tree file (unlink, then create) and
never writes into one, so the clone's link to the artifact cannot change the artifact.

The content is hashed once, by git-lfs when it stages the file; the loop reads the oid back from
the staged pointer and checks its size against the snapshot. fleet does not hash the file itself: sha256 of
1 GB takes ~4 s on a CPU without SHA extensions, as this machine is.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import random
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from fleet.errors import CommitError
from fleet.publish.gitcli import Git, GitFailure, Redactor, Remote, parse_remote

CHUNK = 1 << 20
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"
LFS_POINTER_MAX = 1024
GITATTRIBUTES_LINE = "*.parquet filter=lfs diff=lfs merge=lfs -text"
TRAILER = "Fleet-Idempotency-Key"
IDENTITY = ("fleet", "fleet@localhost")
# Names an artifact may not take: they would change how git treats the data (e.g. turn LFS off).
_GIT_NAMES = {".git", ".gitattributes", ".gitignore", ".gitmodules", ".lfsconfig"}

# A rejection that retrying cannot cure: branch protection, workflow files, identity/authentication, a remote
# that cannot take pushes. Matched against git's words only (see ``_permanent``): a URL or a path such as
# ``org/workflow-data.git`` must not turn a refused connection into a permanent failure.
_PERMANENT_REJECTION = re.compile(
    r"GH001|GH006|GH007|GH013|protected branch|refusing to allow|refusing to update checked out branch|"
    r"authentication failed|could not read (username|password)|permission denied|repository not found|"
    r"does not appear to be a git repository|requested url returned error: 40[134]",
    re.IGNORECASE)
_URL_OR_PATH = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://\S*|'[^'\s]*'|`[^`]*`|(?<![\w.])[~.]?/[^\s:'`]*")


def _permanent(text: str, *known: str) -> bool:
    """Whether git's ``text`` says retrying cannot help, with URLs, paths, quoted names and ``known`` (the
    remote's URL and path) taken out first."""
    for k in sorted(filter(None, known), key=len, reverse=True):
        text = text.replace(k, " ")
    return bool(_PERMANENT_REJECTION.search(_URL_OR_PATH.sub(" ", text)))


@dataclass(frozen=True)
class DataRepo:
    """Where and how to commit: a remote (URL or path to a bare repo) and a disposable working clone."""

    remote: str
    workdir: Path
    branch: str = "main"
    prefix: str = "data/"
    token: str | None = field(default=None, repr=False)
    attempts: int = 3
    base_wait_s: float = 1.0
    confirm_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        prefix = self.prefix.strip()
        parts = PurePosixPath(prefix).parts
        if not parts or prefix.startswith("/") or ".." in parts or parts[0] == ".git":
            raise CommitError(f"data prefix (FLEET_DATA_PREFIX) must be a folder inside the repository, got {self.prefix!r}")
        object.__setattr__(self, "prefix", "/".join(parts) + "/")
        object.__setattr__(self, "workdir", Path(self.workdir).expanduser().resolve())
        if self.attempts < 1:
            raise CommitError(f"attempts must be at least 1, got {self.attempts}")
        b = self.branch
        if (not b or b.startswith(("-", "/", ".")) or b.endswith(("/", ".", ".lock")) or ".." in b or "@{" in b
                or "//" in b or "/." in b or b == "@" or any(c in b for c in " ~^:?*[\\") or not b.isprintable()):
            raise CommitError(f"not a usable branch name (FLEET_DATA_BRANCH): {b!r} (git's rules for ref names, see "
                              "`git check-ref-format --branch`)")

    def __repr__(self) -> str:  # the remote may carry a token
        return (f"DataRepo(remote={redact(self.remote, self)!r}, workdir={str(self.workdir)!r}, "
                f"branch={self.branch!r}, prefix={self.prefix!r})")

    @classmethod
    def from_settings(cls, s) -> "DataRepo":
        return cls(remote=s.data_remote, workdir=s.clone_dir, branch=s.branch, prefix=s.prefix,
                   token=s.git_token)


@dataclass(frozen=True)
class CommitResult:
    status: str              # "committed" | "up_to_date"
    sha: str | None          # our commit on the remote branch, or the branch head when up to date
    attempts: int
    paths: list[str]         # repository paths of the given files (prefix + relative path), sorted


def redact(text: object, repo: DataRepo) -> str:
    """``text`` with the repo's token and any URL credentials replaced by ``***``."""
    return Redactor.for_remote(repo.remote, parse_remote(repo.remote, repo.token))(text)


# Test seams: module-level no-ops that tests (and only tests) replace.
def _before_push(repo: DataRepo, attempt: int) -> None:
    """Called after the commit is made and its LFS objects are uploaded, right before ``git push``."""


def _on_copy_chunk(dest: Path, copied: int) -> None:
    """Called after each chunk written while copying an artifact into its snapshot (tests slow it down)."""


def _after_snapshot(arts: list) -> None:
    """Called once the snapshots are taken, before the first attempt (tests rewrite an artifact here)."""


LINK_SNAPSHOTS = True  # False: always copy (tests of the copy path)


def check_remote(repo: DataRepo) -> bool:
    """Whether the remote is a local path to create (it does not exist, or is an empty folder); a CommitError naming
    FLEET_DATA_REMOTE if it is a local path that holds something else. URLs are not checked here (no network)."""
    path = parse_remote(repo.remote, repo.token).local_path
    if path is None or not path.exists():
        return path is not None
    if not path.is_dir():
        raise CommitError(f"data remote (FLEET_DATA_REMOTE) {path} exists and is not a directory (nor a git repository)")
    if (path / "HEAD").is_file() or (path / ".git").exists():
        return False
    if any(path.iterdir()):
        raise CommitError(f"data remote (FLEET_DATA_REMOTE) {path} exists and is not a git repository")
    return True


def ensure_remote(repo: DataRepo) -> None:
    """Create the remote as a bare repository (default branch ``repo.branch``) when it is a local path
    that does not exist yet. URLs are left alone. Idempotent."""
    if not check_remote(repo):
        return
    remote = parse_remote(repo.remote, repo.token)
    path = remote.local_path
    path.parent.mkdir(parents=True, exist_ok=True)
    git = Git(remote, Redactor([]))
    try:
        git.run(["init", "-q", "--bare", f"--initial-branch={repo.branch}", str(path)], None)
    except GitFailure as e:
        raise CommitError(f"could not create data remote {path}: {e}") from None


def commit_files(repo: DataRepo, files: dict[str, Path], *, subject: str, body: str = "",
                 idempotency_key: str, key_with_content: bool = False, log=None) -> CommitResult:
    """Commit ``files`` (path under the prefix -> persisted artifact) to ``repo.branch`` of the remote.

    With ``key_with_content`` the trailer's key is ``idempotency_key`` followed by ``:<sha256>`` of each file
    (in path order): the oid git-lfs computed when it staged the file, so nobody reads the files twice.

    Only paths under ``repo.prefix`` change. Returns ``up_to_date`` without committing when the branch
    already holds exactly this content. Raises ``CommitError`` (credentials redacted) when the commit
    cannot be landed within ``repo.attempts``.
    """
    return _Publisher(repo, log).publish(files, subject=subject, body=body, key=idempotency_key,
                                         key_with_content=key_with_content)


def read_commit_log(repo: DataRepo, n: int = 10) -> list[dict[str, str]]:
    """The last ``n`` commits of the working clone's view of the branch (after a commit_files call)."""
    pub = _Publisher(repo, None)
    out = pub.git.out(["log", f"-n{n}", "-z", "--format=%H%x1f%an%x1f%s%x1f%b", "HEAD"], repo.workdir)
    rows = []
    for rec in filter(None, out.split("\0")):
        sha, author, subject, body = rec.split("\x1f", 3)
        rows.append({"sha": sha, "author": author, "subject": subject, "body": body.strip()})
    return rows


# ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Artifact:
    rel: str          # relative to the prefix
    path: str         # repository path: prefix + rel
    source: Path      # the artifact as given
    snapshot: Path    # the loop's snapshot of it: a hard link to it, or a private copy
    size: int
    linked: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of a linked snapshot; None: a copy
    sha256: str | None = None   # known once git-lfs has staged it
    lfs: bool = False           # staged as an LFS pointer (its object must reach the remote's LFS store)


class _Retry(Exception):
    """This attempt lost (a race, a transient failure); start over from the remote branch."""


def _digest(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb") as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
            size += n
    return size, h.hexdigest()


def _copy(src: Path, dest: Path, progress=None) -> int:
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


def _is_pointer_file(path: Path) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(LFS_POINTER_MAX + 1)
    return len(head) <= LFS_POINTER_MAX and head.startswith(LFS_POINTER_PREFIX)


def parse_pointer(data: bytes | str) -> tuple[str, int] | None:
    """``(oid, size)`` of an LFS pointer, or None when ``data`` is not one."""
    if isinstance(data, str):
        data = data.encode()
    if len(data) > LFS_POINTER_MAX or not data.startswith(LFS_POINTER_PREFIX):
        return None
    m_oid = re.search(rb"^oid sha256:([0-9a-f]{64})$", data, re.MULTILINE)
    m_size = re.search(rb"^size (\d+)$", data, re.MULTILINE)
    if not (m_oid and m_size):
        return None
    return m_oid.group(1).decode(), int(m_size.group(1))


class _Publisher:
    def __init__(self, repo: DataRepo, log):
        self.repo = repo
        self.remote: Remote = parse_remote(repo.remote, repo.token)
        self.redact = Redactor.for_remote(repo.remote, self.remote)
        self.git = Git(self.remote, self.redact)
        self.log = log
        self.wd = repo.workdir
        self.where = f"{self.redact(self.remote.url)} branch {repo.branch}"

    # -- small helpers ---------------------------------------------------------------------------
    def _info(self, msg: str, *args) -> None:
        if self.log is not None:
            self.log.info(self.redact(msg % args if args else msg))

    def _warn(self, msg: str, *args) -> None:
        if self.log is not None:
            self.log.warning(self.redact(msg % args if args else msg))

    def _fail(self, msg: str) -> CommitError:
        return CommitError(self.redact(msg))

    def _permanent(self, text: str) -> bool:
        return _permanent(text, self.remote.url, self.redact(self.remote.url), str(self.remote.local_path or ""))

    def _g(self, *args: str, **kw) -> str:
        return self.git.out(list(args), self.wd, **kw)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One commit loop per working clone at a time, across threads and processes."""
        self.wd.parent.mkdir(parents=True, exist_ok=True)
        with open(self.wd.parent / f".{self.wd.name}.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    @contextmanager
    def _os_errors(self) -> Iterator[None]:
        try:
            yield
        except OSError as e:
            raise self._fail(f"cannot commit to {self.where}: {e}") from e

    # -- the loop ----------------------------------------------------------------------------------
    def publish(self, files: dict[str, Path], *, subject: str, body: str, key: str,
                key_with_content: bool = False) -> CommitResult:
        with self._os_errors():
            checked = self._check_inputs(files)
        self._message(subject, body, key)  # refuse a bad subject or key before touching anything
        paths = sorted(path for _, path, _ in checked)
        last = "no attempt made"
        with self._locked(), self._os_errors():
            arts = self._snapshot(checked)
            try:
                for attempt in range(1, self.repo.attempts + 1):
                    try:
                        status, sha = self._attempt(arts, subject, body, key, key_with_content, attempt)
                    except (_Retry, GitFailure) as e:  # an unexpected git failure gets the same bounded retries
                        last = str(e)
                        self._warn("commit attempt %d/%d to %s lost: %s", attempt, self.repo.attempts,
                                   self.where, last)
                        if attempt < self.repo.attempts:
                            wait = self.repo.base_wait_s * 2 ** (attempt - 1)
                            time.sleep(wait + random.uniform(0, wait / 2))
                        continue
                    self._info("%s %s on %s after %d attempt(s)", status, sha, self.where, attempt)
                    return CommitResult(status=status, sha=sha, attempts=attempt, paths=paths)
            finally:
                shutil.rmtree(self._snapshot_dir(), ignore_errors=True)
        raise self._fail(f"could not land commit on {self.where} after {self.repo.attempts} attempts; "
                         f"last rejection: {last}")

    def _attempt(self, arts: list[_Artifact], subject: str, body: str, key: str, key_with_content: bool,
                 attempt: int) -> tuple[str, str | None]:
        base = self._prepare()
        self._refuse_links([a.path for a in arts] + [self.repo.prefix + ".gitattributes"], base)
        self._restore(arts)
        attrs = self._ensure_attributes()
        changed = self._stage([a.path for a in arts] + [attrs], {a.path for a in arts} | {attrs})
        rewritten = self._rewritten(arts)
        if rewritten:  # what was staged may be half old, half new: take private copies and start over
            for a in rewritten:
                arts[arts.index(a)] = self._take_snapshot(a, link=False)
            raise _Retry("artifact(s) rewritten in place while being staged: "
                         f"{', '.join(str(a.source) for a in rewritten)}; committing private copies instead")
        if not changed:
            return "up_to_date", base
        staged = self._verify_staged(arts)
        new_objects = [a for a in staged if a.lfs and a.path in changed]
        if key_with_content:
            key = ":".join([key.strip(), *(a.sha256 for a in staged)])
        message = self._message(subject, body, key)
        if base is not None and self._already_landed(base, key, staged):
            return "up_to_date", base
        sha = self._commit(message)
        self._info("attempt %d: committed %s (%d path(s)) on top of %s", attempt, sha[:12], len(changed),
                   base[:12] if base else "an empty branch")
        self._push_lfs(new_objects)
        _before_push(self.repo, attempt)
        self._push(sha)
        self._confirm(sha)
        return "committed", sha

    # -- step 0: message and snapshot --------------------------------------------------------------
    def _message(self, subject: str, body: str, key: str) -> str:
        subject = subject.strip()
        if not subject or "\n" in subject:
            raise self._fail(f"commit subject must be one non-empty line, got {subject!r}")
        key = key.strip()
        if not key or any(c in key for c in "\r\n"):
            raise self._fail(f"idempotency key must be one non-empty line, got {key!r}")
        parts = [self.redact(subject)]
        if body.strip():
            parts.append(self.redact(body.strip()))
        parts.append(f"{TRAILER}: {self.redact(key)}")
        return "\n\n".join(parts) + "\n"

    def _check_inputs(self, files: dict[str, Path]) -> list[tuple[str, str, Path]]:
        if not files:
            raise self._fail("commit_files needs at least one file")
        out = []
        for rel, src in sorted(files.items()):
            parts = PurePosixPath(rel).parts
            if (not parts or rel.startswith("/") or "\\" in rel
                    or any(p in ("..", ".") or p in _GIT_NAMES for p in parts)):
                raise self._fail(f"{rel!r} is not a file path inside the data prefix")
            src = Path(src)
            if not src.is_file():
                raise self._fail(f"artifact for {rel} is missing or not a file: {src}")
            if _is_pointer_file(src):
                raise self._fail(f"artifact for {rel} is a Git LFS pointer, not content: {src}")
            out.append((rel, self.repo.prefix + "/".join(parts), src))
        return out

    def _snapshot_dir(self) -> Path:
        return self.wd.parent / f".{self.wd.name}.snapshot"

    def _snapshot(self, checked: list[tuple[str, str, Path]]) -> list[_Artifact]:
        """Snapshot every artifact into the snapshot directory (under the loop's lock, so one at a time): a hard
        link where the file system allows, else a copy (see the module's docstring)."""
        snap = self._snapshot_dir()
        shutil.rmtree(snap, ignore_errors=True)  # a previous loop that was killed
        snap.mkdir(parents=True)
        arts = []
        for i, (rel, path, src) in enumerate(checked):
            dest = snap / f"{i}-{PurePosixPath(rel).name}"
            arts.append(self._take_snapshot(_Artifact(rel=rel, path=path, source=src, snapshot=dest, size=0),
                                            link=LINK_SNAPSHOTS))
        _after_snapshot(arts)
        return arts

    @staticmethod
    def _take_snapshot(a: _Artifact, *, link: bool) -> _Artifact:
        a.snapshot.unlink(missing_ok=True)
        if link:
            try:
                os.link(a.source, a.snapshot)
            except OSError:  # another file system, or links not allowed here: copy
                pass
            else:
                st = a.snapshot.stat()
                return replace(a, size=st.st_size, linked=(st.st_ino, st.st_size, st.st_mtime_ns))
        return replace(a, size=_copy(a.source, a.snapshot, progress=_on_copy_chunk), linked=None)

    def _rewritten(self, arts: list[_Artifact]) -> list[_Artifact]:
        """The linked snapshots whose file changed since they were taken: rewritten in place by someone."""
        changed = []
        for a in arts:
            if a.linked is not None:
                st = a.snapshot.stat()
                if (st.st_ino, st.st_size, st.st_mtime_ns) != a.linked:
                    changed.append(a)
        return changed

    def _ls_remote(self) -> str | None:
        out = self.git.out(["ls-remote", self.remote.url, f"refs/heads/{self.repo.branch}"], None)
        return out.split()[0] if out else None

    def _prepare(self) -> str | None:
        try:
            remote_sha = self._ls_remote()
        except GitFailure as e:
            if self._permanent(str(e)):
                raise self._fail(f"{self.where} refused access and retrying will not help: {e}") from None
            raise _Retry(f"cannot read {self.where}: {e}") from None
        try:
            if not self._usable():
                self._clone()
            try:
                return self._reset(remote_sha)
            except GitFailure as e:
                self._warn("working clone %s unusable (%s); cloning afresh", self.wd, e)
                self._clone()
                return self._reset(remote_sha)
        except GitFailure as e:
            raise _Retry(f"cannot prepare a working clone of {self.where}: {e}") from None

    def _usable(self) -> bool:
        if not (self.wd / ".git").is_dir():
            return False
        url = self.git.run(["config", "--get", "remote.origin.url"], self.wd, check=False).stdout.strip()
        if url != self.remote.url:
            return False
        if self.git.run(["config", "--local", "--get", "filter.lfs.process"], self.wd, check=False).returncode:
            self._g("lfs", "install", "--local")
        return True

    def _clone(self) -> None:
        parent, name = self.wd.parent, self.wd.name
        for stale in parent.glob(f".{name}.cloning-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = parent / f".{name}.cloning-{os.getpid()}-{threading.get_ident()}"
        self._info("cloning %s into %s", self.remote.url, self.wd)
        # Cloned elsewhere and renamed in, so an interrupted clone never looks like a working clone.
        self.git.run(["clone", "-q", "--no-checkout", self.remote.url, str(tmp)], None)
        self.git.run(["lfs", "install", "--local"], tmp)
        if self.wd.exists():
            if not (self.wd / ".git").exists() and any(self.wd.iterdir()):
                shutil.rmtree(tmp, ignore_errors=True)
                raise self._fail(f"workdir {self.wd} exists and is not a git clone; refusing to delete it")
            shutil.rmtree(self.wd)
        os.replace(tmp, self.wd)

    def _reset(self, remote_sha: str | None) -> str | None:
        git_dir = self.wd / ".git"
        for lock in ("index.lock", "HEAD.lock"):  # left by a killed run; we hold the workdir lock
            (git_dir / lock).unlink(missing_ok=True)
        branch = self.repo.branch
        if remote_sha is None:
            # The branch does not exist yet: our commit will be its root.
            self._g("symbolic-ref", "HEAD", f"refs/heads/{branch}")
            self.git.run(["update-ref", "-d", f"refs/heads/{branch}"], self.wd, check=False)
            self._g("read-tree", "--empty")
            self._g("clean", "-ffdxq")
            return None
        tracking = f"refs/remotes/origin/{branch}"
        self._g("fetch", "-q", "--no-tags", "origin", f"+refs/heads/{branch}:{tracking}")
        base = self._g("rev-parse", "--verify", f"{tracking}^{{commit}}")
        self._g("checkout", "-q", "-f", "--detach", base)
        self._g("reset", "-q", "--hard", base)
        self._g("clean", "-ffdxq", "--", self.repo.prefix)
        return base

    # -- step 2: restore artifacts -----------------------------------------------------------------
    def _refuse_links(self, paths: list[str], base: str | None) -> None:
        """The clone holds what others pushed, symbolic links included: writing one of our paths through a link
        (``data/`` or a week's folder pointing elsewhere, or ``.gitattributes`` pointing at a file outside)
        would write outside the clone, so a link anywhere on them is a permanent refusal."""
        for path in paths:
            here = self.wd
            for part in PurePosixPath(path).parts:
                here = here / part
                if here.is_symlink():
                    rel = here.relative_to(self.wd).as_posix()
                    raise self._fail(f"{rel} on {self.where} (at {base[:12] if base else 'no commit'}) is a "
                                     f"symbolic link to {os.readlink(here)!r}; refusing to write {path} "
                                     "through it (someone pushed the link; remove it from the data repo)")
                if not here.exists():
                    break

    def _blob(self, blob: str) -> tuple[int, tuple[str, int] | None]:
        """A blob's size, and ``(oid, size)`` if it is an LFS pointer (only small blobs are read)."""
        size = int(self._g("cat-file", "-s", blob))
        if size > LFS_POINTER_MAX:
            return size, None
        return size, parse_pointer(self._g("cat-file", "blob", blob) + "\n")

    def _restore(self, arts: list[_Artifact]) -> None:
        """Put every artifact's snapshot in the clone, hard-linked when the file system allows (git replaces a
        working-tree file rather than writing into it, and the snapshot is private anyway), else copied."""
        for a in arts:
            dest = self.wd / a.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.fleet-tmp-{os.getpid()}-{threading.get_ident()}")
            try:
                try:
                    os.link(a.snapshot, tmp)
                except OSError:
                    _copy(a.snapshot, tmp)
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)

    def _ensure_attributes(self) -> str:
        """``<prefix>.gitattributes`` tracks parquet with LFS; it lives inside the prefix, so we may write it
        (``_refuse_links`` has checked that it is no link). Returns its repository path."""
        rel = self.repo.prefix + ".gitattributes"
        path = self.wd / rel
        text = path.read_text() if path.is_file() else ""
        if GITATTRIBUTES_LINE not in text.splitlines():
            path.parent.mkdir(parents=True, exist_ok=True)
            sep = "" if not text or text.endswith("\n") else "\n"
            path.write_text(f"{text}{sep}{GITATTRIBUTES_LINE}\n")
        return rel

    # -- step 3: stage and check -------------------------------------------------------------------
    def _stage(self, paths: list[str], allowed: set[str]) -> dict[str, str]:
        """``git add`` (the CLI, so the LFS clean filter runs) exactly ``paths``; return the staged
        changes {path: status}, after checking they are all ours."""
        # -f: the paths are named one by one, and a .gitignore of the data repo must not drop one silently.
        self._g("add", "-f", "--", *paths)
        out = self._g("diff", "--cached", "--no-renames", "--name-status", "-z")
        tokens = out.split("\0")
        changed = {tokens[i + 1]: tokens[i] for i in range(0, len(tokens) - 1, 2)}
        outside = sorted(p for p in changed if not p.startswith(self.repo.prefix) or p not in allowed)
        if outside:
            raise self._fail(f"bug: staged changes outside the data files under {self.repo.prefix!r}: {outside}; "
                             "refusing to commit")
        return changed

    def _verify_staged(self, restored: list[_Artifact]) -> list[_Artifact]:
        """Every file is staged as an LFS pointer of its snapshot's size (parquet always; other files when
        LFS-tracked, else with the snapshot's size); return the artifacts with the oid git-lfs computed."""
        paths = [a.path for a in restored]
        attrs = self._g("check-attr", "-z", "filter", "--", *paths).split("\0")
        lfs = {attrs[i] for i in range(0, len(attrs) - 2, 3) if attrs[i + 2] == "lfs"}
        blobs = self._blobs(None, paths)
        staged = []
        for a in restored:
            blob = blobs.get(a.path)
            if blob is None:
                raise self._fail(f"{a.path} is not in the index after staging")
            size, ptr = self._blob(blob)
            if a.path not in lfs and a.path.endswith(".parquet"):
                raise self._fail(f"{a.path} is not tracked by Git LFS (a .gitattributes overrides "
                                 f"{self.repo.prefix}.gitattributes?); refusing to commit parquet into git")
            if a.path not in lfs:
                if size != a.size:
                    raise self._fail(f"{a.path} staged with {size} bytes, artifact has {a.size}")
                staged.append(replace(a, sha256=_digest(a.snapshot)[1]))  # small: not in LFS
                continue
            if ptr is None or ptr[1] != a.size:
                raise self._fail(f"{a.path} is LFS-tracked but was not staged as the pointer to its artifact "
                                 f"(staged {size} bytes); is git-lfs installed?")
            staged.append(replace(a, sha256=ptr[0], lfs=True))
        return staged

    def _blobs(self, commit: str | None, paths: list[str]) -> dict[str, str]:
        """{path: blob} of those of ``paths`` that the index (``commit`` None) or ``commit`` holds."""
        if commit is None:  # "<mode> <blob> <stage>\t<path>"
            out, blob_field = self._g("ls-files", "-s", "-z", "--", *paths), 1
        else:  # "<mode> <type> <blob>\t<path>"
            out, blob_field = self._g("ls-tree", "-z", commit, "--", *paths), 2
        return {path: meta.split()[blob_field] for meta, path in
                (rec.split("\t", 1) for rec in filter(None, out.split("\0")))}

    def _already_landed(self, base: str, key: str, staged: list[_Artifact]) -> bool:
        """A commit in the branch's history with our idempotency key that set our files to what we staged has
        landed this content already, whatever happened since: others may have pushed other weeks, or changed
        these very files after it, and committing again would revert their change. Only our files count."""
        out = self._g("log", "-n200", "-z", f"--format=%H %(trailers:key={TRAILER},valueonly,separator=%x2C)",
                      base, "--", self.repo.prefix)
        hits = [rec.split(" ", 1)[0] for rec in filter(None, out.split("\0"))
                if rec.partition(" ")[2].strip() == key]
        if not hits:
            return False
        ours = [a.path for a in staged]
        index = self._blobs(None, ours)
        for sha in hits:
            if self._blobs(sha, ours) == index:
                self._info("commit %s already carries %s: %s with this content", sha[:12], TRAILER, key)
                return True
        return False

    # -- step 4: commit, push, confirm ---------------------------------------------------------------
    def _commit(self, message: str) -> str:
        env = {}
        if not self.git.run(["config", "user.name"], self.wd, check=False).stdout.strip() \
                and "GIT_AUTHOR_NAME" not in os.environ:
            env.update(GIT_AUTHOR_NAME=IDENTITY[0], GIT_COMMITTER_NAME=IDENTITY[0])
        if not self.git.run(["config", "user.email"], self.wd, check=False).stdout.strip() \
                and "GIT_AUTHOR_EMAIL" not in os.environ:
            env.update(GIT_AUTHOR_EMAIL=IDENTITY[1], GIT_COMMITTER_EMAIL=IDENTITY[1])
        self.git.run(["commit", "-q", "--cleanup=whitespace", "-F", "-"], self.wd, input=message,
                     extra_env=env)
        return self._g("rev-parse", "HEAD")

    def _push_lfs(self, objects: list[_Artifact]) -> None:
        """Upload the new LFS objects before the commit that references them (else: GH008)."""
        oids = sorted({a.sha256 for a in objects})
        if not oids:
            return
        try:
            for i in range(0, len(oids), 100):
                self._g("lfs", "push", "origin", "--object-id", *oids[i:i + 100])
        except GitFailure as e:
            raise _Retry(f"LFS upload failed: {e}") from None
        store = self.remote.local_path
        if store is None:
            return
        for a in objects:
            oid = a.sha256
            obj = next((root / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
                        for root in (store, store / ".git") if (root / "lfs").is_dir()), None)
            if obj is None or not obj.is_file() or obj.stat().st_size != a.size:
                raise _Retry(f"LFS object {oid} ({a.path}, {a.size} bytes) is not in the remote's store "
                             "after upload")
        self._info("uploaded %d LFS object(s)", len(oids))

    def _push(self, sha: str) -> None:
        proc = self.git.run(["push", "--porcelain", "origin", f"{sha}:refs/heads/{self.repo.branch}"],
                            self.wd, check=False)
        if proc.returncode == 0:
            return
        lines = [ln.strip() for ln in (proc.stderr + "\n" + proc.stdout).splitlines()]
        keep = [ln for ln in lines if ln and not ln.startswith(("hint:", "To ", "Done")) and ln != "remote:"]
        reason = self.redact(" | ".join(keep) or f"git push exited {proc.returncode}")
        if self._permanent(reason):
            raise self._fail(f"push to {self.where} was refused and retrying will not help: {reason}")
        raise _Retry(f"push rejected: {reason}")

    def _confirm(self, sha: str) -> None:
        """Poll until the remote branch contains ``sha`` (it may already have moved past it)."""
        deadline = time.monotonic() + self.repo.confirm_timeout_s
        delay, seen = 0.05, "nothing"
        while True:
            try:
                head = self._ls_remote()
                seen = head or "no branch"
                if head == sha:
                    return
                if head:
                    self._g("fetch", "-q", "--no-tags", "origin",
                            f"+refs/heads/{self.repo.branch}:refs/remotes/origin/{self.repo.branch}")
                    if self.git.run(["merge-base", "--is-ancestor", sha, head], self.wd,
                                    check=False).returncode == 0:
                        return
            except GitFailure as e:
                seen = str(e)
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._fail(f"pushed {sha} to {self.where}, but the branch did not contain it within "
                                 f"{self.repo.confirm_timeout_s:.0f}s (last seen: {seen})")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 2.0)
