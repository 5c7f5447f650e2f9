"""trace_cost: what recording each attempt's Playwright trace (FLEET_TRACE, fleet/engine/evidence.py) costs a
healthy week: the same latency-bound sources through `fleet run`, with the trace off and at its default
(``failed``: recorded, written for the quality gate, dropped when the rows pass), interleaved in one invocation so
both legs see the same machine. Goal: the default costs at most 5% more wall than off."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.fleet_overhead import WEEK, write_sources
from bench.util import PY, median, rnd, run_measured
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore

GOAL = 1.05
LEGS = ("off", "failed")


def run(size: str, repeats: int) -> dict:
    from fleet.demo.sites import DemoSites

    n, cap, pages, latency_ms = {"smoke": (2, 2, 1, 100), "quick": (8, 4, 10, 1000), "full": (20, 10, 10, 1000)}[size]
    tmp = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    fleet_bin = str(Path(PY).parent / "fleet")
    sites = DemoSites(latency_ms=latency_ms).start()
    try:
        scrapers = tmp / "scrapers"
        write_sources(scrapers, n, pages)
        base_env = {"FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_DEMO_URL": sites.url, "FLEET_MAX_PARALLEL": str(cap),
                    "FLEET_DOMAIN_CONCURRENCY": str(cap)}
        if size == "smoke":  # its warm browser hosts leave soon after each run, rather than idle 30 s as the bench waits
            base_env["FLEET_BROWSER_HOST_IDLE_S"] = "2"
        runs: dict[str, list] = {leg: [] for leg in LEGS}
        for i in range(repeats):
            for leg in LEGS if i % 2 == 0 else LEGS[::-1]:  # alternate which leg goes first
                home, remote = tmp / f"{leg}-home{i}", tmp / f"{leg}-remote{i}.git"
                subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(remote)], check=True)
                env = {**base_env, "FLEET_HOME": str(home), "FLEET_DATA_REMOTE": str(remote), "FLEET_TRACE": leg}
                r = run_measured([fleet_bin, "run", "--week", WEEK, "--force"], env=env, cwd=tmp, check=False)
                store = LocalArtifactStore(home / "artifacts")
                outs = [keys.read_outcome(store, WEEK, f"lat_{j:03d}") or {} for j in range(n)]
                ok = sum(o.get("status") == "ok" for o in outs)
                if r["rc"] != 0 or ok != n:
                    raise RuntimeError(f"fleet run (FLEET_TRACE={leg}) exited {r['rc']} with {ok}/{n} ok:\n"
                                       f"{r['output'][-3000:]}")
                kept = [p for p in (home / "artifacts").rglob("*.zip")]
                if kept:  # a healthy week keeps no trace, whatever it recorded
                    raise RuntimeError(f"FLEET_TRACE={leg}: a healthy week kept traces: {kept[:3]}")
                r["source_seconds"] = median([o.get("seconds", 0) for o in outs])
                runs[leg].append(r)
        off, on = (median([r["wall"] for r in runs[leg]]) for leg in LEGS)
        ratio = on / off
        return {"ratio": rnd(ratio), "goal": GOAL, "ok": ratio <= GOAL, "sources": n, "cap": cap,
                "pages_per_source": pages, "latency_ms": latency_ms, "repeats": repeats,
                "off_wall_s": rnd(off), "traced_wall_s": rnd(on),
                "off_walls_s": [rnd(r["wall"], 1) for r in runs["off"]],
                "traced_walls_s": [rnd(r["wall"], 1) for r in runs["failed"]],
                "off_cpu_s": rnd(median([r["cpu"] for r in runs["off"]])),
                "traced_cpu_s": rnd(median([r["cpu"] for r in runs["failed"]])),
                "off_median_source_s": rnd(median([r["source_seconds"] for r in runs["off"]])),
                "traced_median_source_s": rnd(median([r["source_seconds"] for r in runs["failed"]]))}
    finally:
        sites.stop()
        shutil.rmtree(tmp, ignore_errors=True)
