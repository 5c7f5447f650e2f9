"""Sources that report what process, browser state and environment they ran in (fleet_tests/test_pool.py)."""
import asyncio
import os
from pathlib import Path

import polars as pl

from fleet import Scraper

CALLS = 0  # counts scrape() calls since this module was imported


class Probe(Scraper):
    """Reports its worker's pid, the cookies its context started with, FLEET_TEST_PROBE, and the module's calls."""

    name = "probe"
    schema = {"id": pl.Int64, "pid": pl.Int64, "cookies_at_start": pl.Int64, "probe_env": pl.String,
              "calls": pl.Int64, "cwd": pl.String}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        global CALLS
        CALLS += 1
        before = await page.context.cookies()
        await page.context.add_cookies([{"name": "seen", "value": "1", "url": "http://127.0.0.1/"}])
        await page.set_content("<p>probe</p>")
        yield {"id": 1, "pid": os.getpid(), "cookies_at_start": len(before),
               "probe_env": os.environ.get("FLEET_TEST_PROBE"), "calls": CALLS, "cwd": os.getcwd()}


class Leaky(Scraper):
    """Returns a row but leaves a task running."""

    name = "leaky"
    schema = {"id": pl.Int64, "pid": pl.Int64}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        Leaky.task = asyncio.get_running_loop().create_task(asyncio.sleep(3600), name="left-running")
        yield {"id": 1, "pid": os.getpid()}


class Hangs(Scraper):
    """Records its pid, then hangs past its limit."""

    name = "hangs"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 3

    async def scrape(self, page, ctx):
        (Path(os.environ["FLEET_TEST_COUNTER_DIR"]) / "hangs.pid").write_text(str(os.getpid()))
        await asyncio.sleep(3600)
        yield {"id": 1}


class Loner(Scraper):
    """Asks for a process of its own."""

    name = "loner"
    own_process = True
    schema = {"id": pl.Int64, "pid": pl.Int64}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await page.set_content("<p>alone</p>")
        yield {"id": 1, "pid": os.getpid()}


class Lingers(Scraper):
    """Marks that it is mid-scrape (with its pid), then takes 60 s."""

    name = "lingers"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 120

    async def scrape(self, page, ctx):
        (Path(os.environ["FLEET_TEST_COUNTER_DIR"]) / "lingers.pid").write_text(str(os.getpid()))
        await asyncio.sleep(60)
        yield {"id": 1}


class Crashes(Scraper):
    """Kills its own worker process mid-scrape (SIGKILL), the way a crash in a native library would end it."""

    name = "crashes"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        import signal
        await page.set_content("<p>crash</p>")
        os.kill(os.getpid(), signal.SIGKILL)
        yield {"id": 1}


class Spawns(Scraper):
    """Returns a row but leaves two child processes running: one in its worker's process group, one in a session
    of its own (their pids in the row)."""

    name = "spawns"
    schema = {"id": pl.Int64, "pid": pl.Int64, "child": pl.Int64, "detached": pl.Int64}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        import subprocess
        child = subprocess.Popen(["sleep", "3600"])
        detached = subprocess.Popen(["sleep", "3601"], start_new_session=True)
        yield {"id": 1, "pid": os.getpid(), "child": child.pid, "detached": detached.pid}
