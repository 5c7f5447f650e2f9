"""The commit loop: land artifacts under the data prefix of a Git-LFS data repository, touching nothing else, never
force-pushing, retrying when another writer moves the branch first.

Each attempt starts from the remote branch, restores the artifacts from their snapshot, stages only the prefix,
uploads the LFS objects before the commit that references them, pushes, and confirms that the remote branch
contains the commit.
"""
from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import git

from fleet import config
from fleet.publish import lfs, message, snapshot
from fleet.publish.clone import Retry, WorkingClone
from fleet.publish.datarepo import DataRepo
from fleet.publish.remote import Say, failure
from fleet.publish.snapshot import Artifact

IDENTITY = ("fleet", "fleet@localhost")


@dataclass(frozen=True)
class CommitResult:
    status: str              # "committed" | "up_to_date"
    sha: str | None          # our commit on the remote branch, or the branch head when up to date
    attempts: int
    paths: list[str]         # repository paths of the given files (prefix + relative path), sorted
    # with ``listing``: what the branch held under that folder when this commit was made (or found up to date),
    # path (under the prefix) -> the commit that last changed it
    listed: dict[str, str] = field(default_factory=dict)
    lfs_bytes: int = 0       # what this commit added to the remote's LFS storage (its new objects)


# Test seam: a module-level no-op that tests (and only tests) replace.
def _before_push(repo: DataRepo, attempt: int) -> None:
    """Called after the commit is made and its LFS objects are uploaded, right before ``git push``."""


Body = str | Callable[[dict[str, str]], str]


def commit_files(repo: DataRepo, files: dict[str, Path], *, subject: str, body: Body = "",
                 idempotency_key: str, key_with_content: bool = False, remove: Sequence[str] = (),
                 listing: str | None = None, log=None) -> CommitResult:
    """Commit ``files`` (path under the prefix -> persisted artifact) to ``repo.branch`` of the remote.

    With ``key_with_content`` the trailer's key is ``idempotency_key`` followed by ``:<sha256>`` of each file
    (in path order): the oid git-lfs computed when it staged the file, so nobody reads the files twice.

    ``remove`` names paths under the prefix to delete in the same commit (an operator's explicit drop; one the
    branch does not hold is nothing to do). With ``listing`` (a folder under the prefix) ``body`` may be a
    function of what the branch holds there at the commit's base (``CommitResult.listed``), so a message about
    what the week's folder keeps is true of the commit it describes, however the branch moved.

    Only paths under ``repo.prefix`` change. Returns ``up_to_date`` without committing when the branch
    already holds exactly this content. Raises ``CommitError`` (credentials redacted) when the commit
    cannot be landed within ``repo.attempts``.
    """
    return _Loop(repo, log).run(files, subject=subject, body=body, key=idempotency_key.strip(),
                                key_with_content=key_with_content, remove=list(remove), listing=listing)


class _Loop:
    def __init__(self, data: DataRepo, log):
        self.data = data
        self.say = Say(data.redactor(), log)
        self.clone = WorkingClone(data, self.say)
        self.uploaded = 0
        self.where = self.clone.where

    @contextmanager
    def _os_errors(self) -> Iterator[None]:
        try:
            yield
        except OSError as e:
            raise self.say.fail(f"cannot commit to {self.where}: {e}") from e

    def run(self, files: dict[str, Path], *, subject: str, body: Body, key: str,
            key_with_content: bool, remove: list[str], listing: str | None) -> CommitResult:
        with self._os_errors():
            checked = snapshot.check_inputs(files, self.data.prefix, self.say)
        removed = sorted(self.data.prefix + snapshot.relative(path, self.say) for path in remove)
        message.check(subject, key, self.say)  # refused before anything is touched
        paths = sorted(path for _, path, _ in checked)
        last, attempts = "no attempt made", self.data.attempts
        with self.clone.locked(), self._os_errors():
            arts = snapshot.take_all(checked, self.clone.snapshot_dir)
            try:
                for attempt in range(1, attempts + 1):
                    try:
                        status, sha, listed = self._attempt(arts, subject, body, key, key_with_content, attempt,
                                                            removed, listing)
                    except (Retry, lfs.UploadFailed, git.CommandError) as e:
                        # an unexpected git failure gets the same bounded retries as a lost race
                        last = self.say.redact(failure(e) if isinstance(e, git.CommandError) else e)
                        self.say.warn("commit attempt %d/%d to %s lost: %s", attempt, attempts, self.where, last)
                        if attempt < attempts:
                            wait = self.data.base_wait_s * 2 ** (attempt - 1)
                            time.sleep(wait + random.uniform(0, wait / 2))
                        continue
                    self.say.info("%s %s on %s after %d attempt(s)", status, sha, self.where, attempt)
                    return CommitResult(status=status, sha=sha, attempts=attempt, paths=paths, listed=listed,
                                        lfs_bytes=self.uploaded)
            finally:
                shutil.rmtree(self.clone.snapshot_dir, ignore_errors=True)
        raise self.say.fail(f"could not land commit on {self.where} after {attempts} attempts; "
                            f"last rejection: {last}")

    def _attempt(self, arts: list[Artifact], subject: str, body: Body, key: str, key_with_content: bool,
                 attempt: int, removed: list[str], listing: str | None) -> tuple[str, str | None, dict[str, str]]:
        try:
            base = self.clone.remote_head()
        except git.CommandError as e:
            if self.clone.permanent(failure(e)):
                raise self.say.fail(f"{self.where} refused access and retrying will not help: {failure(e)}") from None
            raise Retry(f"cannot read {self.where}: {failure(e)}") from None
        with self.clone.checkout(base) as repo:
            listed = ({path[len(self.data.prefix):]: sha for path, sha in
                       self.clone.listing(repo, base, self.data.prefix + listing).items()} if listing else {})
            text = body(listed) if callable(body) else body
            return (*self._land(repo, base, arts, subject, text, key, key_with_content, attempt, removed), listed)

    def _land(self, repo: git.Repo, base: str | None, arts: list[Artifact], subject: str, body: str, key: str,
              key_with_content: bool, attempt: int, removed: list[str]) -> tuple[str, str | None]:
        self.uploaded = 0
        self.clone.refuse_links([a.path for a in arts] + [self.data.prefix + ".gitattributes"] + removed, base)
        self.clone.restore(arts)
        attrs = lfs.ensure_attributes(self.clone.dir, self.data.prefix)
        gone = self.clone.unstage(repo, removed)
        changed = self.clone.stage(repo, [a.path for a in arts] + [attrs], {a.path for a in arts} | {attrs} | set(gone))
        rewritten = snapshot.rewritten(arts)
        if rewritten:  # what was staged may be half old, half new: take private copies and start over
            for a in rewritten:
                arts[arts.index(a)] = snapshot.take(a, link=False)
            raise Retry("artifact(s) rewritten in place while being staged: "
                        f"{', '.join(str(a.source) for a in rewritten)}; committing private copies instead")
        if not changed:
            return "up_to_date", base
        staged = self.clone.verify_staged(repo, arts)
        if key_with_content:
            key = message.content_key(key, [a.sha256 for a in staged])
        if gone:
            key = f"{key}:dropped={','.join(gone)}"
        text = message.build(subject, body, key, self.say)
        if base is not None and self.clone.already_landed(repo, base, key, staged):
            return "up_to_date", base
        sha = self._commit(repo, text)
        self.say.info("attempt %d: committed %s (%d path(s)) on top of %s", attempt, sha[:12], len(changed),
                      base[:12] if base else "an empty branch")
        new_objects = [a for a in staged if a.lfs and a.path in changed]
        self.uploaded = sum({a.sha256: a.size for a in new_objects}.values())
        if new_objects:
            lfs.push_objects(repo, self.clone.remote, new_objects)
            self.say.info("uploaded %d LFS object(s)", len({a.sha256 for a in new_objects}))
        _before_push(self.data, attempt)
        self._push(repo, sha)
        self._confirm(repo, sha)
        return "committed", sha

    def _commit(self, repo: git.Repo, text: str) -> str:
        env, (name, email) = {}, config.git_author()
        if not repo.git.config("user.name", with_exceptions=False) and name is None:
            env.update(GIT_AUTHOR_NAME=IDENTITY[0], GIT_COMMITTER_NAME=IDENTITY[0])
        if not repo.git.config("user.email", with_exceptions=False) and email is None:
            env.update(GIT_AUTHOR_EMAIL=IDENTITY[1], GIT_COMMITTER_EMAIL=IDENTITY[1])
        msg = Path(repo.git_dir) / "FLEET_COMMIT_MSG"
        msg.write_text(text)
        repo.git.commit("-q", "--cleanup=whitespace", "-F", str(msg), env=env)
        return repo.git.rev_parse("HEAD")

    def _push(self, repo: git.Repo, sha: str) -> None:
        """A plain push (no force; the pre-push hook runs, and uploads any LFS object still missing)."""
        status, out, err = repo.git.push("--porcelain", "origin", f"{sha}:refs/heads/{self.data.branch}",
                                         with_extended_output=True, with_exceptions=False)
        if status == 0:
            return
        lines = [ln.strip() for ln in f"{err}\n{out}".splitlines()]
        keep = [ln for ln in lines if ln and not ln.startswith(("hint:", "To ", "Done")) and ln != "remote:"]
        reason = self.say.redact(" | ".join(keep) or f"git push exited {status}")
        if self.clone.permanent(reason):
            raise self.say.fail(f"push to {self.where} was refused and retrying will not help: {reason}")
        raise Retry(f"push rejected: {reason}")

    def _confirm(self, repo: git.Repo, sha: str) -> None:
        """Poll until the remote branch contains ``sha`` (it may already have moved past it)."""
        deadline = time.monotonic() + self.data.confirm_timeout_s
        delay, seen = 0.05, "nothing"
        branch = self.data.branch
        while True:
            try:
                head = self.clone.remote_head()
                seen = head or "no branch"
                if head == sha:
                    return
                if head:
                    repo.git.fetch("-q", "--no-tags", "origin", f"+refs/heads/{branch}:refs/remotes/origin/{branch}")
                    if repo.git.merge_base("--is-ancestor", sha, head, with_extended_output=True,
                                           with_exceptions=False)[0] == 0:
                        return
            except git.CommandError as e:
                seen = failure(e)
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.say.fail(f"pushed {sha} to {self.where}, but the branch did not contain it within "
                                    f"{self.data.confirm_timeout_s:.0f}s (last seen: {seen})")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 2.0)
