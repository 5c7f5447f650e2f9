"""The browser sandbox: when fleet runs as root, attempt processes (scraper code, Playwright's driver, Chromium) run
as an unprivileged user (``FLEET_SANDBOX_USER``, default ``nobody``) with Chromium's own sandbox on; as any other
user, Chromium's sandbox is on. It fails closed: where it cannot be had (no such user, the kernel allows no user
namespaces), :func:`for_attempt` refuses (a ``SandboxRefused``, one line naming why and the fix) and no page is
opened, unless the operator set ``FLEET_SANDBOX=off``, which fleet says at start and tags the run with.

When the folders a sandboxed process needs (FLEET_HOME, the scrapers, the interpreter and fleet's code, Chromium)
lie under a folder its user cannot enter (a checkout under /root, FLEET_HOME under a 0700 ``mktemp -d``), fleet
changes no mode of the operator's: the process starts in a mount namespace of its own where an empty tmpfs covers
that folder and only the needed folders are put back, read-only but for FLEET_HOME (fleet/engine/jail.py). Only
FLEET_HOME itself, fleet's own folder, is given traverse (o+x) when it lacks it. Attempt processes never get the
data repository's token (FLEET_GIT_TOKEN)."""
from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from fleet import config
from fleet.errors import FleetError
from fleet.engine.procs import tmp_base
from fleet.secrets import ATTEMPT_SECRETS

SETTING = "FLEET_SANDBOX_USER"
SWITCH = "FLEET_SANDBOX"         # "off": the operator turned the sandbox off
TAG = "fleet/sandbox"            # the run tag that records it
SECRETS = ATTEMPT_SECRETS       # credentials attempt processes never get (fleet/secrets.py)
FLAG = "FLEET_CHROMIUM_SANDBOX"  # set in an attempt process's environment: launch Chromium with its sandbox on
JAIL = Path(__file__).with_name("jail.py")
OFF_FIX = f"or set {SWITCH}=off to scrape without the sandbox"
# Where user namespaces are missing, the usual reason is a container: Docker's and Kubernetes' default seccomp
# profiles forbid creating them. There the container can be the sandbox instead, and FLEET_SANDBOX=off says so.
NO_USERNS_FIX = (f"allow them (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone; in a container, a "
                 f"seccomp profile that permits them), or, where the container itself is the sandbox (an unprivileged "
                 f"user, no capabilities, nothing of the host's mounted but fleet's volumes), set {SWITCH}=off to "
                 f"scrape without Chromium's own sandbox")


class SandboxRefused(FleetError):
    """The sandbox cannot be had here and FLEET_SANDBOX=off was not set: fleet opens no page."""


@dataclasses.dataclass(frozen=True)
class Sandbox:
    uid: int | None = None       # the user attempt processes run as (None: this process's own)
    gid: int | None = None
    user: str | None = None
    chromium_sandbox: bool = False
    off: str | None = None       # why the sandbox is off (the operator's FLEET_SANDBOX=off), or None
    refused: str | None = None   # why the sandbox cannot be had, and the fix: nothing may be scraped
    plan: str = ""               # the jail's plan (fleet/engine/jail.py) as JSON; "" when none is needed

    @property
    def switches_user(self) -> bool:
        return self.uid is not None


_current: dict[tuple, Sandbox] = {}


def _as(user: dict, plan: str = "") -> list[str]:
    """The command prefix that runs a program as ``user`` (``{"user": uid, "group": gid}``; empty: as this one):
    util-linux's ``setpriv``, which drops every supplementary group and capability before it executes it; in the
    jail of ``plan`` first, if any."""
    if not user:
        return []
    jail = [sys.executable, "-I", "-S", str(JAIL), plan, "--"] if plan else []
    return [*jail, "setpriv", f"--reuid={user['user']}", f"--regid={user['group']}", "--clear-groups", "--"]


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


def _reachable(user: dict, paths: list[Path], plan: str = "") -> list[str]:
    """The ``paths`` the interpreter, run as ``user`` (in the jail of ``plan``), cannot read and enter (all, if it
    cannot import fleet)."""
    try:
        out = subprocess.run([*_as(user, plan), sys.executable, "-c", _REACH, *map(str, paths)], capture_output=True,
                             text=True, timeout=30, env={**config.process_env(), "HOME": "/"})
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"its Python ({exc})"]
    if out.returncode != 0:
        return [f"its Python {sys.executable} and fleet ({(out.stderr.strip().splitlines() or ['?'])[-1]})"]
    return out.stdout.split()


def _may(path: Path, uid: int, gid: int, bits: int) -> bool:
    """Whether ``uid``/``gid`` (no other group) has the permission ``bits`` (of r=4, w=2, x=1) on ``path`` by its
    mode (ACLs may grant more: then the jail covers a folder it needed not, which costs nothing)."""
    try:
        st = path.stat()
    except OSError:
        return True  # not there: nothing to cover
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (st.st_mode >> shift) & bits == bits


def needed(home: Path, scraper_dirs: list[Path], chromium: str | None) -> list[tuple[Path, bool]]:
    """The folders a sandboxed process reads (the interpreter, fleet's code and its libraries, the scrapers,
    Chromium's folder) and writes (FLEET_HOME, and a local artifact store outside it: FLEET_ARTIFACTS), each with
    whether it writes there."""
    import fleet

    code = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent, Path(fleet.__file__).parent.parent,
            *(Path(p) for p in sys.path if p), *scraper_dirs, *([Path(chromium).parent] if chromium else [])]
    store = config.settings().artifacts
    writes = [home, *([Path(store)] if store and not store.startswith("s3://") else [])]
    return [*((p, True) for p in writes), *((p, False) for p in code)]


def make_plan(uid: int, gid: int, folders: list[tuple[Path, bool]], must: list[Path]) -> tuple[str, list[str]]:
    """The jail's plan (JSON, "" when every folder is reachable as it is) that makes ``folders`` reachable for
    ``uid``, and the folders of ``must`` it cannot help: ones the user may not read and enter themselves. Such a
    folder is left out of the view (another of ``folders`` may lie inside it: a test's 0700 folder on sys.path)."""
    groups: dict[str, dict[str, bool]] = {}
    cannot = [str(f) for f in must if Path(f).is_dir() and not _may(Path(f).resolve(), uid, gid, 5)]
    for folder, writable in folders:
        path = Path(os.path.abspath(folder)).resolve()
        if not path.is_dir() or not _may(path, uid, gid, 1 if writable else 5):
            continue
        blocked = next((a for a in reversed(path.parents) if not _may(a, uid, gid, 1)), None)
        if blocked is not None:
            binds = groups.setdefault(str(blocked), {})
            binds[str(path)] = binds.get(str(path), False) or writable
    if not groups:
        return "", cannot
    plan = []
    for blocked in sorted(groups):
        binds = sorted(groups[blocked].items(), key=lambda kv: (kv[0].count("/"), kv[0]))
        # a folder inside another put back is there already, unless it must be writable in a read-only one
        kept = [(p, w) for p, w in binds
                if not any(p.startswith(q + "/") and (w == qw or qw) for q, qw in binds if q != p)]
        plan.append([blocked, [list(b) for b in kept]])
    return json.dumps(plan), cannot


def _home_enterable(home: Path, uid: int, gid: int) -> None:
    """FLEET_HOME is fleet's own folder: give it traverse for others (o+x) when the sandbox's user lacks it."""
    if not _may(home, uid, gid, 1):
        home.chmod(stat.S_IMODE(home.stat().st_mode) | 0o001)


def current(home: Path, scraper_dirs: list[Path], chromium: str | None = None) -> Sandbox:
    """How this machine's attempt processes run, decided once per process."""
    name = config.sandbox_user()
    switch = config.sandbox_switch()
    cache_key = (name, switch, str(home), tuple(map(str, scraper_dirs)), chromium, config.settings().artifacts)
    if cache_key in _current:
        return _current[cache_key]
    if switch == "off":
        box = Sandbox(off=f"{SWITCH}=off")
    elif os.geteuid() != 0:
        box = (Sandbox(chromium_sandbox=True) if _userns_ok({}) else
               Sandbox(refused=f"the kernel allows no unprivileged user namespaces, which Chromium's sandbox needs; "
                               f"{NO_USERNS_FIX}"))
    else:
        box = _as_root(name, home, scraper_dirs, chromium)
    _current[cache_key] = box
    return box


def _as_root(name: str, home: Path, scraper_dirs: list[Path], chromium: str | None) -> Sandbox:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return Sandbox(refused=f"there is no user {name!r} ({SETTING}) to run attempt processes as; create it "
                               f"(useradd --system {name}) or name another in {SETTING}, {OFF_FIX}")
    user = {"user": entry.pw_uid, "group": entry.pw_gid}
    if entry.pw_uid == 0:
        return Sandbox(refused=f"{SETTING}={name} is root; name an unprivileged user, {OFF_FIX}")
    if not _userns_ok(user):
        return Sandbox(refused=f"the kernel allows user {name} ({SETTING}) no user namespaces, which Chromium's "
                               f"sandbox needs; {NO_USERNS_FIX}")
    folders = needed(home, scraper_dirs, chromium)
    for folder in (f for f, writes in folders if writes):  # there before the plan looks at them
        folder.mkdir(parents=True, exist_ok=True)
    _home_enterable(home, entry.pw_uid, entry.pw_gid)
    plan, cannot = make_plan(entry.pw_uid, entry.pw_gid, folders, scraper_dirs)
    blocked = cannot or _reachable(user, [home, *scraper_dirs], plan)
    if blocked:
        return Sandbox(refused=f"user {name} ({SETTING}) cannot read {', '.join(blocked)}, even in the view fleet "
                               f"makes for it; make them readable for it (chmod o+rX), {OFF_FIX}")
    return Sandbox(uid=entry.pw_uid, gid=entry.pw_gid, user=name, chromium_sandbox=True, plan=plan)


def describe(box: Sandbox) -> str | None:
    """The one line fleet says at start when the operator turned the sandbox off, else None."""
    if box.off is None:
        return None
    return f"fleet: the browser sandbox is off ({box.off}); attempt processes and Chromium run as " \
           f"{'root with --no-sandbox' if os.geteuid() == 0 else 'this user with --no-sandbox'}"


_said: set[str] = set()


def announce(home: Path, scraper_dirs: list[Path], chromium: str | None, echo) -> Sandbox:
    """At a command's start: ``SandboxRefused`` where the sandbox cannot be had, else the sandbox, after saying
    :func:`describe`'s line (once per process, also when a backfill runs many weeks) through ``echo(line)``."""
    home.mkdir(parents=True, exist_ok=True)  # the attempts judge the sandbox with FLEET_HOME there: so does this
    box = check(current(home, scraper_dirs, chromium))
    line = describe(box)
    if line and line not in _said:
        _said.add(line)
        echo(line)
    return box


def check(box: Sandbox) -> Sandbox:
    """``box``, unless the sandbox cannot be had: then ``SandboxRefused``, the one line that says why and the fix."""
    if box.refused:
        raise SandboxRefused(f"fleet refuses to scrape: the browser sandbox cannot run: {box.refused}")
    return box


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
    """``argv`` run as the attempt processes' user (through ``setpriv``, in the jail of its plan), or as it is."""
    return [*_as({"user": box.uid, "group": box.gid}, box.plan), *argv] if box.switches_user else list(argv)


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


def popen_python(box: Sandbox, settings, args: list[str], tmp: Path | None = None, home: Path | None = None,
                 **popen) -> subprocess.Popen:
    """``python -m ARGS`` started as an attempt is (fleet/engine/attempt.py): as the sandbox's user in its view,
    without fleet's secrets, with ``tmp`` (default: the attempts' temporary folder, its user's) as its TMPDIR and
    working folder, and ``home`` (default: ``tmp``) as its HOME. ``popen``: more of ``subprocess.Popen``'s
    arguments (its pipes)."""
    if tmp is None:
        tmp = tmp_base(settings.hosts_dir, box.uid)
        tmp.mkdir(parents=True, exist_ok=True)
        if box.switches_user:
            _hand_over_once(box, tmp)
    env = {**attempt_env(config.process_env(), box, home or tmp), "TMPDIR": str(tmp)}
    return subprocess.Popen(command(box, [sys.executable, "-m", *args]), env=env, cwd=tmp, **popen)


def for_attempt(settings, module_path: Path) -> Sandbox:
    """The sandbox of a source's attempts: ``current`` for this machine's FLEET_HOME, the source's folder and its
    Chromium; ``SandboxRefused`` where it cannot be had. Every command that opens a page comes through here."""
    return check(current(settings.hosts_dir.parent, [Path(module_path).parent], settings.chromium))
