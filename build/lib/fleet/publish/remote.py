"""How git reaches the data repository's remote: the URL apart from its credentials, the token as a header scoped to
the remote's host, what git's refusals mean, and the redaction every text leaving fleet.publish goes through."""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import git

from fleet import config
from fleet.errors import CommitError, without_credentials
from fleet.secrets import ATTEMPT_SECRETS

_AUTH_HEADER = re.compile(r"(?i)(authorization:\s*\S+\s+)\S+")

# A rejection that retrying cannot cure: branch protection, workflow files, identity/authentication, a remote
# that cannot take pushes. Matched against git's words only (see ``permanent``): a URL or a path such as
# ``org/workflow-data.git`` must not turn a refused connection into a permanent failure.
_PERMANENT_REJECTION = re.compile(
    r"GH001|GH006|GH007|GH013|protected branch|refusing to allow|refusing to update checked out branch|"
    r"authentication failed|could not read (username|password)|permission denied|repository not found|"
    r"does not appear to be a git repository|requested url returned error: 40[134]",
    re.IGNORECASE)
_URL_OR_PATH = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://\S*|'[^'\s]*'|`[^`]*`|(?<![\w.])[~.]?/[^\s:'`]*")


@dataclass(frozen=True)
class Remote:
    """A remote split into what may be shown (``url``) and what may not (``username``/``token``)."""

    url: str                   # credential-free: this is what the clone's config and every message see
    username: str | None
    token: str | None
    local_path: Path | None    # set when the remote is a directory on this machine

    @property
    def is_http(self) -> bool:
        return self.url.lower().startswith(("https://", "http://"))

    def environment(self) -> dict[str, str]:
        """What every git command of the loop runs with, on top of the process's environment (GitPython adds
        ``LC_ALL=C``: rejection messages are parsed)."""
        env = {
            # git and git-lfs need none of fleet's credentials but the header below (not the store's, the instance's,
            # the broker's, nor the token's file): GitPython can only add to the process's environment: blanked
            **{name: "" for name in (*ATTEMPT_SECRETS, "FLEET_CELERY_BROKER")},
            "GIT_TERMINAL_PROMPT": "0",
            "GCM_INTERACTIVE": "never",
            "GIT_LFS_SKIP_SMUDGE": "1",   # a checkout never downloads LFS content we are about to replace
            "GIT_LFS_SKIP_PUSH": "0",     # the pre-push upload is never skipped behind our back
        }
        if self.token and self.is_http:
            # The token travels as a header scoped to the remote's host, through the environment: it is in
            # neither the URL (which git would echo and store in .git/config) nor argv (visible in ps).
            parts = urlsplit(self.url)
            n = config.git_config_count()
            env["GIT_CONFIG_COUNT"] = str(n + 1)
            env[f"GIT_CONFIG_KEY_{n}"] = f"http.{parts.scheme}://{parts.netloc}/.extraHeader"
            env[f"GIT_CONFIG_VALUE_{n}"] = f"Authorization: Basic {basic_credentials(self)}"
        return env

    def command(self, cwd: Path | None = None) -> git.Git:
        """GitPython's runner for the commands that need no working clone (ls-remote, clone, init)."""
        runner = git.Git(cwd)
        runner.update_environment(**self.environment())
        return runner


def parse_remote(remote: str, token: str | None = None) -> Remote:
    """Strip ``user:secret@`` from an http(s) URL; the secret (or ``token``) is injected per command instead."""
    if remote.startswith("file://"):
        return Remote(remote, None, token, Path(unquote(urlsplit(remote).path)))
    if "://" not in remote:
        # scp-like ssh ("git@host:org/repo.git") has a colon before any slash; everything else is a path.
        head = remote.split("/", 1)[0]
        if ":" in head and not remote.startswith((".", "/")):
            return Remote(remote, None, token, None)
        # git itself expands neither ``~`` nor a path relative to the process's directory once it runs in the
        # clone: it gets the absolute path.
        path = Path(remote).expanduser().resolve()
        return Remote(str(path), None, token, path)
    parts = urlsplit(remote)
    if parts.scheme.lower() not in ("http", "https"):
        return Remote(remote, None, token, None)
    userinfo, at, hostinfo = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon else None
    clean = urlunsplit((parts.scheme, hostinfo, parts.path, parts.query, parts.fragment))
    return Remote(clean, username, token or password, None)


def basic_credentials(remote: Remote) -> str:
    user = remote.username or "x-access-token"
    return base64.b64encode(f"{user}:{remote.token}".encode()).decode()


class Redactor:
    """Removes a remote's secrets (raw, percent-encoded, or inside a Basic header) from any text."""

    def __init__(self, secrets: list[str]):
        self._secrets = sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True)

    @classmethod
    def for_remote(cls, raw_remote: str, remote: Remote) -> "Redactor":
        secrets: list[str] = []
        if remote.token:
            secrets += [remote.token, quote(remote.token, safe=""), basic_credentials(remote)]
        parts = urlsplit(raw_remote) if "://" in raw_remote else None
        if parts and "@" in parts.netloc:
            userinfo = parts.netloc.rpartition("@")[0]
            pw = userinfo.partition(":")[2]
            secrets += [userinfo, pw, unquote(pw)]
        return cls(secrets)

    def __call__(self, text: object) -> str:
        out = str(text)
        for secret in self._secrets:
            out = out.replace(secret, "***")
        return _AUTH_HEADER.sub(r"\1***", without_credentials(out))


class Say:
    """The loop's log lines and errors, redacted."""

    def __init__(self, redact: Redactor, log=None):
        self.redact = redact
        self.log = log

    def info(self, msg: str, *args) -> None:
        if self.log is not None:
            self.log.info(self.redact(msg % args if args else msg))

    def warn(self, msg: str, *args) -> None:
        if self.log is not None:
            self.log.warning(self.redact(msg % args if args else msg))

    def fail(self, msg: str) -> CommitError:
        return CommitError(self.redact(msg))


def failure(e: git.CommandError) -> str:
    """One line for a failed git command: the command, its exit status and what it said."""
    said = " ".join(f"{e.stderr} {e.stdout}".split()) or "no output"
    return f"`{' '.join(map(str, e.command))}` exited {e.status}: {said}"


def permanent(text: str, *known: str) -> bool:
    """Whether git's ``text`` says retrying cannot help, with URLs, paths, quoted names and ``known`` (the
    remote's URL and path) taken out first."""
    for k in sorted(filter(None, known), key=len, reverse=True):
        text = text.replace(k, " ")
    return bool(_PERMANENT_REJECTION.search(_URL_OR_PATH.sub(" ", text)))
