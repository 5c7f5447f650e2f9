"""crash_recovery: a week in which k of n latency-bound sources have their Dagster step process SIGKILLed once,
mid-scrape, vs the same week with no crash. Both are `fleet run` on a fresh FLEET_HOME; the only difference is
FLEET_BENCH_CRASH=1. Goal: wall <= 1 + 1.2 * k/n (re-running the whole week would cost 2x).

The crashing sources resume: pages fetched before the crash are skipped (``ctx.seen``) and their rows come
from the crashed attempt's spool, so the re-execution costs about half a source."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from bench import fleet_overhead
from bench.util import PY, median, rnd, run_measured
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore

WEEK = "2026-11-16"
def write_sources(where: Path, n: int, k: int, pages: int) -> list[str]:
    # spread the crashing sources over the week rather than putting them all in the first wave
    crashing = frozenset(round(j * n / k) for j in range(k)) if k else frozenset()
    fleet_overhead.write_sources(where, n, pages, prefix="src", crashing=crashing)
    return [f"src_{i:03d}" for i in sorted(crashing)]


def run(size: str, repeats: int) -> dict:
    from fleet.demo.sites import DemoSites
    n, k, cap, pages, latency_ms = {"smoke": (2, 1, 2, 2, 100), "quick": (10, 1, 5, 6, 1000),
                                    "full": (40, 4, 10, 10, 1000)}[size]
    tmp = Path(tempfile.mkdtemp(prefix="bench-crash-"))
    fleet_bin = str(Path(PY).parent / "fleet")
    sites = DemoSites(latency_ms=latency_ms).start()
    try:
        scrapers = tmp / "scrapers"
        crashing = write_sources(scrapers, n, k, pages)
        # every source visits the one demo site: its per-domain bound (4 at once by default) is raised to the cap
        # FLEET_SANDBOX=off: the crashing source stands for a crash of fleet's own step process by killing it, which
        # a sandboxed attempt rightly cannot (as in fleet_tests/test_daemon.py); both legs run alike
        base_env = {"FLEET_SANDBOX": "off", "FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_DEMO_URL": sites.url, "FLEET_MAX_PARALLEL": str(cap),
                    "FLEET_CRASH_RERUNS": "2", "FLEET_DOMAIN_CONCURRENCY": str(cap)}
        if size == "smoke":  # its warm browser hosts leave soon after each run, rather than idle 30 s as the bench waits
            base_env["FLEET_BROWSER_HOST_IDLE_S"] = "2"
        runs: dict[str, list[dict]] = {"crash": [], "clean": []}
        for i in range(repeats):
            for kind in ("crash", "clean"):
                home = tmp / f"{kind}{i}"
                remote = tmp / f"{kind}{i}.git"
                subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(remote)], check=True)
                env = {**base_env, "FLEET_HOME": str(home), "FLEET_DATA_REMOTE": str(remote),
                       "FLEET_ARTIFACTS": str(tmp / f"{kind}{i}-artifacts"),
                       "FLEET_BENCH_CRASH": "1" if kind == "crash" else "0"}
                r = run_measured([fleet_bin, "run", "--week", WEEK, "--force"], env=env, cwd=tmp, check=False)
                store = LocalArtifactStore(env["FLEET_ARTIFACTS"])  # the store it was told to use
                outcomes = [keys.read_outcome(store, WEEK, f"src_{i:03d}") or {} for i in range(n)]
                ok = sum(o.get("status") == "ok" for o in outcomes)
                rows = sum(o.get("rows", 0) for o in outcomes)
                if r["rc"] != 0 or ok != n or rows != n * pages:
                    raise RuntimeError(f"{kind} run exited {r['rc']} with {ok}/{n} ok sources and {rows} rows:\n"
                                       f"{r['output'][-3000:]}")
                # The crash must really have happened, and been re-executed: a crashing source leaves its
                # checkpoint and two attempts' spools; every other source (and every source of a clean week) one.
                names = [f"src_{i:03d}" for i in range(n)]
                attempts = {s: len(list(store.local_dir(WEEK, keys.spool_key(s)).glob("rows-*.jsonl"))) for s in names}
                expected = {s: 2 if kind == "crash" and s in crashing else 1 for s in names}
                if attempts != expected:
                    raise RuntimeError(f"{kind} run: attempts per source {attempts}, expected {expected}")
                runs[kind].append(r)
        cw, bw = median([r["wall"] for r in runs["crash"]]), median([r["wall"] for r in runs["clean"]])
        ratio, goal = cw / bw, 1 + 1.2 * k / n
        return {"ratio": rnd(ratio), "goal": rnd(goal), "ok": ratio <= goal, "sources": n, "crashing": k,
                "crashing_sources": crashing, "cap": cap, "pages_per_source": pages, "latency_ms": latency_ms,
                "repeats": repeats, "crash_wall_s": rnd(cw), "clean_wall_s": rnd(bw),
                "crash_walls_s": [rnd(r["wall"], 1) for r in runs["crash"]],
                "clean_walls_s": [rnd(r["wall"], 1) for r in runs["clean"]],
                "crash_cpu_s": rnd(median([r["cpu"] for r in runs["crash"]])),
                "clean_cpu_s": rnd(median([r["cpu"] for r in runs["clean"]]))}
    finally:
        sites.stop()
        shutil.rmtree(tmp, ignore_errors=True)
