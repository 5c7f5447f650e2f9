"""The browser sandbox: when fleet runs as root, attempt processes (scraper code, Playwright's driver, Chromium) run
as an unprivileged user (``FLEET_SANDBOX_USER``, default ``nobody``) with Chromium's own sandbox on; as any other
user, Chromium's sandbox is on. Where that cannot be (no such user, the kernel allows no user namespaces, the
user cannot reach FLEET_HOME or the scrapers), they run as today and :func:`current` says why, for fleet to say
once at start. Attempt processes never get the data repository's token (FLEET_GIT_TOKEN)."""
from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from fleet import config
from fleet.engine.procs import tmp_base
from fleet.secrets import ATTEMPT_SECRETS

SETTING = "FLEET_SANDBOX_USER"
SECRETS = ATTEMPT_SECRETS       # credentials attempt processes never get (fleet/secrets.py)
FLAG = "FLEET_CHROMIUM_SANDBOX"  # set in an attempt process's environment: launch Chromium with its sandbox on


@dataclasses.dataclass(frozen=True)
class Sandbox:
    uid: int | None = None       # the user attempt processes run as (None: this process's own)
    gid: int | None = None
    user: str | None = None
    chromium_sandbox: bool = False
    off: str | None = None       # why the sandbox is off, or None

    @property
    def switches_user(self) -> bool:
        return self.uid is not None


_current: dict[tuple, Sandbox] = {}


def _as(user: dict) -> list[str]:
    """The command prefix that runs a program as ``user`` (``{"user": uid, "group": gid}``; empty: as this one):
    util-linux's ``setpriv``, which drops every supplementary group and capability before it executes it."""
    if not user:
        return []
    return ["setpriv", f"--reuid={user['user']}", f"--regid={user['group']}", "--clear-groups", "--"]


def _userns_ok(user: dict) -> bool:
    """Whether ``user`` may create the user, PID and network namespaces Chromium's sandbox needs."""
    if shutil.which("unshare") is None or (user and shutil.which("setpriv") is None):
        return False
    try:
        return subprocess.run([*_as(user), "unshare", "--user", "--pid", "--net", "--fork", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


_REACH = "import os, sys, fleet; print(' '.join(p for p in sys.argv[1:] if not os.access(p, os.R_OK | os.X_OK)))"


def _reachable(user: dict, paths: list[Path]) -> list[str]:
    """The ``paths`` the interpreter, run as ``user``, cannot read and enter (all, if it cannot import fleet)."""
    import sys

    try:
        out = subprocess.run([*_as(user), sys.executable, "-c", _REACH, *map(str, paths)], capture_output=True,
                             text=True, timeout=30, env={**config.process_env(), "HOME": "/"})
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"its Python ({exc})"]
    if out.returncode != 0:
        return [f"its Python {sys.executable} and fleet"]
    return out.stdout.split()


def current(home: Path, scraper_dirs: list[Path]) -> Sandbox:
    """How this machine's attempt processes run, decided once per process."""
    name = config.sandbox_user()
    cache_key = (name, str(home), tuple(map(str, scraper_dirs)))
    if cache_key in _current:
        return _current[cache_key]
    if os.geteuid() != 0:
        box = (Sandbox(chromium_sandbox=True) if _userns_ok({}) else
               Sandbox(off="the kernel allows no unprivileged user namespaces, which Chromium's sandbox needs"))
    elif name == "off":
        box = Sandbox(off=f"{SETTING}=off")
    else:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            entry = None
        user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []} if entry else {}
        blocked = _reachable(user, [home, *scraper_dirs]) if entry else []
        if entry is None:
            box = Sandbox(off=f"there is no user {name!r} ({SETTING}) to run attempt processes as")
        elif not _userns_ok(user):
            box = Sandbox(off=f"the kernel allows user {name} no user namespaces, which Chromium's sandbox needs")
        elif blocked:
            box = Sandbox(off=f"user {name} ({SETTING}) cannot reach {', '.join(blocked)}")
        else:
            box = Sandbox(uid=entry.pw_uid, gid=entry.pw_gid, user=name, chromium_sandbox=True)
    _current[cache_key] = box
    return box


def describe(box: Sandbox) -> str | None:
    """The one line fleet says at start when the sandbox is off, else None."""
    if box.off is None:
        return None
    return f"fleet: the browser sandbox is off ({box.off}); attempt processes and Chromium run as " \
           f"{'root with --no-sandbox' if os.geteuid() == 0 else 'this user with --no-sandbox'}"


def attempt_env(env: dict, box: Sandbox, home_dir: Path | None = None) -> dict:
    """An attempt process's environment: ``env`` without fleet's secrets, with the sandbox flag, and a HOME its
    user can write (``home_dir``) when it switches users."""
    out = {k: v for k, v in env.items() if k not in SECRETS}
    out.pop(FLAG, None)
    if box.chromium_sandbox:
        out[FLAG] = "1"
    if box.switches_user and home_dir is not None:
        out["HOME"] = str(home_dir)
    return out


def command(box: Sandbox, argv: list[str]) -> list[str]:
    """``argv`` run as the attempt processes' user (through ``setpriv``), or as it is."""
    return [*_as({"user": box.uid, "group": box.gid}), *argv] if box.switches_user else list(argv)


def hand_over(box: Sandbox, *paths: Path) -> None:
    """Give ``paths`` (and everything under them, creating missing folders) to the attempt processes' user."""
    if not box.switches_user:
        return
    for top in paths:
        top = Path(top)
        top.mkdir(parents=True, exist_ok=True)
        for p in [top, *top.rglob("*")]:
            try:
                os.chown(p, box.uid, box.gid, follow_symlinks=False)
            except FileNotFoundError:
                pass


def hand_over_files(box: Sandbox, *paths: Path) -> None:
    """Give single files or folders (not what is under them) to the attempt processes' user."""
    if box.switches_user:
        for p in paths:
            os.chown(p, box.uid, box.gid, follow_symlinks=False)


def _hand_over_once(box: Sandbox, folder: Path) -> None:
    """:func:`hand_over` a folder the processes keep using (a cache, the politeness locks), unless already theirs."""
    folder.mkdir(parents=True, exist_ok=True)
    if folder.stat().st_uid != box.uid:
        hand_over(box, folder)


def prepare(box: Sandbox, settings) -> Path | None:
    """Ready what every attempt process of ``settings`` writes besides its attempt's folders (its temporary and home
    folders, Node's compile cache, the politeness locks) for the sandbox's user; returns their HOME."""
    if not box.switches_user:
        return None
    home = settings.hosts_dir / "home"
    for folder in (home, tmp_base(settings.hosts_dir, box.uid), settings.hosts_dir.parent / "politeness",
                   *([Path(settings.node_cache)] if settings.node_cache else [])):
        _hand_over_once(box, folder)
    hand_over_files(box, settings.hosts_dir)
    return home


def for_attempt(settings, module_path: Path) -> Sandbox:
    """The sandbox of a source's attempts: ``current`` for this machine's FLEET_HOME and the source's folder."""
    return current(settings.hosts_dir.parent, [Path(module_path).parent])
