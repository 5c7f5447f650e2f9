"""A step takes the Dagster instance its forkserver built, instead of building its own
(fleet/defs/stepinstance.py): in a real fork against fleet's sqlite instance, then in a step of a real
`fleet run`-style forkserver."""
import json
import os
import subprocess
import sys

import pytest

from fleet_tests.conftest import ROOT

FORK_PROBE = r"""import json, os, sys
os.environ["FLEET_HOME"] = sys.argv[1]
from fleet.config import settings
from fleet.defs.instance import get_instance
instance = get_instance(settings())  # creates the databases, under fleet's lock
from dagster import DagsterInstance, DagsterRun
from fleet.defs import stepinstance
ref = instance.get_ref()
run = instance.add_run(DagsterRun(job_name="probe", run_id="0f1e2d3c-0000-4000-8000-000000000000"))
out = {"built": stepinstance.prebuild()}
built = id(stepinstance._built["instance"])
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    first = DagsterInstance.from_ref(ref)
    second = DagsterInstance.from_ref(ref)
    with first:  # the step's own use: an event stored through the copy, read back by the parent
        first.report_engine_event("written through the prebuilt copy", run)
    with second:
        pass
    os.write(w, json.dumps({"first": id(first) == built, "second": id(second) == built}).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
out["child"] = json.loads(os.read(r, 1000))
mine = DagsterInstance.from_ref(ref)
out["parent_own"] = id(mine) != built
logs = [e.message for e in instance.all_logs(run.run_id)]
out["event"] = "written through the prebuilt copy" in logs
print(json.dumps(out))
"""


def _env():
    return {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "DAGSTER_HOME"}


def test_the_first_from_ref_in_a_forked_process_takes_the_prebuilt_instance_and_it_works(tmp_path):
    """The first ``from_ref`` in a forked process returns the instance built before the fork, and what it stores
    reaches the event log; a second call there, and any call in the building process, build their own."""
    path = tmp_path / "probe.py"
    path.write_text(FORK_PROBE)
    out = subprocess.run([sys.executable, str(path), str(tmp_path / "home")], env=_env(), capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "built": True, "child": {"first": True, "second": False}, "parent_own": True, "event": True}


def test_nothing_is_prebuilt_without_an_instance_or_for_another_ref(tmp_path, monkeypatch):
    """No ``DAGSTER_HOME``, or one whose databases do not exist yet (only fleet's get_instance creates them,
    under its lock): nothing is built. A ref that is not the prebuilt one builds its own."""
    from fleet.defs import stepinstance

    monkeypatch.setattr(stepinstance, "_built", {})
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert stepinstance.prebuild() is False
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(fresh))
    assert stepinstance.prebuild() is False
    assert not (fresh / "history").exists(), "prebuild created the databases"
    monkeypatch.setattr(stepinstance, "_built", {"ref": "another ref", "instance": object(), "pid": -1})
    assert stepinstance._take("this ref") is None
    assert "instance" in stepinstance._built


STEP_PROBE = r"""import json, multiprocessing, os, sys
os.environ["FLEET_HOME"] = sys.argv[1]
def child(q, ref):
    from dagster import DagsterInstance
    from fleet.defs import stepinstance
    instance = DagsterInstance.from_ref(ref)
    q.put((stepinstance._built.get("pid") not in (None, os.getpid()), "instance" not in stepinstance._built,
           instance.get_ref() == ref))
if __name__ == '__main__':
    from fleet.config import settings
    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    ref = get_instance(settings()).get_ref()  # sets DAGSTER_HOME, as the UI's run workers have it
    if sys.argv[2] == "fleet-run":
        d.start_forkserver()  # as `fleet run` does, once its instance exists
    # else Python's own forkserver, started by the first Process, preloads fleet.defs.warm (a UI-launched run)
    ctx = multiprocessing.get_context('forkserver')
    ctx.set_forkserver_preload(list(d.FORKSERVER_PRELOAD))
    q = ctx.SimpleQueue()
    p = ctx.Process(target=child, args=(q, ref)); p.start(); p.join(60)
    print(json.dumps(q.get()), p.exitcode)
"""


@pytest.mark.parametrize("server", ["fleet-run", "python"])
def test_a_step_forked_from_a_forkserver_takes_its_prebuilt_instance(tmp_path, server):
    """`fleet run` prebuilds the instance as it forks its forkserver, and Python's forkserver as it preloads
    fleet.defs.warm (Dagster's executor in a UI-launched run); a process forked from either server (a step) takes
    it on its first ``from_ref``."""
    path = tmp_path / "step_probe.py"  # a file: forkserver children import the main module by its path
    path.write_text(STEP_PROBE)
    out = subprocess.run([sys.executable, str(path), str(tmp_path / "home"), server], env=_env(), capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[true, true, true] 0", out.stdout + out.stderr[-2000:]
