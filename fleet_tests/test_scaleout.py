"""The distributed stack through its real parts: Postgres holds the instance, Redis the queue, moto's S3 server the
artifacts, and two `fleet worker`s (Celery), each with its own FLEET_HOME and no shared folder, scrape the week.

Run alone with ``pytest -m scaleout``."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from fleet_tests.conftest import ROOT, SOURCE, committed_rows
from fleet_tests.gitremote import log, make_remote
from fleet_tests.s3server import CREDENTIALS, s3_server
from fleet_tests.services import Postgres, Redis, free_port

pytestmark = pytest.mark.scaleout

SLOW = 6          # slow sources: in flight on both workers when one is killed
SLOW_MS = 20000
CONCURRENCY = 4   # per worker; the scrapers pool is 2 x this
SLOW_SOURCE = '''import polars as pl

from fleet import Scraper


class Slow{i}(Scraper):
    """A healthy source that waits {ms} ms on its page, so that it is in flight when a worker dies."""

    name = "slow_{i}"
    schema = {{"id": pl.Int64, "week": pl.Date}}
    key = ("id",)
    timeout_s = 120

    async def scrape(self, page, ctx):
        await page.set_content("<p class=n>1</p><p class=n>2</p>")
        await page.wait_for_timeout({ms})
        for text in await page.locator("p.n").all_inner_texts():
            yield {{"id": int(text), "week": ctx.week}}
'''
DEMO = ("books", "catalog", "jobs", "parts", "shops", "stocks")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    import s3fs

    from fleet.demo.sites import DemoSites

    root = tmp_path_factory.mktemp("scaleout")
    sources = root / "sources"
    sources.mkdir()
    for i in range(SLOW):
        (sources / f"slow_{i}.py").write_text(SLOW_SOURCE.format(i=i, ms=SLOW_MS))
    (sources / "raises.py").write_text((ROOT / "fleet_tests" / "scrapers_crash" / "raises.py").read_text())
    with Postgres() as pg, Redis(root / "redis", persist=True) as redis, s3_server() as s3, DemoSites() as sites:
        bucket = f"fleet-{uuid.uuid4().hex[:10]}"
        s3fs.S3FileSystem(endpoint_url=s3, key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], skip_instance_cache=True).mkdir(bucket)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "AWS_")) and k != "DAGSTER_HOME"}
        base.update(CREDENTIALS, AWS_ENDPOINT_URL=s3, PYTHONPATH=str(ROOT), FLEET_START_WEEK="2026-01-05",
                    FLEET_EXECUTOR="celery", FLEET_CELERY_BROKER=redis.url, FLEET_POSTGRES_URL=pg.url,
                    FLEET_ARTIFACTS=f"s3://{bucket}/fleet", FLEET_DEMO_URL=sites.url, FLEET_DEMO_LATENCY_MS="20",
                    FLEET_SCRAPERS_DIR=os.pathsep.join([str(ROOT / "scrapers"), str(sources)]),
                    FLEET_MAX_PARALLEL=str(2 * CONCURRENCY), FLEET_BROWSER_HOST_IDLE_S="5",
                    FLEET_WORKER_LOST_S="10")  # the default is 30: the tests need not wait it out
        yield SimpleNamespace(root=root, pg=pg, redis=redis, s3=s3, bucket=bucket, base=base, sites=sites)


class Host:
    """One machine: its own FLEET_HOME, nothing else local shared with another."""

    def __init__(self, stack, name: str, **extra: str):
        self.name = name
        self.home = stack.root / name
        self.home.mkdir(exist_ok=True)
        self.env = {**stack.base, "FLEET_HOME": str(self.home), **extra}
        self.worker: subprocess.Popen | None = None
        self.log = self.home / "worker.log"

    def fleet(self, *args, **kw) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "fleet.cli", *args], env=self.env, cwd=self.home,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def fleet_bg(self, *args) -> "Background":
        """A `fleet` command whose output goes to files: the test waits on other things meanwhile, and a pipe
        nobody reads would fill and stop it."""
        return Background(self, args)

    def launch_worker(self) -> "Host":
        """Start its `fleet worker`; :meth:`until_ready` waits for it (two hosts' workers start side by side)."""
        self.worker = subprocess.Popen([sys.executable, "-m", "fleet.cli", "worker", "--concurrency", str(CONCURRENCY),
                                        "--name", f"{self.name}@scaleout"], env=self.env, cwd=self.home,
                                       stdout=open(self.log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def until_ready(self) -> "Host":
        deadline = time.monotonic() + 120
        while " ready." not in self.log.read_text():
            assert self.worker.poll() is None, f"worker {self.name} exited: {self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"worker {self.name} not ready: {self.log.read_text()[-3000:]}"
            time.sleep(0.5)
        return self

    def received(self) -> int:
        return self.log.read_text().count("Task execute_plan[")

    def kill(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait()

    def stop(self) -> None:
        from fleet.engine import pool

        if self.worker is not None and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGTERM)
            try:
                self.worker.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        pool.stop(self.home / "browser-hosts")


class Background:
    def __init__(self, host: Host, args):
        n = len(list(host.home.glob("cmd-*.out")))
        self.out, self.err = host.home / f"cmd-{n}.out", host.home / f"cmd-{n}.err"
        self.proc = subprocess.Popen([sys.executable, "-m", "fleet.cli", *args], env=host.env, cwd=host.home,
                                     stdout=open(self.out, "w"), stderr=open(self.err, "w"))

    def poll(self):
        return self.proc.poll()

    @property
    def returncode(self):
        return self.proc.returncode

    def communicate(self, timeout: float) -> tuple[str, str]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.proc.args[3:]} still running after {timeout} s:\n"
                                 f"{self.out.read_text()[-4000:]}\n{self.err.read_text()[-8000:]}") from None
        return self.out.read_text(), self.err.read_text()


@pytest.fixture
def hosts(stack):
    made: list[Host] = []

    def make(name: str, **extra) -> Host:
        made.append(Host(stack, name, **extra))
        return made[-1]

    yield make
    for h in made:
        h.stop()
    # what a test that failed half-way left behind must not reach the next one: its messages on the broker, its
    # unfinished runs and their claims on the scrapers pool
    import redis
    from dagster import DagsterRunStatus, RunsFilter

    redis.Redis.from_url(stack.redis.url).flushall()
    homes = [h for h in made if (h.home / "dagster" / "dagster.yaml").exists()
             and h.env["FLEET_POSTGRES_URL"] == stack.pg.url]
    if homes:
        instance = instance_of(homes[0])
        for rec in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING])):
            instance.report_run_failed(rec.dagster_run, "left unfinished by a scaleout test")
            instance.event_log_storage.free_concurrency_slots_for_run(rec.dagster_run.run_id)


def instance_of(host: Host):
    from dagster import DagsterInstance

    os.environ["FLEET_POSTGRES_URL"] = host.env["FLEET_POSTGRES_URL"]
    return DagsterInstance.from_config(str(host.home / "dagster"))


def week_events(instance, week: str):
    from dagster import DagsterEventType, RunsFilter

    runs = sorted(instance.get_run_records(RunsFilter(tags={"dagster/partition": week})), key=lambda r: r.storage_id)
    return [(r.dagster_run, instance.all_logs(r.dagster_run.run_id, of_type={
        DagsterEventType.ENGINE_EVENT, DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS,
        DagsterEventType.STEP_FAILURE, DagsterEventType.ASSET_MATERIALIZATION})) for r in runs]


def executed_on(records) -> dict[str, str]:
    """source -> the Celery worker that started its step (dagster-celery's engine event)."""
    out = {}
    for rec in records:
        ev = rec.dagster_event
        if ev.event_type.value == "ENGINE_EVENT" and (ev.step_key or "").startswith("raw__") \
                and "in celery worker" in (ev.message or ""):
            md = ev.engine_event_data.metadata
            out[ev.step_key[len("raw__"):]] = md["Celery worker"].value
    return out


def step_results(records) -> dict[str, str]:
    out = {}
    for rec in records:
        ev = rec.dagster_event
        if ev.event_type.value in ("STEP_SUCCESS", "STEP_FAILURE") and (ev.step_key or "").startswith("raw__"):
            out[ev.step_key[len("raw__"):]] = ev.event_type.value
    return out


def test_a_worker_killed_mid_week_is_detected_and_its_steps_rerun_on_the_other(stack, hosts):
    week = "2026-11-16"
    remote = make_remote(stack.root / "remote-kill")
    a, b = hosts("host-a").launch_worker(), hosts("host-b").launch_worker()
    a.until_ready(), b.until_ready()
    orchestrator = hosts("orchestrator", FLEET_DATA_REMOTE=str(remote))
    before = len(log(remote))
    run = orchestrator.fleet_bg("run", "--week", week, "--force")
    deadline = time.monotonic() + 180
    while not (a.received() >= 2 and b.received() >= 2):
        assert run.poll() is None, run.communicate(10)
        assert time.monotonic() < deadline, "the steps never reached both workers"
        time.sleep(0.5)
    time.sleep(3)  # the slow sources are now scraping on both
    killed_at = time.time()
    a.kill()

    # another machine's `fleet run` of the same week, while the first goes on, does not proceed, and says why
    other = hosts("other", FLEET_DATA_REMOTE=str(remote)).fleet("run", "--week", week, "--force")
    out, err = other.communicate(timeout=300)
    assert other.returncode == 2, out + err
    assert "is already being run by run" in err and week in err, err

    out, err = run.communicate(timeout=600)
    assert run.returncode in (0, 1), out[-4000:] + err[-4000:]

    instance = instance_of(orchestrator)
    runs = week_events(instance, week)
    scrape, scrape_events = next((r, e) for r, e in runs if r.tags.get("fleet/kind") == "scrape"
                                 and "fleet/superseded" not in r.tags)
    where = executed_on(scrape_events)
    on_a = {s for s, w in where.items() if w.startswith("host-a@")}
    on_b = {s for s, w in where.items() if w.startswith("host-b@")}
    assert on_a and on_b, where
    results = step_results(scrape_events)
    # detected within 90 s, by the watch, naming the worker
    lost = [rec for rec in scrape_events if "fleet: celery worker host-a@" in (rec.dagster_event.message or "")]
    assert lost, [rec.dagster_event.message for rec in scrape_events if rec.dagster_event.event_type.value == "ENGINE_EVENT"]
    assert lost[0].timestamp - killed_at <= 90, lost[0].timestamp - killed_at
    # the steps in flight on the surviving worker were not revoked: they ended there, in the first run
    assert all(results.get(s) for s in on_b), (on_b, results)
    assert {s for s in on_b if results[s] == "STEP_SUCCESS"} == on_b - {"raises"}
    # A's steps that had not finished are re-executed on B, in one rerun run; the source failure is not
    unfinished = {s for s in on_a if s not in results}
    assert unfinished, (on_a, results)
    reruns = [(r, e) for r, e in runs if r.tags.get("fleet/kind") == "rerun"]
    assert len(reruns) == 1, [r.tags for r, _ in runs]
    rerun_sources = {k.path[-1] for k in reruns[0][0].asset_selection}
    assert unfinished <= rerun_sources, rerun_sources
    # a source failure is never re-run (raises fails as `source` wherever it finished; interrupted on A, it is infra)
    failed_as_source = {s for s, r in results.items() if r == "STEP_FAILURE"}
    assert "raises" in failed_as_source | unfinished
    assert not failed_as_source & rerun_sources, (failed_as_source, rerun_sources)
    assert set(executed_on(reruns[0][1]).values()) <= {w for w in where.values() if w.startswith("host-b@")}

    # the killed worker's steps gave nothing back to the scrapers pool; the runs, ended, hold no claim on it
    claims = instance.event_log_storage.get_concurrency_info("scrapers").claimed_slots
    assert not [c for c in claims if c.run_id in {r.run_id for r, _ in runs}], claims

    # every healthy source's rows are committed, once; raw and processed commits land once each
    subjects = [c["subject"] for c in log(remote)[: len(log(remote)) - before]]
    assert subjects == [f"fleet: processed rows for week {week}", f"fleet: raw rows for week {week}"], subjects
    frame = committed_rows(remote, week)
    counts = dict(frame.group_by(SOURCE).len().iter_rows())
    assert set(counts) == {*DEMO, *(f"slow_{i}" for i in range(SLOW))}, counts
    assert all(counts[f"slow_{i}"] == 2 for i in range(SLOW)), counts
    assert frame.filter(pl.col(SOURCE).str.starts_with("slow_")).select(SOURCE, "id").is_unique().all()

    # `fleet status` says which host ran each source
    status = orchestrator.fleet("status", "--week", week)
    sout, serr = status.communicate(timeout=120)
    assert status.returncode == 0, sout + serr
    for s in on_b - {"raises"}:
        line = next(ln for ln in sout.splitlines() if ln.startswith(f"{s} "))
        assert "host-b@" in line, sout


@pytest.mark.parametrize("server", ["redis", "postgres"])
def test_a_restart_of_the_broker_or_the_instance_mid_week_commits_the_week_once(stack, hosts, server):
    week = {"redis": "2026-11-02", "postgres": "2026-11-09"}[server]
    remote = make_remote(stack.root / f"remote-{server}")
    a, b = hosts(f"{server}-a").launch_worker(), hosts(f"{server}-b").launch_worker()
    a.until_ready(), b.until_ready()
    orchestrator = hosts(f"{server}-orchestrator", FLEET_DATA_REMOTE=str(remote))
    before = len(log(remote))
    run = orchestrator.fleet_bg("run", "--week", week, "--force")
    deadline = time.monotonic() + 180
    while not (a.received() + b.received() >= 6):
        assert run.poll() is None, run.communicate(10)
        assert time.monotonic() < deadline, "the steps never reached the workers"
        time.sleep(0.5)
    time.sleep(2)
    (stack.redis if server == "redis" else stack.pg).restart()
    out, err = run.communicate(timeout=600)
    if run.returncode not in (0, 1):  # it failed cleanly: the follow-up, run again, resumes it
        again = orchestrator.fleet("run", "--week", week, "--force")
        out2, err2 = again.communicate(timeout=600)
        assert again.returncode in (0, 1), out + err + out2 + err2
    subjects = [c["subject"] for c in log(remote)[: len(log(remote)) - before]]
    assert subjects == [f"fleet: processed rows for week {week}", f"fleet: raw rows for week {week}"], (subjects, out, err)
    frame = committed_rows(remote, week)
    assert set(frame[SOURCE].unique()) == {*DEMO, *(f"slow_{i}" for i in range(SLOW))}
    # nothing already scraped was scraped again: each healthy source scraped once over the week's runs (a run the
    # restart failed is followed by one that reuses the stored rows, and its steps succeed again: "reused")
    scraped = {}
    for run, events in week_events(instance_of(orchestrator), week):
        for rec in events:
            if rec.dagster_event.event_type.value == "ASSET_MATERIALIZATION":
                mat = rec.dagster_event.event_specific_data.materialization
                if mat.asset_key.path[0] == "raw" and not mat.metadata["reused"].value:
                    scraped.setdefault(mat.asset_key.path[-1], []).append(run.run_id[:8])
    assert set(scraped) == {*DEMO, *(f"slow_{i}" for i in range(SLOW))}, scraped
    twice = {s: runs for s, runs in scraped.items() if len(runs) > 1}
    assert not twice, (twice, [(r.run_id[:8], r.tags.get("fleet/kind"), r.status.value)
                               for r, _ in week_events(instance_of(orchestrator), week)])
    # a Celery worker that the restart ended (kombu's Redis transport can, restoring its unacknowledged messages)
    # was started again by its `fleet worker`
    for h in (a, b):
        text = h.log.read_text()
        if "Unrecoverable error" in text:
            assert "starting it again" in text and text.count(" ready.") >= 2, text[-3000:]


def test_bad_configuration_is_refused_before_anything_runs_in_one_line(stack, hosts):
    closed = free_port()
    cases = {
        "FLEET_CELERY_BROKER": {"FLEET_CELERY_BROKER": f"redis://127.0.0.1:{closed}/0"},
        "FLEET_POSTGRES_URL": {"FLEET_POSTGRES_URL": f"postgresql://postgres:fleet@127.0.0.1:{closed}/fleet"},
        "FLEET_ARTIFACTS": {"FLEET_ARTIFACTS": "s3://no-such-bucket-anywhere/fleet"},
        "fleet worker": {},  # a good stack, but no worker listens
    }
    # every command at once (each is a Python start and a Dagster import), then each one's answer
    started = {}
    remote = make_remote(stack.root / "remote-bad")  # a good data remote: what is refused is the stack's setting
    for name, extra in cases.items():
        h = hosts(f"bad-{name.replace(' ', '-').lower()}", FLEET_DATA_REMOTE=str(remote), **extra)
        started[name] = (h, h.fleet("run", "--week", "2026-11-16", "--force"),
                         h.fleet("worker") if name != "fleet worker" else None)
    for name, (h, p, w) in started.items():
        out, err = p.communicate(timeout=180)
        assert p.returncode == 2, (name, out, err)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("fleet: error:") and name in lines[0], (name, err)
        assert not (h.home / "browser-hosts").exists() or not any((h.home / "browser-hosts").iterdir()), name
        if w is not None:
            wout, werr = w.communicate(timeout=180)
            assert w.returncode == 2 and name in werr, (name, wout, werr)
