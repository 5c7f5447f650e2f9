"""The working clone the loop commits from: one loop at a time, reused while it tracks the remote, reset to the
remote branch for every attempt, and checked for what is written and staged in it.

Every git call goes through GitPython's ``Repo.git``, which runs the real git and git-lfs CLIs, so the LFS clean
filter runs when a file is staged (``Repo.index.add`` would bypass it). A ``Repo`` is opened per attempt and closed
after it: GitPython's docs warn against holding one open in a long-running process.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path, PurePosixPath

import git

from fleet.publish import lfs
from fleet.publish.datarepo import DataRepo
from fleet.publish.message import TRAILER
from fleet.publish.remote import Say, failure, permanent
from fleet.publish.snapshot import Artifact, copy, digest


class Retry(Exception):
    """This attempt lost (a race, a transient failure); start over from the remote branch."""


class WorkingClone:
    def __init__(self, data: DataRepo, say: Say):
        self.data = data
        self.remote = data.parsed()
        self.say = say
        self.dir = data.clone_dir
        self.where = f"{say.redact(self.remote.url)} branch {data.branch}"
        self.snapshot_dir = self.dir.parent / f".{self.dir.name}.snapshot"

    def permanent(self, text: str) -> bool:
        return permanent(text, self.remote.url, self.say.redact(self.remote.url), str(self.remote.local_path or ""))

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One commit loop per working clone at a time, across threads and processes."""
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.dir.parent / f".{self.dir.name}.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def remote_head(self) -> str | None:
        """The remote branch's commit, None when the branch does not exist yet."""
        out = self.remote.command(self.dir.parent).ls_remote(self.remote.url, f"refs/heads/{self.data.branch}")
        return out.split()[0] if out else None

    # -- a checkout of the remote branch, per attempt -------------------------------------------------
    def checkout(self, remote_sha: str | None) -> git.Repo:
        """The clone, opened and reset to ``remote_sha`` (None: an empty, unborn branch). The caller closes it."""
        try:
            repo = self._open() or self._clone()
            try:
                self._reset(repo, remote_sha)
            except git.CommandError as e:
                repo.close()
                self.say.warn("working clone %s unusable (%s); cloning afresh", self.dir, failure(e))
                repo = self._clone()
                self._reset(repo, remote_sha)
            return repo
        except git.CommandError as e:
            raise Retry(f"cannot prepare a working clone of {self.where}: {failure(e)}") from None

    def _repo(self, path: Path) -> git.Repo:
        repo = git.Repo(path)
        repo.git.update_environment(**self.remote.environment())
        return repo

    def _open(self) -> git.Repo | None:
        """The existing clone if it is one of this remote (with LFS installed), else None."""
        if not (self.dir / ".git").is_dir():
            return None
        try:
            repo = self._repo(self.dir)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            return None
        try:
            if repo.git.config("--get", "remote.origin.url", with_exceptions=False) != self.remote.url:
                repo.close()
                return None
            lfs.install(repo)
        except BaseException:
            repo.close()
            raise
        return repo

    def _clone(self) -> git.Repo:
        parent, name = self.dir.parent, self.dir.name
        for stale in parent.glob(f".{name}.cloning-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = parent / f".{name}.cloning-{os.getpid()}-{threading.get_ident()}"
        self.say.info("cloning %s into %s", self.remote.url, self.dir)
        # Cloned elsewhere and renamed in, so an interrupted clone never looks like a working clone.
        self.remote.command(parent).clone("-q", "--no-checkout", self.remote.url, str(tmp))
        with self._repo(tmp) as fresh:
            lfs.install(fresh)
        if self.dir.exists():
            if not (self.dir / ".git").exists() and any(self.dir.iterdir()):
                shutil.rmtree(tmp, ignore_errors=True)
                raise self.say.fail(f"workdir {self.dir} exists and is not a git clone; refusing to delete it")
            shutil.rmtree(self.dir)
        os.replace(tmp, self.dir)
        return self._repo(self.dir)

    def _reset(self, repo: git.Repo, remote_sha: str | None) -> None:
        for lock in ("index.lock", "HEAD.lock"):  # left by a killed run; we hold the clone's lock
            (Path(repo.git_dir) / lock).unlink(missing_ok=True)
        g, branch = repo.git, self.data.branch
        if remote_sha is None:
            # The branch does not exist yet: our commit will be its root.
            g.symbolic_ref("HEAD", f"refs/heads/{branch}")
            g.update_ref("-d", f"refs/heads/{branch}", with_exceptions=False)
            g.read_tree("--empty")
            g.clean("-ffdxq")
            return
        tracking = f"refs/remotes/origin/{branch}"
        g.fetch("-q", "--no-tags", "origin", f"+refs/heads/{branch}:{tracking}")
        base = g.rev_parse("--verify", f"{tracking}^{{commit}}")
        g.checkout("-q", "-f", "--detach", base)
        g.reset("-q", "--hard", base)
        g.clean("-ffdxq", "--", self.data.prefix)

    # -- writing the artifacts in ------------------------------------------------------------------
    def refuse_links(self, paths: list[str], base: str | None) -> None:
        """The clone holds what others pushed, symbolic links included: writing one of our paths through a link
        (``data/`` or a week's folder pointing elsewhere, or ``.gitattributes`` pointing at a file outside)
        would write outside the clone, so a link anywhere on them is a permanent refusal."""
        for path in paths:
            here = self.dir
            for part in PurePosixPath(path).parts:
                here = here / part
                if here.is_symlink():
                    rel = here.relative_to(self.dir).as_posix()
                    raise self.say.fail(f"{rel} on {self.where} (at {base[:12] if base else 'no commit'}) is a "
                                        f"symbolic link to {os.readlink(here)!r}; refusing to write {path} "
                                        "through it (someone pushed the link; remove it from the data repo)")
                if not here.exists():
                    break

    def restore(self, arts: list[Artifact]) -> None:
        """Put every artifact's snapshot in the clone, hard-linked when the file system allows, else copied. Git
        replaces a working-tree file (unlink, then create) and never writes into one, so the link cannot change
        the artifact."""
        for a in arts:
            dest = self.dir / a.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.fleet-tmp-{os.getpid()}-{threading.get_ident()}")
            try:
                try:
                    os.link(a.snapshot, tmp)
                except OSError:
                    copy(a.snapshot, tmp)
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)

    # -- staging and its checks --------------------------------------------------------------------
    def stage(self, repo: git.Repo, paths: list[str], allowed: set[str]) -> dict[str, str]:
        """``git add`` exactly ``paths`` (the CLI, so the LFS clean filter runs); return the staged changes
        {path: status}, after checking they are all ours."""
        # -f: the paths are named one by one, and a .gitignore of the data repo must not drop one silently.
        repo.git.add("-f", "--", *paths)
        tokens = repo.git.diff("--cached", "--no-renames", "--name-status", "-z").split("\0")
        changed = {tokens[i + 1]: tokens[i] for i in range(0, len(tokens) - 1, 2)}
        outside = sorted(p for p in changed if not p.startswith(self.data.prefix) or p not in allowed)
        if outside:
            raise self.say.fail(f"bug: staged changes outside the data files under {self.data.prefix!r}: {outside}; "
                                "refusing to commit")
        return changed

    def unstage(self, repo: git.Repo, paths: list[str]) -> list[str]:
        """Delete ``paths`` from the checkout and the index (an operator's drop); returns those it held."""
        if not paths:
            return []
        held = [p for p in repo.git.ls_files("-z", "--", *paths).split("\0") if p]
        if held:
            repo.git.rm("-q", "--", *held)
        return held

    @staticmethod
    def listing(repo: git.Repo, base: str | None, folder: str) -> dict[str, str]:
        """What ``base`` holds under ``folder``: path -> the commit that last changed it (one ``git log``)."""
        if base is None:
            return {}
        out: dict[str, str] = {}
        commit = None
        for line in repo.git.log("--format=%x00%H", "--name-only", "--no-renames", base, "--", folder).splitlines():
            if line.startswith("\0"):
                commit = line[1:]
            elif line and commit and line not in out:
                out[line] = commit
        present = set(repo.git.ls_tree("-r", "--name-only", base, "--", folder).splitlines())
        return {path: sha for path, sha in sorted(out.items()) if path in present}

    def verify_staged(self, repo: git.Repo, restored: list[Artifact]) -> list[Artifact]:
        """Every file is staged as an LFS pointer of its snapshot's size (parquet always; other files when
        LFS-tracked, else with the snapshot's size); return the artifacts with the oid git-lfs computed (fleet
        does not hash them itself: sha256 of 1 GB takes ~4 s on a CPU without SHA extensions)."""
        paths = [a.path for a in restored]
        attrs = repo.git.check_attr("-z", "filter", "--", *paths).split("\0")
        tracked = {attrs[i] for i in range(0, len(attrs) - 2, 3) if attrs[i + 2] == "lfs"}
        blobs = self.blobs(repo, None, paths)
        staged = []
        for a in restored:
            blob = blobs.get(a.path)
            if blob is None:
                raise self.say.fail(f"{a.path} is not in the index after staging")
            size, ptr = self._blob(repo, blob)
            if a.path not in tracked and a.path.endswith(".parquet"):
                raise self.say.fail(f"{a.path} is not tracked by Git LFS (a .gitattributes overrides "
                                    f"{self.data.prefix}.gitattributes?); refusing to commit parquet into git")
            if a.path not in tracked:
                if size != a.size:
                    raise self.say.fail(f"{a.path} staged with {size} bytes, artifact has {a.size}")
                staged.append(replace(a, sha256=digest(a.snapshot)))  # small: not in LFS
                continue
            if ptr is None or ptr[1] != a.size:
                raise self.say.fail(f"{a.path} is LFS-tracked but was not staged as the pointer to its artifact "
                                    f"(staged {size} bytes); is git-lfs installed?")
            staged.append(replace(a, sha256=ptr[0], lfs=True))
        return staged

    @staticmethod
    def _blob(repo: git.Repo, blob: str) -> tuple[int, tuple[str, int] | None]:
        """A blob's size, and ``(oid, size)`` if it is an LFS pointer (only small blobs are read)."""
        size = int(repo.git.cat_file("-s", blob))
        if size > lfs.POINTER_MAX:
            return size, None
        return size, lfs.parse_pointer(repo.git.cat_file("blob", blob) + "\n")

    @staticmethod
    def blobs(repo: git.Repo, commit: str | None, paths: list[str]) -> dict[str, str]:
        """{path: blob} of those of ``paths`` that the index (``commit`` None) or ``commit`` holds."""
        if commit is None:  # "<mode> <blob> <stage>\t<path>"
            out, blob_field = repo.git.ls_files("-s", "-z", "--", *paths), 1
        else:  # "<mode> <type> <blob>\t<path>"
            out, blob_field = repo.git.ls_tree("-z", commit, "--", *paths), 2
        return {path: meta.split()[blob_field] for meta, path in
                (rec.split("\t", 1) for rec in filter(None, out.split("\0")))}

    def already_landed(self, repo: git.Repo, base: str, key: str, staged: list[Artifact]) -> bool:
        """A commit in the branch's history with our idempotency key that set our files to what we staged has
        landed this content already, whatever happened since: others may have pushed other weeks, or changed
        these very files after it, and committing again would revert their change. Only our files count."""
        out = repo.git.log("-n200", "-z", f"--format=%H %(trailers:key={TRAILER},valueonly,separator=%x2C)",
                           base, "--", self.data.prefix)
        hits = [rec.split(" ", 1)[0] for rec in filter(None, out.split("\0"))
                if rec.partition(" ")[2].strip() == key]
        if not hits:
            return False
        ours = [a.path for a in staged]
        index = self.blobs(repo, None, ours)
        for sha in hits:
            if self.blobs(repo, sha, ours) == index:
                self.say.info("commit %s already carries %s: %s with this content", sha[:12], TRAILER, key)
                return True
        return False
