import asyncio
import os
import signal

import polars as pl

from fleet import Scraper


class CrashAlways(Scraper):
    """Kills its Dagster step process on every attempt."""

    name = "crash_always"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        with open(os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name), "a") as fh:
            fh.write("x")
        os.kill(ctx.step_pid, signal.SIGKILL)
        await asyncio.sleep(30)
        yield {"id": 1}
