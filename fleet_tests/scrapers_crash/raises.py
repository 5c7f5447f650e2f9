import os

import polars as pl

from fleet import Scraper


class Raises(Scraper):
    """A scraper bug: raises on every attempt."""

    name = "raises"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        with open(os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name), "a") as fh:
            fh.write("x")
        await page.set_content("<h1>changed layout</h1>")
        raise RuntimeError("the price column moved")
        yield {}
