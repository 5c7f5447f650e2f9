"""The data repository fleet commits to: where it is (remote, branch, prefix, token, working clone), refused in one
line when git could not use it, and created when it is a local path that does not exist yet."""
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


def check_remote(repo: DataRepo) -> bool:
    """Whether the remote is a local path to create (it does not exist, or is an empty folder); a CommitError naming
    FLEET_DATA_REMOTE if it is a local path that holds something else. URLs are not checked here (no network)."""
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


def ensure_remote(repo: DataRepo) -> None:
    """Create the remote as a bare repository (default branch ``repo.branch``) when it is a local path
    that does not exist yet. URLs are left alone. Idempotent."""
    if not check_remote(repo):
        return
    path = repo.parsed().local_path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        git.Git(path.parent).init("-q", "--bare", f"--initial-branch={repo.branch}", str(path))
    except git.CommandError as e:
        raise CommitError(f"could not create data remote {path}: {failure(e)}") from None
