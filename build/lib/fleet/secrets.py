"""Which process holds which secret.

- The data repository's token: only the step that commits (``raw_commit``, ``processed_commit``, and `fleet commit`)
  reads it, from a file only its owner may read (``FLEET_GIT_TOKEN_FILE``). A ``FLEET_GIT_TOKEN`` given to the CLI
  is moved there at start (:func:`hide_git_token`), out of the environment that its children inherit: the run
  worker, the step processes, the daemon and webserver of `fleet ui`, the attempt processes. git, run by the commit
  step for an https remote, gets it as a header scoped to the remote's host (fleet/publish/remote.py).
- The artifact store's (``AWS_*``), the instance's (``FLEET_POSTGRES_URL``), Slack's and the Celery result
  backend's credentials: the processes of fleet's own code that use them; attempt processes (scraper code, Playwright,
  Chromium) get none of them (fleet/engine/sandbox.py ``attempt_env``). ``FLEET_CELERY_BROKER`` they do get: the
  politeness bounds are kept in the broker's Redis.
- A recorded fixture holds none of these values, nor a cookie the site set (fleet/lifecycle/fixtures.py).
"""
from __future__ import annotations

import atexit
import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

from fleet import config
from fleet.errors import FleetError

TOKEN_VAR, TOKEN_FILE_VAR = "FLEET_GIT_TOKEN", "FLEET_GIT_TOKEN_FILE"
# Never in an attempt process's environment.
ATTEMPT_SECRETS = (TOKEN_VAR, TOKEN_FILE_VAR, "FLEET_SLACK_TOKEN", "FLEET_POSTGRES_URL", "FLEET_CELERY_BACKEND",
                   "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
_URLS = ("FLEET_CELERY_BROKER", "FLEET_CELERY_BACKEND", "FLEET_POSTGRES_URL")


def git_token_file() -> str | None:
    return config.values_of([TOKEN_FILE_VAR]).get(TOKEN_FILE_VAR)


def hide_git_token(home: Path | None = None) -> Path | None:
    """Move ``FLEET_GIT_TOKEN`` out of this process's environment into ``FLEET_HOME/secrets/git-token.PID`` (0600,
    in a 0700 folder), named by ``FLEET_GIT_TOKEN_FILE`` for the children; removed when this process ends. Returns
    the file, or None when there is no token to move. Every `fleet` command does this first."""
    token = config.values_of([TOKEN_VAR]).get(TOKEN_VAR)
    if not token:
        return None
    if git_token_file():
        raise FleetError(f"both {TOKEN_VAR} and {TOKEN_FILE_VAR} are set; set only one")
    folder = Path(home or config.settings().home) / "secrets"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    for stale in folder.glob("git-token.*"):  # left by a command that was killed: its process is gone
        pid = stale.suffix.lstrip(".")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            stale.unlink(missing_ok=True)
    path = folder / f"git-token.{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token)
    atexit.register(path.unlink, missing_ok=True)
    config.export(**{TOKEN_VAR: None, TOKEN_FILE_VAR: str(path)})
    return path


def read_git_token(path: str) -> str:
    """The token in ``path`` (FLEET_GIT_TOKEN_FILE), refused in one line when it cannot be read, is empty, or may be
    read by others than its owner."""
    try:
        st = os.stat(path)
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise FleetError(f"{TOKEN_FILE_VAR} {path} may be read by others than its owner "
                             f"(mode {stat.S_IMODE(st.st_mode):o}); chmod 600 {path}")
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise FleetError(f"{TOKEN_FILE_VAR} {path} cannot be read: {exc.strerror}") from None
    if not token:
        raise FleetError(f"{TOKEN_FILE_VAR} {path} is empty")
    return token


def git_token(token: str | None, token_file: str | None) -> str | None:
    """The token given directly (``FLEET_GIT_TOKEN`` outside the CLI), else the one in ``token_file``."""
    return token or (read_git_token(token_file) if token_file else None)


def secret_values() -> dict[str, str]:
    """Each configured secret's value (at least 6 characters), by where it is set: the git token (its variable or
    its file), the other credentials of :data:`ATTEMPT_SECRETS`, and the password in a broker, backend or Postgres
    URL."""
    found = {n: v for n, v in config.values_of(ATTEMPT_SECRETS).items() if n not in (TOKEN_FILE_VAR, *_URLS)}
    path = git_token_file()
    if path and TOKEN_VAR not in found:
        try:
            found[TOKEN_VAR] = read_git_token(path)
        except FleetError:
            pass
    for name, url in config.values_of(_URLS).items():
        try:
            password = urlsplit(url).password
        except ValueError:
            password = None
        if password:
            found[f"{name}'s password"] = password
    return {n: v for n, v in found.items() if len(v) >= 6}
