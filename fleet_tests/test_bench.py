"""The benchmarks' own measurement (bench/util.py): peak RSS is the measured command's, not the bench's."""
import json
import os
import subprocess
import sys

import pytest

from bench.__main__ import ORDER
from fleet_tests.conftest import ROOT


def test_peak_rss_is_the_commands_own_not_the_floor_of_a_big_parent():
    # The parent holds 160 MB when it starts a command that peaks at about 40 MB. ru_maxrss of that child is
    # floored at the parent's 160 MB; the sampled VmHWM is the child's own. (Kept well under 300 MB: every
    # process a test starts counts in pytest's RUSAGE_CHILDREN, which test_publish's 1 GiB test bounds.)
    code = (
        "import json\n"
        "from bench.util import run_measured\n"
        "ballast = bytearray(160 << 20)\n"
        "for i in range(0, len(ballast), 4096): ballast[i] = 1\n"
        "child = 'import time; b = bytearray(40 << 20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\ntime.sleep(1)'\n"
        "r = run_measured([__import__('sys').executable, '-c', child])\n"
        "print(json.dumps({'peak': r['peak_rss_mb'], 'ru': r['ru_maxrss_mb']}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["ru"] >= 160, r  # the floor the sampler exists for
    assert 40 <= r["peak"] < 100, r


def test_occupancy_finds_when_the_slots_were_all_busy_and_what_stayed_idle():
    from bench.timeline import occupancy

    # two slots: [0, 4) and [1, 3) overlap from 1; the second slot is idle for 1 s at the start and 1 s at the end
    used = occupancy([(0.0, 4.0), (1.0, 3.0)], cap=2)
    assert used == {"first_start": 0.0, "all_busy_at": 1.0, "all_busy_until": 3.0, "last_end": 4.0,
                    "idle_slot_seconds": 2.0}
    # back to back in one slot: never idle; with a second slot never used, it is idle all along
    assert occupancy([(0.0, 2.0), (2.0, 5.0)], cap=1)["idle_slot_seconds"] == 0.0
    assert occupancy([(0.0, 2.0), (2.0, 5.0)], cap=2)["idle_slot_seconds"] == 5.0
    assert occupancy([], cap=3)["first_start"] is None


def test_the_timeline_reads_a_real_weeks_runs_and_slots(fleet_env):
    from fleet_tests.conftest import WEEK, run_fleet

    sources = ("books", "jobs", "parts")
    res = run_fleet(fleet_env.env, "demo", "--week", WEEK, "--force", *(a for s in sources for a in ("--source", s)))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    env = {**fleet_env.env, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "bench.timeline", "--week", WEEK, "--json"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    t = json.loads(out.stdout)
    scrape, publish = t["runs"]
    assert (scrape["kind"], publish["kind"]) == ("scrape", "publish")
    assert scrape["steps"] == len(sources) and publish["created"] > scrape["created"]
    assert list(publish["step_seconds"]) == ["consolidated_raw_rows", "raw_commit", "post_processed", "processed_commit"]
    assert sorted(s["source"] for s in t["slots"]) == list(sources) and t["unfinished"] == []
    for slot in t["slots"]:  # inside its run: after the first step started, before the scrape run's last step ended
        assert scrape["first_step_start"] <= slot["start"] < slot["end"] <= scrape["last_step_end"], slot
    assert t["occupancy"]["last_end"] == max(s["end"] for s in t["slots"])
    assert t["last_worker"]["to"] == t["occupancy"]["last_end"]
    assert sum(w["sources"] for w in t["hosts"].values()) == len(sources)
    # each source step's phases, in order; no hand-off of a slot with fewer sources than the cap
    phases = t["step_phases"]
    assert list(phases) == ["launch", "boot", "slot_wait", "pre_scrape", "scrape", "post_scrape", "handoff",
                            "slot_handoff"], phases
    for name in ("launch", "boot", "slot_wait", "pre_scrape", "scrape", "post_scrape"):
        assert phases[name]["n"] == len(sources) and phases[name]["median"] >= 0, (name, phases)
    assert phases["handoff"] is None if 2 * t["cap"] >= len(sources) else phases["handoff"]["n"] > 0
    assert phases["slot_handoff"] is None if t["cap"] >= len(sources) else phases["slot_handoff"]["n"] > 0
    # the bench's summary of it, from the first run's creation or from a given moment (the command's spawn)
    from bench.timeline import summary
    s = summary(t)
    assert s["run_created_s"] == 0 and 0 < s["first_step_start_s"] <= s["first_slot_s"] < s["last_scrape_end_s"], s
    if t["cap"] > len(sources):  # never all busy
        assert s["all_slots_busy_s"] is None
    else:
        assert s["first_slot_s"] <= s["all_slots_busy_s"] <= s["last_scrape_end_s"]
    assert s["last_scrape_end_s"] == t["occupancy"]["last_end"] and s["publish_s"] > 0
    assert summary(t, since_unix=t["t0_unix"] - 2.5)["last_scrape_end_s"] == round(s["last_scrape_end_s"] + 2.5, 2)
    # the table form prints the same week
    table = subprocess.run([sys.executable, "-m", "bench.timeline", "--week", WEEK], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and f"week {WEEK}" in table.stdout and "scraping: 3 sources" in table.stdout, table


def _fake_bench(name: str, run):
    import types

    module = types.ModuleType(name)
    module.run = run
    return module


def test_what_a_bench_leaves_behind_is_put_back_before_the_next_and_fails_it(tmp_path, monkeypatch):
    # `python -m bench` runs every bench in one process: scale_out once left FLEET_POSTGRES_URL set, and the next
    # bench's FLEET_HOME got a dagster.yaml naming a Postgres that was gone. Here a bench sets it (and moves the
    # working folder, adds to sys.path); one raises after setting another; the bench after them finds neither.
    from bench import __main__ as bench_main

    monkeypatch.delenv("FLEET_POSTGRES_URL", raising=False)
    monkeypatch.delenv("FLEET_BENCH_LEAK", raising=False)
    cwd, path, seen = os.getcwd(), list(sys.path), {}

    def leaky(size, repeats):
        os.environ["FLEET_POSTGRES_URL"] = "postgresql://127.0.0.1:1/gone"
        os.chdir(tmp_path)
        sys.path.insert(0, str(tmp_path))
        return {"ratio": 1.0, "goal": 1.0, "ok": True}

    def broken(size, repeats):
        os.environ["FLEET_BENCH_LEAK"] = "1"
        raise RuntimeError("the bench broke")

    def after(size, repeats):
        seen.update(url=os.environ.get("FLEET_POSTGRES_URL"), leak=os.environ.get("FLEET_BENCH_LEAK"),
                    cwd=os.getcwd(), path=list(sys.path))
        return {"ratio": 1.0, "goal": 1.0, "ok": True}

    for name, run in (("leaky", leaky), ("broken", broken), ("after", after)):
        monkeypatch.setitem(sys.modules, f"fake_bench_{name}", _fake_bench(f"fake_bench_{name}", run))
        monkeypatch.setitem(bench_main.MODULES, name, f"fake_bench_{name}")
    out = tmp_path / "results.json"
    assert bench_main.main(["--smoke", "--only", "leaky,broken,after", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert seen == {"url": None, "leak": None, "cwd": cwd, "path": path}, seen
    assert "FLEET_POSTGRES_URL" not in os.environ and os.getcwd() == cwd and sys.path == path
    assert r["leaky"]["ok"] is False and r["leaky"]["ratio"] == 1.0, r  # its numbers are kept, and it fails
    assert r["leaky"]["error"] == (f"it left behind (put back since): FLEET_POSTGRES_URL set, working folder "
                                   f"{tmp_path}, sys.path"), r
    assert r["broken"]["error"].startswith("RuntimeError: the bench broke; it left behind"), r
    assert "FLEET_BENCH_LEAK set" in r["broken"]["error"], r
    assert r["after"]["ok"] is True and "error" not in r["after"], r


@pytest.mark.parametrize("name", ORDER)
def test_every_bench_runs_at_its_smallest_size(name, tmp_path):
    # `python -m bench --smoke`: each bench end to end, once, at its smallest size, so that a change of layout, of
    # a setting or of an API a bench uses breaks this test rather than, silently, the bench. Its numbers mean
    # nothing here (timing goals live in the bench), only that it produced them. A bench that leaves the process
    # other than it found it (an environment variable, the working folder) fails here too: its result says so.
    out = tmp_path / "results.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "DAGSTER_HOME"}
    env.update(PYTHONPATH=str(ROOT), FLEET_HOME=str(tmp_path / "home"))  # each bench sets up the rest itself
    res = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--only", name, "--out", str(out)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(out.read_text())[name]
    assert "error" not in r, r["error"]
    assert isinstance(r["ratio"], float) and r["ratio"] > 0, r
