"""The daemon a fleet command uses (fleet/defs/daemon.py) and the supervisor of the one it starts
(fleet/defs/daemon_host.py), with real `dagster-daemon` processes on a throwaway home.

A command that finds no daemon starts one, and stops it after, leaving nothing; killed with -9, or its supervisor
killed with -9, the daemon goes with it, and its still-young heartbeats are not taken for a serving daemon. A
daemon fleet did not start is used, and none started. Two commands at once start one daemon, and the one that
started it keeps it up until the other is done; `fleet ui` waits for it to stop."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleet_tests.conftest import ROOT

DEADLINE_S = 180  # for what takes seconds on a quiet machine: only a hang reaches it

# A fleet command in miniature: it enters `serving`, says which daemon it uses, then does what it is told on stdin
# (ready: wait for the daemon's heartbeats; check: Daemon.check; anything else: leave), and says how it left.
CLIENT = """
import json, sys
from fleet import config
from fleet.defs import daemon
from fleet.defs.instance import get_instance

s = config.settings()
instance = get_instance(s, check=False)
with daemon.serving(s, instance, echo=lambda line: print(line, flush=True)) as d:
    print(json.dumps({"ours": d.ours, "describe": d.describe(), "pid": d.pid}), flush=True)
    for line in sys.stdin:
        if line.strip() == "ready":
            d.ready()
            print("ready", flush=True)
        elif line.strip() == "check":
            try:
                d.check()
                print("ok", flush=True)
            except Exception as exc:
                print(f"error {exc}", flush=True)
        else:
            break
print(json.dumps({"started_s": d.started_s, "stopped_s": d.stopped_s}), flush=True)
"""


class Client:
    """A CLIENT process and the lines it says."""

    def __init__(self, home, name: str):
        self.err = home.tmp / f"{name}.err"
        self.proc = subprocess.Popen([sys.executable, "-c", CLIENT], env=home.env, cwd=home.tmp, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.err, "w"))
        self._lines = queue.Queue()
        threading.Thread(target=lambda: [self._lines.put(x.rstrip("\n")) for x in self.proc.stdout],
                         daemon=True).start()

    def said(self) -> str:
        try:
            return self._lines.get(timeout=DEADLINE_S)
        except queue.Empty:
            raise AssertionError(f"the client said nothing more; its stderr: {self.err.read_text()[-3000:]}") from None

    def first(self) -> dict:
        return json.loads(self.said())

    def tell(self, word: str) -> None:
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def leave(self) -> dict:
        self.tell("exit")
        end = json.loads(self.said())
        assert self.proc.wait(timeout=DEADLINE_S) == 0, self.err.read_text()[-3000:]
        return end


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def members(pgid: int) -> list[str]:
    """The live processes of group ``pgid`` (a supervisor's), with their command lines."""
    from fleet.defs.daemon_host import group_members

    return [f"{pid} {_cmdline(pid)[:150]}" for pid in group_members(pgid)]


def dagster_processes(dagster_home: Path) -> list[str]:
    """Live `dagster-daemon` and code server (`dagster api grpc`) processes of this home (by their DAGSTER_HOME),
    and supervisors of one."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        cmd = _cmdline(int(name))
        if f"DAGSTER_HOME={dagster_home}".encode() in environ and ("dagster-daemon" in cmd or "api grpc" in cmd):
            found.append(f"{name} {cmd[:150]}")
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def until(what, describe, deadline_s: float = DEADLINE_S):
    """Poll ``what()`` until it is truthy; its value."""
    deadline = time.monotonic() + deadline_s
    while not (value := what()):
        assert time.monotonic() < deadline, describe()
        time.sleep(0.2)
    return value


def _tree(pgid: int) -> list[str]:
    """The supervisor's group once it holds the daemon and its code server."""
    def both():
        found = members(pgid)
        return found if any("dagster-daemon run" in x for x in found) and any("api grpc" in x for x in found) else None

    return until(both, lambda: f"no daemon and code server: {members(pgid)}")


@pytest.fixture
def home(fleet_env, monkeypatch):
    """fleet_env's home with its Dagster instance made, that instance (read here), and an environment for the
    clients; what a failed test leaves of its daemons is killed."""
    from dagster import DagsterInstance

    from fleet import config
    from fleet.defs.instance import ensure_home

    for name in [n for n in os.environ if n.startswith("FLEET_")]:
        monkeypatch.delenv(name)
    for name, value in fleet_env.env.items():
        if name.startswith("FLEET_"):
            monkeypatch.setenv(name, value)
    s = config.settings()
    dagster_home = ensure_home(s)  # DAGSTER_HOME, here too
    env = {**fleet_env.env, "DAGSTER_HOME": str(dagster_home)}
    with DagsterInstance.get() as instance:
        yield SimpleNamespace(s=s, env=env, tmp=fleet_env.tmp, instance=instance, dagster=dagster_home)
    for line in dagster_processes(dagster_home):
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_command_starts_a_daemon_and_stops_it_leaving_nothing_and_fleet_ui_waits_for_it(home):
    from fleet import records
    from fleet.defs import daemon

    client = Client(home, "client")
    first = client.first()
    assert first["ours"] and "a daemon this command started" in first["describe"], first
    supervisor = first["pid"]
    client.tell("ready")
    assert client.said() == "ready"
    tree = _tree(supervisor)
    assert daemon.holder(home.dagster)["pid"] == supervisor
    beat = records.daemon_heartbeats(home.instance)["SENSOR"]
    # the daemon's id is noted as fleet's, once it has beaten
    until(lambda: beat.daemon_id in {i for n in daemon._notes(home.dagster) for i in n["ids"]},
          lambda: f"{beat.daemon_id} not noted: {daemon._notes(home.dagster)}")

    # `fleet ui` started now waits for that daemon to stop before it starts its own (`dagster dev`)
    said, entered, leave = [], threading.Event(), threading.Event()

    def ui():
        with daemon.hosting(home.s, echo=said.append):
            entered.set()
            leave.wait(DEADLINE_S)

    waiting = threading.Thread(target=ui)
    waiting.start()
    try:
        until(lambda: said, lambda: "fleet ui said nothing")
        assert said == [f"fleet: waiting for the daemon another fleet command started (pid {supervisor}) to stop"]
        assert not entered.is_set()  # it cannot have the lock: the supervisor holds it until it is told to stop

        end = client.leave()
        assert not alive(supervisor)
        assert members(supervisor) == [], tree
        assert entered.wait(DEADLINE_S)
    finally:
        leave.set()
        waiting.join()
    assert daemon.holder(home.dagster) is None
    assert dagster_processes(home.dagster) == []
    print(f"\nfirst SENSOR heartbeat {end['started_s']:.2f} s after entering serving; stopped in "
          f"{end['stopped_s']:.2f} s")


def test_a_command_killed_takes_its_daemon_down_and_its_young_heartbeats_serve_nobody(home):
    from fleet import records
    from fleet.defs import daemon

    client = Client(home, "client")
    supervisor = client.first()["pid"]
    client.tell("ready")
    assert client.said() == "ready"
    tree = _tree(supervisor)
    os.kill(client.proc.pid, signal.SIGKILL)
    client.proc.wait()
    until(lambda: not alive(supervisor) and not members(supervisor), lambda: f"left running: {members(supervisor)}")
    assert daemon.holder(home.dagster) is None
    assert dagster_processes(home.dagster) == [], tree

    # its last heartbeats are still fresh, and fleet's: noted by id, or, had the command died before noting it,
    # by its lifetime (no end noted); a heartbeat fleet has no note of is another's, serving the instance
    beats = records.daemon_heartbeats(home.instance)
    assert daemon._fresh(beats) is not None
    assert daemon._foreign(home.dagster, beats) is None
    notes = daemon._notes(home.dagster)
    daemon._notes(home.dagster, lambda n: [note.update(ids=[]) for note in n])
    assert daemon._foreign(home.dagster, beats) is None
    daemon._notes(home.dagster, lambda n: n.clear())
    assert daemon._foreign(home.dagster, beats) == beats["SENSOR"].daemon_id
    daemon._notes(home.dagster, lambda n: n.extend(notes))

    # so the next command starts its own
    with daemon.serving(home.s, home.instance, echo=print) as used:
        assert used.ours, used.describe()
    assert not alive(used.pid)


def test_its_supervisor_killed_takes_the_daemon_down(home):
    from fleet.defs import daemon

    client = Client(home, "client")
    supervisor = client.first()["pid"]
    client.tell("ready")
    assert client.said() == "ready"
    tree = [int(line.split()[0]) for line in _tree(supervisor)]
    os.kill(supervisor, signal.SIGKILL)
    until(lambda: not any(alive(pid) for pid in tree), lambda: f"left running: {members(supervisor)}")
    assert dagster_processes(home.dagster) == []
    assert daemon.holder(home.dagster) is None
    client.tell("check")
    said = client.said()
    assert said.startswith("error a daemon this command started") and "exited with code -9" in said, said
    client.leave()


def test_a_daemon_fleet_did_not_start_is_used(home):
    from fleet import records
    from fleet.defs import daemon

    since = time.time()
    foreign = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
                                str(ROOT / "workspace.yaml")], env=home.env, cwd=ROOT, process_group=0,
                               stdout=open(home.tmp / "foreign.log", "w"), stderr=subprocess.STDOUT)
    try:
        until(lambda: daemon._fresh(records.daemon_heartbeats(home.instance), since),
              lambda: "the daemon never beat: " + (home.tmp / "foreign.log").read_text()[-3000:])
        with daemon.serving(home.s, home.instance, echo=print) as used:
            assert not used.ours
            assert used.describe().startswith("the daemon already serving this instance"), used.describe()
            used.check()
            assert daemon.holder(home.dagster) is None
            assert [p for p in dagster_processes(home.dagster) if "dagster-daemon run" in p] == \
                   [f"{foreign.pid} {_cmdline(foreign.pid)[:150]}"]
    finally:
        os.killpg(foreign.pid, signal.SIGTERM)
        foreign.wait()


def test_two_commands_at_once_start_one_daemon_and_it_stays_up_for_both(home):
    from fleet.defs import daemon

    a, b = Client(home, "a"), Client(home, "b")
    said = {a: a.first(), b: b.first()}
    assert sorted(x["ours"] for x in said.values()) == [False, True], said
    owner, other = (a, b) if said[a]["ours"] else (b, a)
    supervisor = said[owner]["pid"]
    assert said[other]["describe"] == f"a daemon another fleet command started (pid {supervisor})"
    _tree(supervisor)

    owner.tell("exit")
    assert owner.said() == "fleet: keeping the daemon up for another fleet command"
    other.tell("check")
    assert other.said() == "ok"
    # the owner cannot take the clients' lock while the other holds it shared: it is still there, and its daemon
    assert owner.proc.poll() is None and alive(supervisor)

    other.leave()
    json.loads(owner.said())
    assert owner.proc.wait(timeout=DEADLINE_S) == 0
    until(lambda: not alive(supervisor), lambda: "the supervisor is still up")
    assert members(supervisor) == []
    assert daemon.holder(home.dagster) is None
    assert dagster_processes(home.dagster) == []
