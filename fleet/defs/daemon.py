"""The Dagster daemon a fleet command's runs go through: the one already serving the instance, or one the command
starts for its own duration and stops after (an *ephemeral* daemon), so that an instance has one daemon at a time.

What serves, in this order:

- a daemon fleet started here, which lives while ``DAGSTER_HOME/.fleet-daemon.lock`` is held: by the supervisor of
  another command's ephemeral daemon (fleet/defs/daemon_host.py) or by `fleet ui` around `dagster dev`
  (:func:`hosting`). The holder writes who it is in the file;
- else a *foreign* daemon (`dagster-daemon run`, `dg dev`, production): the SENSOR and QUEUED_RUN_COORDINATOR
  heartbeats are younger than :data:`FRESH_S` and are not of a daemon fleet started here. A daemon that died keeps
  its last heartbeats young for up to a minute, so fleet notes in ``.fleet-daemons.json`` the daemon id each of its
  daemons heartbeats with (one id per `dagster-daemon` process, a new one each start);
- else this command starts one, through the supervisor, which holds the lock.

``.fleet-daemon-start.lock`` makes that choice one command at a time, so two commands starting together start
one daemon. Each command that uses a daemon holds ``.fleet-daemon-clients.lock`` shared; the command that started an
ephemeral daemon stops it once it can take that lock exclusively (no other command uses it) and no run of the
instance is unfinished, and holds it so until the daemon is gone: a command arriving meanwhile waits, then starts
its own. All are POSIX record locks (``lockf``): the kernel releases them however the holder ends."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

from fleet import config
from fleet.config import PROJECT_ROOT, settings
from fleet.defs.daemon_host import LOCK
from fleet.errors import FleetError

START = ".fleet-daemon-start.lock"
CLIENTS = ".fleet-daemon-clients.lock"
NOTES = ".fleet-daemons.json"
BEATS = ("SENSOR", "QUEUED_RUN_COORDINATOR")  # the daemons a week's runs need: the sensors and the run queue
# A heartbeat is fresh for 75 s: Dagster's daemons beat every 30 s; twice that, and 15 s for the clocks of two
# hosts sharing a Postgres instance (Dagster's own status check allows 1,800 s, which is far too lax here).
FRESH_S = 75.0
WAIT_S = 120.0       # the longest a daemon may take to heartbeat first (measured 5-8 s at a load of 7-14 on 2 cores)
UNNAMED_S = 150.0    # a daemon whose command died before noting its id beat within this of its start, if at all
ADVANCE_S = 40.0     # how long a daemon's heartbeat is watched for a beat (every 30 s) before it is taken for live
STALE_S = 300.0      # a daemon fleet did not start, silent this long, is gone (Dagster's own check allows 1,800 s)
CHECK_S = 5.0        # how often check() reads the heartbeats
STOPPING_S = 30.0    # the longest a supervisor that is stopping holds the lock (its grace is 20 s)
KEEP_NOTES = 20
_NOTES_LOCK = threading.Lock()
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of Dagster's log lines


def _said(fh) -> dict:
    """What the daemon lock's holder wrote in it: pid, start, kind, log, stopping (or what one that died left)."""
    fh.seek(0)
    try:
        return json.loads(fh.read() or "{}")
    except ValueError:
        return {}


def holder(home: Path) -> dict | None:
    """Who holds ``home``'s daemon lock (:func:`_said`), or None when it is free. It takes the lock for a moment:
    not while a supervisor may be starting (it would find it taken), nor in the process that holds it (closing
    another descriptor of the file releases it)."""
    with open(home / LOCK, "a+") as fh:
        try:
            fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return _said(fh)
        fcntl.lockf(fh, fcntl.LOCK_UN)
        return None


def _notes(home: Path, change=None) -> list[dict]:
    """The daemons fleet started here, newest last: ``{"start": unix time, "ids": [daemon id], "end": unix time}``
    (``end`` once it is gone, if its command saw it go); ``change`` (a function of the list) updates them."""
    with _NOTES_LOCK, open(home / NOTES, "a+") as fh:  # lockf keeps other processes out, not other threads
        fcntl.lockf(fh, fcntl.LOCK_EX)
        fh.seek(0)
        try:
            notes = json.loads(fh.read() or "[]")
        except ValueError:
            notes = []
        if change is not None:
            change(notes)
            fh.seek(0)
            fh.truncate(0)
            fh.write(json.dumps(notes[-KEEP_NOTES:]))
        return notes


def _note(home: Path, start: float, daemon_id: str | None = None, end: float | None = None) -> None:
    """Note a daemon fleet starts at ``start``; then its id, and when it was gone."""
    def change(notes):
        mine = next((n for n in notes if n["start"] == start), None)
        if mine is None:
            notes.append(mine := {"start": start, "ids": []})
        if daemon_id and daemon_id not in mine["ids"]:
            mine["ids"].append(daemon_id)
        if end is not None:
            mine["end"] = end
    _notes(home, change)


def _oldest(beats: dict) -> float | None:
    """The time of the older of the BEATS heartbeats; None while one of them has none."""
    times = [beats[t].timestamp for t in BEATS if t in beats]
    return min(times) if len(times) == len(BEATS) else None


def _fresh(beats: dict, since: float = 0.0) -> float | None:
    """The time of the older of the BEATS heartbeats, when both are younger than FRESH_S and not older than
    ``since``; else None."""
    oldest = _oldest(beats)
    return oldest if oldest is not None and oldest >= since and time.time() - oldest < FRESH_S else None


def _foreign(home: Path, beats: dict) -> str | None:
    """The daemon id of a daemon that serves the instance and that fleet did not start here, or None."""
    if _fresh(beats) is None:
        return None
    notes = _notes(home)
    ours = {i for n in notes for i in n["ids"]}
    for kind in BEATS:
        beat = beats[kind]
        # a daemon whose id was never noted (its command died first) beat, if at all, while it lived
        if beat.daemon_id in ours or any(not n["ids"] and n["start"] <= beat.timestamp
                                         <= n.get("end", n["start"] + UNNAMED_S) for n in notes):
            return None
    return beats[BEATS[0]].daemon_id


def _alive(instance, daemon_id: str | None) -> str | None:
    """``daemon_id`` once its SENSOR heartbeat is seen to advance (Dagster's daemons beat every 30 s), within
    ADVANCE_S; else None. A daemon that another home's fleet command started and stopped (on an instance several
    hosts or homes share) left heartbeats as young as a live one's, and no note here says it is gone."""
    from fleet import records

    if daemon_id is None:
        return None
    first = records.daemon_heartbeats(instance).get(BEATS[0])
    deadline = time.monotonic() + ADVANCE_S
    while time.monotonic() < deadline:
        beat = records.daemon_heartbeats(instance).get(BEATS[0])
        if beat is not None and first is not None and beat.timestamp > first.timestamp:
            return beat.daemon_id
        time.sleep(0.5)
    return None


def _tail(path: Path | None, offset: int = 0, lines: int = 3) -> str:
    """The last ``lines`` lines of the log ``path`` written after ``offset``, for a one-line error."""
    if path is None:
        return " (its output is above)"
    try:
        with open(path, errors="replace") as fh:
            fh.seek(offset)
            said = [ANSI.sub("", line).strip() for line in fh.read().splitlines() if line.strip()]
    except OSError:
        said = []
    return f"; the end of {path}: " + " / ".join(said[-lines:]) if said else f" ({path} is empty)"


def _command(verbose: bool) -> list[str]:
    """`dagster-daemon run` on fleet's workspace (or, for an installed fleet without the checkout's
    workspace.yaml, on fleet's definitions module), from this interpreter's environment."""
    workspace = PROJECT_ROOT / "workspace.yaml"
    target = ["-w", str(workspace)] if workspace.exists() else ["-m", "fleet.defs.definitions", "-a", "defs"]
    return [str(Path(sys.executable).with_name("dagster-daemon")), "run", *target,
            "--log-level", "info" if verbose else "warning"]


class Daemon:
    """The daemon a command uses. ``ours``: this command started it (and stops it on leaving :func:`serving`).
    ``started_s``: seconds from entering :func:`serving` to the daemon's first SENSOR heartbeat (ours only, once
    seen); ``stopped_s``: from asking it to stop to its supervisor's exit."""

    def __init__(self, instance, home: Path, since: float, *, proc=None, log: Path | None = None, offset: int = 0,
                 who: dict | None = None, foreign: str | None = None):
        self._instance, self._home, self._since = instance, home, since
        self._proc, self._log, self._offset, self._who, self._foreign = proc, log, offset, who, foreign
        self.ours = proc is not None
        self.pid = proc.pid if proc is not None else None  # its supervisor's
        self.started_s: float | None = None
        self.stopped_s: float | None = None
        self._seen = foreign is not None  # its heartbeats were seen fresh since `since`
        self._checked = 0.0
        self._stopping = False

    def describe(self) -> str:
        if self.ours:
            return f"a daemon this command started (pid {self.pid}, log {self._log or 'on stderr'})"
        if self._foreign:
            return f"the daemon already serving this instance (daemon id {self._foreign})"
        kind = "`fleet ui`'s daemon" if self._who.get("kind") == "ui" else "a daemon another fleet command started"
        return f"{kind} (pid {self._who.get('pid')})"

    def check(self) -> None:
        """Raise a FleetError when the daemon is gone: ours exited by itself (or never heartbeat within WAIT_S of
        its start), or another's has not heartbeaten for STALE_S."""
        from fleet import records

        if self.ours and not self._stopping and self._proc.poll() is not None:
            raise FleetError(f"{self.describe()} exited with code {self._proc.returncode}"
                             f"{_tail(self._log, self._offset)}")
        if time.monotonic() - self._checked < CHECK_S:
            return
        self._checked = time.monotonic()
        beats = records.daemon_heartbeats(self._instance)
        oldest = _oldest(beats) or 0.0
        self._seen = self._seen or oldest >= self._since
        age = time.time() - oldest
        # ours lives while its process does (a daemon thread busy for a minute on a loaded machine skips beats);
        # another's, until it has been silent for STALE_S
        if self._seen and age > STALE_S and not self.ours:
            raise FleetError(f"{self.describe()} has not heartbeaten for {age:.0f} s ({', '.join(BEATS)}): it is "
                             f"stopped or stuck{_tail(self._log, self._offset) if self.ours else ''}")
        if not self._seen and time.time() - self._since > WAIT_S:
            raise FleetError(f"{self.describe()} has not heartbeaten in the {WAIT_S:.0f} s since it started"
                             f"{_tail(self._log, self._offset) if self.ours else ''}")

    def ready(self, timeout: float = WAIT_S) -> None:
        """Return once the daemon's SENSOR and QUEUED_RUN_COORDINATOR have heartbeaten since it started serving
        this command; a FleetError (:meth:`check`) when it cannot."""
        from fleet import records

        deadline = time.monotonic() + timeout
        while _fresh(records.daemon_heartbeats(self._instance), self._since) is None:
            self.check()
            if time.monotonic() > deadline:
                raise FleetError(f"{self.describe()} has not heartbeaten in {timeout:.0f} s"
                                 f"{_tail(self._log, self._offset) if self.ours else ''}")
            time.sleep(0.25)
        self._seen = True

    def _name(self, instance) -> bool:
        """Note our daemon's id once it has heartbeaten (and ``started_s``); whether it has."""
        from fleet import records

        beat = records.daemon_heartbeats(instance).get(BEATS[0])
        if beat is None or beat.timestamp < self._since:
            return False
        if self.started_s is None:
            self.started_s = beat.timestamp - self._since  # its first heartbeat, if within 30 s of it
            _note(self._home, self._since, beat.daemon_id)
        return True

    def _naming(self, done: threading.Event) -> None:
        """A thread: :meth:`_name` on an instance of its own, until done, named, or the daemon is gone."""
        from fleet import records

        mine = records.reopen(self._instance)
        try:
            while not done.is_set() and self._proc.poll() is None:
                try:
                    if self._name(mine):
                        return
                except Exception:  # the storage busy or restarting: again; unnamed, its lifetime still marks it
                    pass
                done.wait(0.25)
        finally:
            records.close(mine)

    def _stop(self, clients, echo) -> None:
        """Once no other command uses our daemon and no run of the instance is unfinished, stop it; at once on
        KeyboardInterrupt. ``clients``: this command's handle of the clients' lock, held shared."""
        from fleet import records
        from fleet.defs.instance import POOL

        said = set()
        # its monitoring passes every FLEET_RUN_MONITOR_S; two passes and a margin, then it stops all the same
        freed_by = time.monotonic() + 2 * settings().run_monitor_s + 5
        try:
            while self._proc.poll() is None:
                try:
                    fcntl.lockf(clients, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    if "clients" not in said:
                        echo("fleet: keeping the daemon up for another fleet command")
                        said.add("clients")
                    time.sleep(0.5)
                    continue
                busy = records.run_records(self._instance, statuses=records.UNFINISHED, limit=1)
                if not busy:
                    # the scrapers pool's slots a finished run's dead steps held: our daemon's run monitoring gives
                    # them back a second after the run ended, at its next pass; stopped first, they would wait for
                    # the next daemon
                    held = records.pool_holders(self._instance, POOL) if time.monotonic() < freed_by else set()
                    if not held:
                        break
                    if "slots" not in said:
                        echo(f"fleet: keeping the daemon up until it gives back the scrapers pool's slots of "
                             f"run {sorted(held)[0]}")
                        said.add("slots")
                    fcntl.lockf(clients, fcntl.LOCK_SH)
                    time.sleep(0.5)
                    continue
                fcntl.lockf(clients, fcntl.LOCK_SH)  # a command arriving meanwhile may use it
                if "runs" not in said:
                    run = busy[0].dagster_run
                    echo(f"fleet: keeping the daemon up until run {run.run_id} ({run.status.value.lower()}) ends")
                    said.add("runs")
                time.sleep(1.0)
        finally:
            self._stopping = True
            began = time.monotonic()
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait()
            except KeyboardInterrupt:  # a second one: no grace for the daemon's runs
                self._proc.kill()
                self._proc.wait()
                raise
            self.stopped_s = time.monotonic() - began
            _note(self._home, self._since, end=time.time())


@contextlib.contextmanager
def _locked(path: Path, how: int):
    with open(path, "a+") as fh:
        fcntl.lockf(fh, how)
        yield fh


@contextlib.contextmanager
def serving(s, instance, echo=click.echo, verbose: bool = False):
    """A daemon serving ``instance`` for the duration of the block: the :class:`Daemon` used. Ours, when none
    serves: `dagster-daemon run` under fleet/defs/daemon_host.py, its output in FLEET_HOME/logs/daemon.log (on
    stderr with ``verbose``), stopped on leaving once nothing needs it. Enter it from the main thread: the
    daemon dies when the thread that started it ends. The caller calls :meth:`Daemon.check` while it waits on
    the daemon."""
    from fleet import records

    home = s.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    entered = time.time()
    with contextlib.ExitStack() as stack:
        with _locked(home / START, fcntl.LOCK_EX):
            clients = stack.enter_context(_locked(home / CLIENTS, fcntl.LOCK_SH))
            deadline = time.monotonic() + STOPPING_S
            while (who := holder(home)) is not None and who.get("stopping"):  # a daemon stopping: not to be used
                if time.monotonic() > deadline:
                    raise FleetError(f"the daemon of pid {who.get('pid')} ({home / LOCK}) has been stopping for "
                                     f"{STOPPING_S:.0f} s; wait for it to end, or kill it")
                time.sleep(0.2)
            if who is not None:
                used = Daemon(instance, home, float(who.get("start") or entered), who=who)
            elif (foreign := _alive(instance, _foreign(home, records.daemon_heartbeats(instance)))) is not None:
                used = Daemon(instance, home, entered, foreign=foreign)
            else:
                used = _start(s, instance, home, entered, verbose)
        if used.ours:
            done = threading.Event()
            namer = threading.Thread(target=used._naming, args=(done,), name="fleet-daemon-id", daemon=True)
            namer.start()
            try:
                yield used
            finally:
                done.set()
                namer.join(timeout=5)
                if used.started_s is None and used._proc.poll() is None:  # left before the thread saw it beat
                    with contextlib.suppress(Exception):  # as in Daemon._naming
                        used._name(instance)
                used._stop(clients, echo)
        else:
            if not used._seen:
                used.ready()
            yield used


def _start(s, instance, home: Path, entered: float, verbose: bool) -> Daemon:
    """Start our daemon's supervisor; return once it holds the daemon lock."""
    log = None if verbose else s.home / "logs" / "daemon.log"
    offset = 0
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        offset = log.stat().st_size if log.exists() else 0
    _note(home, entered)  # before it can heartbeat: its beats are fleet's even if this command dies unnoted
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet.defs.daemon_host", "--parent", str(os.getpid()), "--home", str(home),
         "--log", str(log or "-"), "--", *_command(verbose)],
        cwd=PROJECT_ROOT, env=config.process_env(DAGSTER_HOME=str(home)), stdin=subprocess.DEVNULL,
        stdout=2 if verbose else subprocess.DEVNULL, process_group=0)
    used = Daemon(instance, home, entered, proc=proc, log=log, offset=offset)
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            with open(home / LOCK, "a+") as fh:  # read, not locked: the supervisor is taking it
                if _said(fh).get("pid") == proc.pid:
                    break
            used.check()  # exited: says why
            if time.monotonic() > deadline:
                raise FleetError(f"the daemon's supervisor (pid {proc.pid}) did not take {home / LOCK} in "
                                 f"{WAIT_S:.0f} s{_tail(log, offset)}")
            time.sleep(0.05)
    except BaseException:  # not left running for the rest of this process
        proc.kill()
        proc.wait()
        raise
    return used


def _naming(home: Path, since: float, done: threading.Event) -> None:
    """A thread of `fleet ui`: note the id of `dagster dev`'s daemon once it heartbeats."""
    from dagster import DagsterInstance

    from fleet import records

    with DagsterInstance.get() as instance:
        while not done.wait(0.5):
            try:
                beat = records.daemon_heartbeats(instance).get(BEATS[0])
            except Exception:  # as in Daemon._naming
                continue
            if beat is not None and beat.timestamp >= since:
                _note(home, since, beat.daemon_id)
                return


@contextlib.contextmanager
def hosting(s, echo=click.echo):
    """`fleet ui`'s part: hold the daemon lock while `dagster dev` (whose daemon serves the instance) runs, so a
    fleet command uses that daemon and starts none. An ephemeral daemon up now is waited for (one line says so);
    another `fleet ui` is refused."""
    home = s.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOCK, "a+") as fh:
        with _locked(home / START, fcntl.LOCK_EX):
            try:
                fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                who = _said(fh)
                if who.get("kind") == "ui":
                    raise FleetError(f"`fleet ui` (pid {who.get('pid')}) already runs this instance's daemon; "
                                     "not starting a second: use its UI, or stop it") from None
                echo(f"fleet: waiting for the daemon another fleet command started (pid {who.get('pid')}) to stop")
                fcntl.lockf(fh, fcntl.LOCK_EX)
            start = time.time()
            fh.seek(0)
            fh.truncate(0)
            fh.write(json.dumps({"pid": os.getpid(), "start": start, "kind": "ui"}))
            fh.flush()
            _note(home, start)
        done = threading.Event()
        namer = threading.Thread(target=_naming, args=(home, start, done), name="fleet-daemon-id", daemon=True)
        namer.start()
        try:
            yield
        finally:
            done.set()
            namer.join(timeout=5)
            _note(home, start, end=time.time())  # `dagster dev` has stopped: its daemon with it
            fh.truncate(0)  # while still held
