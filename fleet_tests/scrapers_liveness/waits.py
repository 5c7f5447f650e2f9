import asyncio
import os

import polars as pl

from fleet import Scraper


class Waits(Scraper):
    """Scrapes until the file ``FLEET_TEST_GO`` exists (the test decides how long), then returns two rows; each
    scrape adds an ``x`` to its file in ``FLEET_TEST_COUNTER_DIR``. Without the file, it fails near its limit."""

    name = "waits"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 300

    async def scrape(self, page, ctx):
        with open(os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name), "a") as fh:
            fh.write("x")
        go = os.environ["FLEET_TEST_GO"]
        while not os.path.exists(go):
            if ctx.time_left() < 5:
                raise RuntimeError(f"the test never created {go}")
            await asyncio.sleep(0.2)
        for i in range(2):
            yield {"id": i}
