"""Running the git and git-lfs CLIs for the publish loop: one environment, credentials kept out of URLs,
argv and messages, and every text that leaves this package passed through ``Redactor``.
"""
from __future__ import annotations

import base64
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")
_AUTH_HEADER = re.compile(r"(?i)(authorization:\s*\S+\s+)\S+")


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
        out = _URL_USERINFO.sub(r"\1***@", out)
        return _AUTH_HEADER.sub(r"\1***", out)


def basic_credentials(remote: Remote) -> str:
    user = remote.username or "x-access-token"
    return base64.b64encode(f"{user}:{remote.token}".encode()).decode()


class GitFailure(Exception):
    """A git command exited non-zero. ``str()`` is already redacted."""

    def __init__(self, args: list[str], returncode: int, output: str):
        self.argv = args
        self.returncode = returncode
        self.output = output
        super().__init__(f"`git {' '.join(args)}` exited {returncode}: {output.strip()}")


class Git:
    """Runs ``git`` in one working directory with the publish environment."""

    def __init__(self, remote: Remote, redact: Redactor, extra_env: dict[str, str] | None = None):
        self.remote = remote
        self.redact = redact
        self.env = self._environment(extra_env or {})

    def _environment(self, extra: dict[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        # We push LFS objects ourselves and never want the pre-push upload skipped behind our back.
        env.pop("GIT_LFS_SKIP_PUSH", None)
        env.update({
            "GIT_TERMINAL_PROMPT": "0",
            "GCM_INTERACTIVE": "never",
            "GIT_LFS_SKIP_SMUDGE": "1",   # a checkout never downloads LFS content we are about to replace
            "LC_ALL": "C",                # rejection messages are parsed, so keep them in English
            "LANGUAGE": "C",
        })
        if self.remote.token and self.remote.is_http:
            # The token travels as a header scoped to the remote's host, through the environment: it is in
            # neither the URL (which git would echo and store in .git/config) nor argv (visible in ps).
            parts = urlsplit(self.remote.url)
            scope = f"{parts.scheme}://{parts.netloc}/"
            n = int(env.get("GIT_CONFIG_COUNT") or 0)
            env["GIT_CONFIG_COUNT"] = str(n + 1)
            env[f"GIT_CONFIG_KEY_{n}"] = f"http.{scope}.extraHeader"
            env[f"GIT_CONFIG_VALUE_{n}"] = f"Authorization: Basic {basic_credentials(self.remote)}"
        env.update(extra)
        return env

    def run(self, args: list[str], cwd: Path | None, *, input: str | None = None,
            check: bool = True, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        env = self.env if not extra_env else {**self.env, **extra_env}
        proc = subprocess.run(["git", *args], cwd=cwd, env=env, input=input, text=True,
                              errors="replace", capture_output=True,
                              stdin=None if input is not None else subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise GitFailure([self.redact(a) for a in args], proc.returncode,
                             self.redact(proc.stderr + proc.stdout))
        return proc

    def out(self, args: list[str], cwd: Path | None, **kw) -> str:
        return self.run(args, cwd, **kw).stdout.strip()
