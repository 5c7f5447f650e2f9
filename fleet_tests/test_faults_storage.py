"""Faults of fleet's own storage mid-week, through the real parts, each with `fleet run`: the attempt that hits the
fault fails as ``infra``, naming it, and is re-executed once the storage is back; the week commits once with
every source.

- FLEET_HOME on a small tmpfs that a source fills while it scrapes (Postgres holds the instance): the message
  names the disk, and the row whose spool line the full disk tore is never read as a row.
- The S3 artifact store stopped while a source scrapes and started again (moto's server behind a port the test
  closes and opens again: moto keeps its objects only in memory, so its own restart would lose the week)."""
import os
import subprocess
import sys
import time

import pytest

from fleet_tests.conftest import ROOT, SOURCE, WEEK, committed_rows, writable_dir
from fleet_tests.gitremote import log
from fleet_tests.s3server import CREDENTIALS, Outage, s3_server
from fleet_tests.services import Postgres

FILLS_DISK = '''import asyncio
import glob
import os

import polars as pl

from fleet import Scraper

BIG = "y" * 20000  # a row longer than what is left of the spool's last page: its write is torn


class FillsDisk(Scraper):
    """First attempt: two rows, then, once FLEET_TEST_FILL_AFTER exists, FLEET_TEST_FILLER takes every byte left on its disk, then a third, long row.
    Later attempts: the three rows."""

    name = "fills_disk"
    schema = {"id": pl.Int64, "text": pl.Utf8}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        counter = os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name)
        with open(counter, "a") as fh:
            fh.write("x")
        await page.set_content("<p>rows</p>")
        yield {"id": 0, "text": "a"}
        yield {"id": 1, "text": "b"}
        if open(counter).read() == "x":
            while not glob.glob(os.environ["FLEET_TEST_FILL_AFTER"]):  # the other source is done
                await asyncio.sleep(0.1)
            fd = os.open(os.environ["FLEET_TEST_FILLER"], os.O_WRONLY | os.O_CREAT, 0o644)
            size = 1 << 20
            while size:
                try:
                    os.write(fd, b"\\0" * size)
                except OSError:
                    size //= 2
            os.close(fd)
        yield {"id": 2, "text": BIG}
'''


def _said(event) -> str:
    """What a step's failure or retry request says: its Failure's description (and the errors that led to it)."""
    data = event.event_specific_data
    user = getattr(data, "user_failure_data", None)
    found = [user.description] if user is not None else []
    err = getattr(data, "error", None)
    while err is not None:
        found.append(err.message)
        err = err.cause or err.context
    return " | ".join(m for m in found if m)


@pytest.fixture
def small_home(fleet_env):
    """FLEET_HOME on a tmpfs of its own, 64 MiB, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(fleet_env.home)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield fleet_env
    finally:
        from fleet.engine import pool
        pool.stop(fleet_env.home / "browser-hosts")
        if subprocess.run(["umount", str(fleet_env.home)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(fleet_env.home)], check=True)


def test_a_full_disk_under_fleet_home_fails_the_attempt_as_infra_and_the_week_commits_once(small_home, monkeypatch):
    from dagster import DagsterEventType, DagsterInstance, RunsFilter

    from fleet.storage.frames import read_spool

    fleet_env = small_home
    # what the scrapers write or look for lies where their sandboxed attempt processes can reach it
    scrapers, counters = fleet_env.tmp / "scrapers", writable_dir(fleet_env.home)
    scrapers.mkdir()
    (scrapers / "steady.py").write_text((ROOT / "fleet_tests" / "scrapers_crash" / "steady.py").read_text())
    (scrapers / "fills_disk.py").write_text(FILLS_DISK)
    filler = writable_dir(fleet_env.home, "fill") / "filler"
    before = len(log(fleet_env.remote))
    with Postgres() as pg:
        env = {**fleet_env.env, "FLEET_POSTGRES_URL": pg.url, "FLEET_SCRAPERS_DIR": str(scrapers),
               "FLEET_TEST_COUNTER_DIR": str(counters), "FLEET_TEST_FILLER": str(filler),
               "FLEET_CRASH_RERUNS": "3",
               "FLEET_TEST_FILL_AFTER": str(fleet_env.home / "artifacts" / WEEK / "raw" / "steady" / "*.outcome.json")}
        out, err = open(fleet_env.tmp / "run.out", "w"), open(fleet_env.tmp / "run.err", "w")
        proc = subprocess.Popen([sys.executable, "-m", "fleet.cli", "run", "--week", WEEK, "--force"], env=env,
                                cwd=fleet_env.tmp, stdout=out, stderr=err)

        def said():
            return (fleet_env.tmp / "run.out").read_text()[-3000:] + (fleet_env.tmp / "run.err").read_text()[-8000:]

        try:
            deadline = time.monotonic() + 180
            # the instance's storage is made by `fleet run` before it says so: two makers at once would collide
            while "fleet: scraping week" not in (fleet_env.tmp / "run.out").read_text():
                assert proc.poll() is None and time.monotonic() < deadline, said()
                time.sleep(0.2)
            monkeypatch.setenv("FLEET_POSTGRES_URL", pg.url)
            instance = DagsterInstance.from_config(str(fleet_env.home / "dagster"))
            while True:  # the disk filled, and the attempt that hit it failed: the operator makes room
                runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
                retry = [e for r in runs for e in instance.all_logs(r.run_id, of_type={
                    DagsterEventType.STEP_UP_FOR_RETRY, DagsterEventType.STEP_FAILURE})
                    if e.dagster_event.step_key == "raw__fills_disk"]
                if retry:
                    break
                assert proc.poll() is None and time.monotonic() < deadline, said()
                time.sleep(0.2)
            assert filler.exists()
            filler.unlink()
            assert proc.wait(300) in (0, 1), said()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        runs = instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
        failures = [e.dagster_event for r in runs for e in instance.all_logs(r.run_id, of_type={
            DagsterEventType.STEP_UP_FOR_RETRY, DagsterEventType.STEP_FAILURE})]
        messages = [_said(e) for e in failures]
        assert failures and all(e.step_key == "raw__fills_disk" for e in failures), messages
        assert f"disk full at {fleet_env.home}" in messages[0], messages
        assert all("[infra] source fills_disk: " in m for m in messages), messages
    assert (counters / "fills_disk").read_text().startswith("xx")
    # the first attempt's spool: two whole rows, then the torn one, which is never read as a row
    spools = sorted((fleet_env.home / "artifacts" / WEEK / "work" / "fills_disk").glob("rows-*.jsonl"))
    torn = spools[0].read_bytes()
    assert not torn.endswith(b"\n") and torn.count(b"\n") == 2, torn[-200:]
    assert [r["id"] for r in read_spool(spools[0])] == [0, 1]
    assert not list((fleet_env.home / "artifacts").rglob(".*.tmp"))  # no object was left half-written
    assert len(log(fleet_env.remote)) == before + 2
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(set(frame[SOURCE])) == ["fills_disk", "steady"]
    rows = frame.filter(frame[SOURCE] == "fills_disk").sort("id")
    assert rows["id"].to_list() == [0, 1, 2] and len(rows["text"][2]) == 20000


WAITS = '''import os
import time

import polars as pl

from fleet import Scraper


class Waits(Scraper):
    """First attempt: waits for FLEET_TEST_GO (the test takes the store down meanwhile), then three rows.
    Later attempts: the three rows."""

    name = "waits"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 90

    async def scrape(self, page, ctx):
        counter = os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name)
        with open(counter, "a") as fh:
            fh.write("x")
        await page.set_content("<p>rows</p>")
        while open(counter).read() == "x" and not os.path.exists(os.environ["FLEET_TEST_GO"]):
            await page.wait_for_timeout(100)
        for i in range(3):
            yield {"id": i}
'''


def _step_events(instance, step_key: str, types) -> list:
    from dagster import RunsFilter

    return [e.dagster_event for r in instance.get_runs(RunsFilter(tags={"dagster/partition": WEEK}))
            for e in instance.all_logs(r.run_id, of_type=types) if e.dagster_event.step_key == step_key]


def test_the_s3_store_stopped_mid_week_and_started_again_fails_the_attempt_as_infra_and_commits_once(fleet_env):
    import s3fs
    from dagster import DagsterEventType, DagsterInstance

    # what the scrapers write or look for lies where their sandboxed attempt processes can reach it
    scrapers, counters = fleet_env.tmp / "scrapers", writable_dir(fleet_env.home)
    go = writable_dir(fleet_env.home, "signals") / "go"
    scrapers.mkdir()
    (scrapers / "steady.py").write_text((ROOT / "fleet_tests" / "scrapers_crash" / "steady.py").read_text())
    (scrapers / "waits.py").write_text(WAITS)
    before = len(log(fleet_env.remote))
    with s3_server() as s3:
        s3fs.S3FileSystem(endpoint_url=s3, key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], skip_instance_cache=True).mkdir("fleet-outage")
        outage = Outage(int(s3.rsplit(":", 1)[1])).start()
        env = {**fleet_env.env, **CREDENTIALS, "AWS_ENDPOINT_URL": outage.endpoint,
               "FLEET_ARTIFACTS": "s3://fleet-outage/fleet", "FLEET_SCRAPERS_DIR": str(scrapers),
               "FLEET_TEST_COUNTER_DIR": str(counters), "FLEET_TEST_GO": str(go), "FLEET_CRASH_RERUNS": "3"}
        out, err = open(fleet_env.tmp / "run.out", "w"), open(fleet_env.tmp / "run.err", "w")
        proc = subprocess.Popen([sys.executable, "-m", "fleet.cli", "run", "--week", WEEK, "--force"], env=env,
                                cwd=fleet_env.tmp, stdout=out, stderr=err)

        def said():
            return (fleet_env.tmp / "run.out").read_text()[-3000:] + (fleet_env.tmp / "run.err").read_text()[-8000:]

        try:
            deadline = time.monotonic() + 180
            # the instance's storage is made by `fleet run` before it says so: two makers at once would collide
            while "fleet: scraping week" not in (fleet_env.tmp / "run.out").read_text():
                assert proc.poll() is None and time.monotonic() < deadline, said()
                time.sleep(0.2)
            instance = DagsterInstance.from_config(str(fleet_env.home / "dagster"))
            # steady is stored and waits scrapes: the store stops, and waits's attempt ends
            while not (_step_events(instance, "raw__steady", DagsterEventType.STEP_SUCCESS)
                       and (counters / "waits").exists()):
                assert proc.poll() is None and time.monotonic() < deadline, said()
                time.sleep(0.2)
            outage.stop()
            go.touch()
            failed = {DagsterEventType.STEP_UP_FOR_RETRY, DagsterEventType.STEP_FAILURE}
            while not _step_events(instance, "raw__waits", failed):  # its outcome could not be stored
                assert proc.poll() is None and time.monotonic() < deadline, said()
                time.sleep(0.2)
            outage.start()
            assert proc.wait(300) in (0, 1), said()
        finally:
            outage.stop()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        failures = [e for step in ("raw__steady", "raw__waits") for e in _step_events(instance, step, failed)]
        messages = [_said(e) for e in failures]
        assert failures and all(e.step_key == "raw__waits" for e in failures), messages
        assert all("[infra] source waits: the artifact store s3://fleet-outage/fleet is unreachable" in m
                   for m in messages), messages
        assert (counters / "waits").read_text().startswith("xx")  # re-executed
    subjects = [c["subject"] for c in log(fleet_env.remote)[: len(log(fleet_env.remote)) - before]]
    assert subjects == [f"fleet: processed rows for week {WEEK}", f"fleet: raw rows for week {WEEK}"], subjects
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(set(frame[SOURCE])) == ["steady", "waits"]
    assert sorted(frame.filter(frame[SOURCE] == "waits")["id"].to_list()) == [0, 1, 2]
