"""scale_out: latency-bound demo sources on one Celery worker, then on two (a cap of 10 each), on this machine.

Each source fetches PAGES pages of a demo site that answers after LATENCY_MS: its time is network wait, not CPU
(100 s a source, as a multi-page scraper of a slow site spends; each page is one navigation, so the CPU is a
browser context's start and twenty page loads). Beyond the floor a run pays, once, about one cold start per slot
(a warm worker and its Chromium, several seconds when twenty start at once on two cores), and, each time a step
ends, the hand-off of its slot to the next (see N_SOURCES): the breakdown reports both.
The floor of a configuration is the total network wait divided by its slots (10 per worker), the wait summed
from what the sites served (each request's time in the server). The wall is the
scrape run's, from its start to its end as the Dagster instance records them (the publish run that follows is
the same in both). Both configurations run on the same Postgres, Redis and demo sites, in one invocation.
CPU is the machine's busy CPU-seconds over each run (/proc/stat), everything included; memory is the machine's
peak use above where the run started (/proc/meminfo), also everything included, over the slots."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dataclasses import dataclass

from bench.util import PY, ROOT, environ as _environ, rnd

# 40 sources of 20 pages (100 s of waits each): 4 rounds of a slot on one worker, 2 on two. What a run pays
# beyond the waits is mostly fixed (a cold start per slot, the run's start and end) plus a hand-off per round
# (Dagster re-checks a step blocked on the scrapers pool with a back-off of up to 15 s), so the ratio depends on
# how long a source is: SCALE_OUT_SOURCES and SCALE_OUT_PAGES choose another shape (BENCHMARKS.md has three).
N_SOURCES = int(os.environ.get("SCALE_OUT_SOURCES", "40"))
PAGES = int(os.environ.get("SCALE_OUT_PAGES", "20"))
LATENCY_MS = 5000
CAP = 10
# the scrapers pool's limit per worker: the cap, as fleet is configured, or more to measure the hand-off away
# (steps beyond a worker's --concurrency then wait in Redis, where a freed worker takes one at once)
POOL_PER_WORKER = int(os.environ.get("SCALE_OUT_POOL_PER_WORKER", CAP))


@dataclass(frozen=True)
class Shape:
    sources: int = N_SOURCES
    pages: int = PAGES
    latency_ms: int = LATENCY_MS
    cap: int = CAP
    pool_per_worker: int = POOL_PER_WORKER


# the smallest run of the same bench (fleet_tests/test_bench.py): two sources of one page, a slot per worker
SMOKE = Shape(sources=2, pages=1, latency_ms=300, cap=1, pool_per_worker=1)
GOAL = 1.2
SPEEDUP_GOAL = 1.7

TEMPLATE = '''import polars as pl

from fleet import Scraper
from fleet.demo import site_url


class Latency{i:02d}(Scraper):
    """Latency-bound bench source {i}: {pages} pages of a site that answers slowly."""

    name = "lat_{i:02d}"
    schema = {{"page": pl.Int64, "title": pl.Utf8}}
    key = ("page",)
    timeout_s = 600

    async def scrape(self, page, ctx):
        for p in range({pages}):
            await ctx.goto(page, site_url(f"/books?week={{ctx.week.isoformat()}}&src={i}&p={{p}}"), timeout_ms=120_000)
            yield {{"page": p, "title": await page.title()}}
'''


def busy_cpu_s() -> float:
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def mem_available_mb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


class MemoryPeak:
    """The most memory the machine used above where it started, sampled every 0.5 s (MemAvailable)."""

    def __init__(self):
        import threading

        self.base, self.low = mem_available_mb(), mem_available_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.wait(0.5):
            self.low = min(self.low, mem_available_mb())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def used_mb(self) -> float:
        return self.base - self.low


def _worker(env: dict, home: Path, name: str, cap: int) -> subprocess.Popen:
    log = home / "worker.log"
    proc = subprocess.Popen([PY, "-m", "fleet.cli", "worker", "--concurrency", str(cap), "--name", f"{name}@bench"],
                            env={**env, "FLEET_HOME": str(home)}, cwd=home, stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while " ready." not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker {name} did not start: {log.read_text()[-2000:]}")
        time.sleep(0.3)
    return proc


def _stop(proc: subprocess.Popen, home: Path) -> None:
    from fleet.engine import pool

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    pool.stop(home / "browser-hosts")


def one(tmp: Path, env: dict, workers: int, week: str, sites, shape: Shape) -> dict:
    from dagster import DagsterInstance, RunsFilter

    homes = [tmp / f"w{workers}-{i}" for i in range(workers)]
    orchestrator = tmp / f"o{workers}"
    for h in (*homes, orchestrator):
        h.mkdir()
    # each configuration its own database: the scrapers pool's limit (10 x workers) lives in the instance
    import psycopg2

    conn = psycopg2.connect(env["FLEET_POSTGRES_URL"])
    conn.autocommit = True
    conn.cursor().execute(f"CREATE DATABASE fleet{workers}")
    conn.close()
    env = {**env, "FLEET_POSTGRES_URL": env["FLEET_POSTGRES_URL"].rsplit("/", 1)[0] + f"/fleet{workers}",
           "FLEET_MAX_PARALLEL": str(shape.pool_per_worker * workers),
           # every bench source visits the one demo site, and the per-domain bounds are shared by all hosts (4
           # at once by default): they would be the cap measured, not the slots
           "FLEET_DOMAIN_CONCURRENCY": str(shape.cap * workers)}
    procs = [_worker(env, h, f"w{workers}-{i}", shape.cap) for i, h in enumerate(homes)]
    try:
        oenv = {**env, "FLEET_HOME": str(orchestrator)}
        served = len(sites.requests)
        cpu0, t0 = busy_cpu_s(), time.monotonic()
        with MemoryPeak() as mem:
            done = subprocess.run([PY, "-m", "fleet.cli", "run", "--week", week, "--force"], env=oenv,
                                  cwd=orchestrator, capture_output=True, text=True, timeout=1800)
        total, cpu = time.monotonic() - t0, busy_cpu_s() - cpu0
        if done.returncode != 0:
            raise RuntimeError(f"fleet run on {workers} worker(s) exited {done.returncode}: "
                               f"{done.stdout[-1500:]}{done.stderr[-1500:]}")
        # the instance's dagster.yaml reads its Postgres from the environment: set only while it is read here
        with _environ(FLEET_POSTGRES_URL=env["FLEET_POSTGRES_URL"]):
            instance = DagsterInstance.from_config(str(orchestrator / "dagster"))
            scrape = [r for r in instance.get_run_records(RunsFilter(tags={"dagster/partition": week}))
                      if r.dagster_run.tags.get("fleet/kind") == "scrape"][0]
            wall = scrape.end_time - scrape.start_time
            breakdown = where_time_went(instance, scrape,
                                        shape.cap * workers if shape.pool_per_worker == shape.cap else None,
                                        shape.pages * shape.latency_ms / 1000)
    finally:
        for p, h in zip(procs, homes):
            _stop(p, h)
    # the floor from what the sites served: every request waited LATENCY_MS (a page's own requests, a favicon)
    waits = sum(end - start for _path, start, end in sites.requests[served:])
    requests = len(sites.requests) - served
    floor = waits / (shape.cap * workers)
    return {"wall_s": rnd(wall, 1), "floor_s": rnd(floor, 1), "requests": requests,
            "planned_floor_s": rnd(shape.sources * shape.pages * shape.latency_ms / 1000 / (shape.cap * workers), 1),
            "ratio": rnd(wall / floor), "fleet_run_s": rnd(total, 1),
            "machine_cpu_s": rnd(cpu, 1), "cores_busy": rnd(cpu / total, 2),
            "cpu_per_source_s": rnd(cpu / shape.sources, 2), "memory_peak_mb": rnd(mem.used_mb, 0),
            "memory_per_slot_mb": rnd(mem.used_mb / (shape.cap * workers), 0), "breakdown": breakdown}


def where_time_went(instance, record, slots: int | None, waits_s: float) -> dict:
    """The scrape run's time beyond its sources' network waits, from its event log: before the first step
    started; from a step's submission to the queue to its start on a worker; a step's own time beyond its
    pages' waits (the browser context, writing the rows); from a step's end to the submission of the step that
    took its slot; after the last step ended."""
    from dagster import DagsterEventType

    submitted, started, ended = {}, {}, {}
    for ev in instance.get_records_for_run(record.dagster_run.run_id, limit=100000).records:
        e = ev.event_log_entry
        d = e.dagster_event
        if d is None or not (d.step_key or "").startswith("raw__"):
            continue
        if d.event_type == DagsterEventType.ENGINE_EVENT and "Submitting celery task" in (e.user_message or ""):
            submitted.setdefault(d.step_key, e.timestamp)
        elif d.event_type == DagsterEventType.STEP_START:
            started[d.step_key] = e.timestamp
        elif d.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
            ended[d.step_key] = e.timestamp
    own = [ended[k] - started[k] - waits_s for k in ended if k in started]
    # a slot's hand-off: the n-th submission beyond the slots waited for the (n - slots)-th step to end (only
    # while the pool is the one limit: ``slots`` is None when steps also wait in Redis)
    subs, ends = sorted(submitted.values()), sorted(ended.values())
    handoff = [subs[i] - ends[i - slots] for i in range(slots, len(subs)) if i - slots < len(ends)] if slots else []
    queued = [started[k] - submitted[k] for k in started if k in submitted]
    median = lambda xs: rnd(sorted(xs)[len(xs) // 2], 1) if xs else None  # noqa: E731
    return {"before_first_step_s": rnd(min(started.values()) - record.start_time, 1) if started else None,
            "submit_to_start_median_s": median(queued), "submit_to_start_max_s": rnd(max(queued), 1) if queued else None,
            "step_beyond_waits_median_s": median(own), "step_beyond_waits_max_s": rnd(max(own), 1) if own else None,
            "slot_handoff_median_s": median(handoff), "slot_handoff_max_s": rnd(max(handoff), 1) if handoff else None,
            "after_last_step_s": rnd(record.end_time - max(ended.values()), 1) if ended else None}


def run(size: str, repeats: int) -> dict:  # one size (SCALE_OUT_* choose another); smoke: the smallest
    from fleet.demo.sites import DemoSites
    from fleet_tests.gitremote import make_remote
    from fleet_tests.services import Postgres, Redis

    shape = SMOKE if size == "smoke" else Shape()
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        sources = tmp / "sources"
        sources.mkdir()
        for i in range(shape.sources):
            (sources / f"lat_{i:02d}.py").write_text(TEMPLATE.format(i=i, pages=shape.pages))
        with Postgres() as pg, Redis(tmp / "redis") as redis, DemoSites(latency_ms=shape.latency_ms) as sites:
            remote = make_remote(tmp)
            env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "DAGSTER_HOME"}
            env.update(PYTHONPATH=str(ROOT), FLEET_START_WEEK="2026-01-05", FLEET_EXECUTOR="celery",
                       FLEET_CELERY_BROKER=redis.url, FLEET_POSTGRES_URL=pg.url, FLEET_DEMO_URL=sites.url,
                       FLEET_SCRAPERS_DIR=str(sources), FLEET_DATA_REMOTE=str(remote),
                       FLEET_ARTIFACTS=str(tmp / "artifacts"), FLEET_BROWSER_HOST_IDLE_S="10")
            one_w = one(tmp, env, 1, "2026-10-05", sites, shape)
            two_w = one(tmp, env, 2, "2026-10-12", sites, shape)
        speedup = one_w["wall_s"] / two_w["wall_s"]
        return {"ratio": two_w["ratio"], "speedup": rnd(speedup, 2), "goal": GOAL, "speedup_goal": SPEEDUP_GOAL,
                "ok": one_w["ratio"] <= GOAL and two_w["ratio"] <= GOAL and speedup >= SPEEDUP_GOAL,
                "one_worker": one_w, "two_workers": two_w, "sources": shape.sources, "pages": shape.pages,
                "latency_ms": shape.latency_ms, "cap_per_worker": shape.cap, "pool_per_worker": shape.pool_per_worker}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
