"""fleet_overhead: latency-bound sources through `fleet run` (a Dagster step and a browser context per source,
in warm worker processes; consolidation; two commits) vs one asyncio loop, one Chromium, cap-many concurrent
pages, the same scrapers.

Also measures fleet's fixed cost per source (`fleet run` over n sources that visit no page, minus one), and
splits fleet's extra cost in two with a third leg, fleet's scraping layer without Dagster (`bench.child
runner-only`: the same sources through `run_source` in warm workers, cap-many threads, no steps, events, checks
or commits): what orchestration adds, and what isolating each source in a worker adds."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.util import PY, ROOT, median, rnd, run_measured
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore

WEEK = "2026-11-16"
TEMPLATE = '''import os
import signal

import polars as pl

from fleet import Scraper


class Src{i:03d}(Scraper):
    """Latency-bound bench source {i}: visits {pages} demo pages{crash_doc}."""

    name = "{prefix}_{i:03d}"
    schema = {{"page": pl.Int64, "title": pl.String}}
    key = ("page",)
    timeout_s = 300

    async def scrape(self, page, ctx):
        base = os.environ["FLEET_DEMO_URL"].rstrip("/")
        for j in range({pages}):
            url = f"{{base}}/?week={{ctx.week.isoformat()}}&src={i}&p={{j}}"
            if ctx.seen(url):  # fetched by an attempt that crashed; its row is in that attempt's spool
                continue
            await ctx.goto(page, url)
            yield {{"page": j, "title": await page.title()}}
            if {crashes} and j == {pages} // 2 and os.environ.get("FLEET_BENCH_CRASH") == "1" \\
                    and not ctx.checkpoint.get("crashed"):
                ctx.checkpoint["crashed"] = True
                ctx.save_checkpoint()
                os.kill(ctx.step_pid, signal.SIGKILL)  # the Dagster step process dies mid-scrape
        if {pages} == 0:  # the fixed-cost probe: one row, no page
            yield {{"page": 0, "title": "-"}}
'''


def write_sources(where: Path, n: int, pages: int, *, prefix: str = "lat", crashing: frozenset = frozenset()) -> None:
    """n latency-bound scraper modules; those in ``crashing`` SIGKILL their step once (crash_recovery)."""
    where.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        c = i in crashing
        (where / f"{prefix}_{i:03d}.py").write_text(TEMPLATE.format(
            i=i, pages=pages, prefix=prefix, crashes=c, crash_doc="; its step process is SIGKILLed once" if c else ""))


def _timeline(env: dict, started_unix: float) -> dict:
    """Where a `fleet run`'s wall went (bench/timeline.py), read from its home after it exited, in seconds from
    its spawn; not part of any measured command."""
    from bench.timeline import summary

    out = subprocess.run([PY, "-m", "bench.timeline", "--week", WEEK, "--json"], env={**os.environ, **env}, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return {"error": out.stderr[-500:]}
    return summary(json.loads(out.stdout), since_unix=started_unix)


def _child_json(r: dict) -> dict:
    return json.loads(r["output"].strip().splitlines()[-1])


def run(size: str, repeats: int) -> dict:
    from fleet.demo.sites import DemoSites
    # The shape: each source waits on the network for ~10 s in total (10 pages x 1 s).
    n, cap, pages, latency_ms = {"smoke": (2, 2, 1, 100), "quick": (8, 4, 10, 1000), "full": (40, 10, 10, 1000)}[size]
    tmp = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    fleet_bin = str(Path(PY).parent / "fleet")
    sites = DemoSites(latency_ms=latency_ms).start()
    try:
        scrapers = tmp / "scrapers"
        write_sources(scrapers, n, pages)
        # every source visits the one demo site: its per-domain bound (4 at once by default) is raised to the cap,
        # as the baseline's pages are, so the bench measures fleet's overhead rather than its politeness
        base_env = {"FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_DEMO_URL": sites.url, "FLEET_MAX_PARALLEL": str(cap),
                    "FLEET_DOMAIN_CONCURRENCY": str(cap)}
        if size == "smoke":  # its warm browser hosts leave soon after each run, rather than idle 30 s as the bench waits
            base_env["FLEET_BROWSER_HOST_IDLE_S"] = "2"
        fleet_runs, base_runs, runner_runs = [], [], []
        for i in range(repeats):
            home = tmp / f"home{i}"
            remote = tmp / f"remote{i}.git"
            subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(remote)], check=True)
            env = {**base_env, "FLEET_HOME": str(home), "FLEET_DATA_REMOTE": str(remote),
                   "FLEET_ARTIFACTS": str(tmp / f"artifacts{i}")}
            r = run_measured([fleet_bin, "run", "--week", WEEK, "--force"], env=env, cwd=tmp, check=False)
            store = LocalArtifactStore(env["FLEET_ARTIFACTS"])  # the store it was told to use
            outcomes = [keys.read_outcome(store, WEEK, f"lat_{j:03d}") or {} for j in range(n)]
            r["ok_sources"] = sum(o.get("status") == "ok" for o in outcomes)
            r["source_seconds"] = [o.get("seconds", 0) for o in outcomes]
            if r["rc"] != 0 or r["ok_sources"] != n:
                raise RuntimeError(f"fleet run exited {r['rc']} with {r['ok_sources']}/{n} ok sources:\n{r['output'][-3000:]}")
            r["timeline"] = _timeline(env, r["started_unix"])
            fleet_runs.append(r)
            b = run_measured([PY, "-m", "bench.child", "overhead-baseline", str(scrapers), WEEK, str(cap)],
                             env=base_env, cwd=ROOT)
            b.update(_child_json(b))
            if b["rows"] != n * pages:
                raise RuntimeError(f"baseline scraped {b['rows']} rows, expected {n * pages}")
            base_runs.append(b)
            o = run_measured([PY, "-m", "bench.child", "runner-only", str(scrapers), WEEK, str(cap)],
                             env={**base_env, "FLEET_HOME": str(tmp / f"runner{i}")}, cwd=ROOT)
            o.update(_child_json(o))
            if o["ok"] != n:
                raise RuntimeError(f"runner-only scraped {o['ok']}/{n} sources ok:\n{o['output'][-3000:]}")
            runner_runs.append(o)

        # Where the per-source cost goes: `fleet run` over sources that visit no page, n of them vs one, so the
        # difference is what each further source costs fleet with no scraping at all: its Dagster step, its
        # worker, its browser context, its checks and its events.
        zero = tmp / "zero"
        write_sources(zero, n, 0)
        one = tmp / "one"
        write_sources(one, 1, 0)
        fixed = {}
        for label, where in (("n", zero), ("one", one)):
            home, remote = tmp / f"zero-{label}", tmp / f"zero-{label}.git"
            subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(remote)], check=True)
            env = {**base_env, "FLEET_SCRAPERS_DIR": str(where), "FLEET_HOME": str(home), "FLEET_DATA_REMOTE": str(remote)}
            fixed[label] = run_measured([fleet_bin, "run", "--week", WEEK, "--force"], env=env, cwd=tmp, check=False)

        fw, bw = median([r["wall"] for r in fleet_runs]), median([r["wall"] for r in base_runs])
        fc, bc = median([r["cpu"] for r in fleet_runs]), median([r["cpu"] for r in base_runs])
        ow, oc = median([r["wall"] for r in runner_runs]), median([r["cpu"] for r in runner_runs])
        ratio = fw / bw
        cpu_per_source = (fc - bc) / n
        return {
            # CPU per source is reported, not a goal: in real use a source takes minutes
            "ratio": rnd(ratio), "goal": 1.15, "ok": ratio <= 1.15, "cpu_per_source_s": rnd(cpu_per_source),
            "sources": n, "cap": cap, "pages_per_source": pages, "latency_ms": latency_ms, "repeats": repeats,
            "ideal_latency_bound_s": rnd(-(-n // cap) * pages * latency_ms / 1000),
            "fleet_wall_s": rnd(fw), "baseline_wall_s": rnd(bw),
            # every repeat, in order: the machine is shared, and one slow run in a few is not rare here
            "fleet_walls_s": [rnd(r["wall"], 1) for r in fleet_runs],
            "baseline_walls_s": [rnd(r["wall"], 1) for r in base_runs],
            "runner_only_walls_s": [rnd(r["wall"], 1) for r in runner_runs],
            "fleet_cpu_s": rnd(fc), "baseline_cpu_s": rnd(bc),
            "fleet_peak_rss_mb": rnd(median([r["peak_rss_mb"] for r in fleet_runs]), 1),
            "baseline_peak_rss_mb": rnd(median([r["peak_rss_mb"] for r in base_runs]), 1),
            "fleet_median_source_seconds": rnd(median([median(r["source_seconds"]) for r in fleet_runs])),
            # each fleet run's timeline (bench/timeline.py), seconds from its spawn: when its run existed, when
            # its first and all cap slots were scraping, when its last source was done, how long each source
            # of the last worker to finish held its slot, and the publish run
            "fleet_timelines": [r["timeline"] for r in fleet_runs],
            "breakdown": {
                # `fleet run` of n sources that visit no page, minus one such source, per extra source
                "fixed_cpu_per_source_s": rnd((fixed["n"]["cpu"] - fixed["one"]["cpu"]) / max(1, n - 1)),
                "fixed_wall_per_source_s": rnd((fixed["n"]["wall"] - fixed["one"]["wall"]) / max(1, n - 1)),
                "zero_page_run_n_wall_s": rnd(fixed["n"]["wall"]), "zero_page_run_one_wall_s": rnd(fixed["one"]["wall"]),
                "baseline_cpu_per_source_s": rnd(bc / n),
                # fleet's scraping layer alone (warm workers, no Dagster), same sources and cap
                "runner_only_wall_s": rnd(ow), "runner_only_cpu_s": rnd(oc),
                "orchestration_cpu_per_source_s": rnd((fc - oc) / n),   # fleet run minus its scraping layer
                "isolation_cpu_per_source_s": rnd((oc - bc) / n),       # the scraping layer minus the baseline
            },
        }
    finally:
        sites.stop()
        shutil.rmtree(tmp, ignore_errors=True)
