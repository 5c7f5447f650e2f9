"""The data repository fleet commits to: where it is (remote, branch, prefix, token, working clone), and refused in
one line when it is not there or does not answer. fleet never creates it, but for the demo's own (:func:`create_remote`):
a mistyped path would otherwise become a new repository that takes the week's rows."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import git

from fleet.errors import CommitError
from fleet.publish.remote import Redactor, Remote, failure, parse_remote


@dataclass(frozen=True)
class DataRepo:
    """Where and how to commit: a remote (URL or path to a bare repo) and a disposable working clone."""

    remote: str
    clone_dir: Path
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
        object.__setattr__(self, "clone_dir", Path(self.clone_dir).expanduser().resolve())
        if self.attempts < 1:
            raise CommitError(f"attempts must be at least 1, got {self.attempts}")
        b = self.branch
        if (not b or b.startswith(("-", "/", ".")) or b.endswith(("/", ".", ".lock")) or ".." in b or "@{" in b
                or "//" in b or "/." in b or b == "@" or any(c in b for c in " ~^:?*[\\") or not b.isprintable()):
            raise CommitError(f"not a usable branch name (FLEET_DATA_BRANCH): {b!r} (git's rules for ref names, see "
                              "`git check-ref-format --branch`)")

    def __repr__(self) -> str:  # the remote may carry a token
        return (f"DataRepo(remote={redact(self.remote, self)!r}, clone_dir={str(self.clone_dir)!r}, "
                f"branch={self.branch!r}, prefix={self.prefix!r})")

    @classmethod
    def from_settings(cls, s) -> "DataRepo":
        """From fleet's environment settings (FLEET_DATA_REMOTE, FLEET_DATA_BRANCH, FLEET_DATA_PREFIX,
        FLEET_GIT_TOKEN or FLEET_GIT_TOKEN_FILE, and the clone under FLEET_HOME)."""
        from fleet.secrets import git_token, git_token_file

        return cls(remote=s.data_remote, clone_dir=s.clone_dir, branch=s.branch, prefix=s.prefix,
                   token=git_token(s.git_token, git_token_file()))

    def parsed(self) -> Remote:
        return parse_remote(self.remote, self.token)

    def redactor(self) -> Redactor:
        return Redactor.for_remote(self.remote, self.parsed())


def redact(text: object, repo: DataRepo) -> str:
    """``text`` with the repo's token and any URL credentials replaced by ``***``."""
    return repo.redactor()(text)


# How long `git ls-remote` may take to answer before a run is refused: a host that drops packets would otherwise
# hold the run for the kernel's connect timeout (minutes); a remote that answers does so in well under a second.
ANSWER_TIMEOUT_S = 30.0
_FIX = ("fleet creates none but the demo's (`fleet demo` without FLEET_DATA_REMOTE): create the repository, or "
        "correct FLEET_DATA_REMOTE")


def _missing(repo: DataRepo) -> bool:
    """Whether the remote is a local path with nothing there yet (or an empty folder); a CommitError naming
    FLEET_DATA_REMOTE if it is a local path that holds something other than a repository."""
    path = repo.parsed().local_path
    if path is None or not path.exists():
        return path is not None
    if not path.is_dir():
        raise CommitError(f"data remote (FLEET_DATA_REMOTE) {path} exists and is not a directory (nor a git repository)")
    if (path / "HEAD").is_file() or (path / ".git").exists():
        return False
    if any(path.iterdir()):
        raise CommitError(f"data remote (FLEET_DATA_REMOTE) {path} exists and is not a git repository")
    return True


def check_remote(repo: DataRepo) -> None:
    """Refuse, without the network, a local remote that is not a repository or does not exist; URLs pass."""
    if _missing(repo):
        raise CommitError(f"data remote (FLEET_DATA_REMOTE) {repo.parsed().local_path} does not exist; {_FIX}")


def verify_remote(repo: DataRepo, timeout_s: float = ANSWER_TIMEOUT_S) -> None:
    """Refuse a remote that is not there or does not answer `git ls-remote` (with the token, as the commit sends
    it), in one line naming the remote (credentials redacted) and the fix: before a week is scraped, not after."""
    check_remote(repo)
    remote = repo.parsed()
    cwd = remote.local_path.parent if remote.local_path else None
    try:
        remote.command(cwd).ls_remote(remote.url, f"refs/heads/{repo.branch}", kill_after_timeout=timeout_s)
    except git.CommandError as e:
        raise CommitError(redact(f"data remote (FLEET_DATA_REMOTE) {remote.url} does not answer: {failure(e)}; "
                                 f"check FLEET_DATA_REMOTE{' and FLEET_GIT_TOKEN' if remote.is_http else ''}, "
                                 "and that the repository exists: fleet never creates it", repo)) from None


def ensure_remote(repo: DataRepo) -> None:
    """What a commit checks first: the remote is there (:func:`check_remote`). Never creates it: a commit into a
    repository it made would land where nobody looks."""
    check_remote(repo)


def create_remote(repo: DataRepo) -> None:
    """Create the remote as a bare repository (default branch ``repo.branch``) when it is a local path that does
    not exist yet: the demo's own data repository only. Idempotent."""
    if not _missing(repo):
        return
    path = repo.parsed().local_path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        git.Git(path.parent).init("-q", "--bare", f"--initial-branch={repo.branch}", str(path))
    except git.CommandError as e:
        raise CommitError(f"could not create data remote {path}: {failure(e)}") from None
