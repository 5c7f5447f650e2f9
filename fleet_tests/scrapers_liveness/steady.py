import os

import polars as pl

from fleet import Scraper


class Steady(Scraper):
    """A healthy source rendered from inline HTML; each scrape adds an ``x`` to its file in
    ``FLEET_TEST_COUNTER_DIR``."""

    name = "steady"
    schema = {"id": pl.Int64, "week": pl.Date}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        with open(os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name), "a") as fh:
            fh.write("x")
        await page.set_content("<p class=n>1</p><p class=n>2</p><p class=n>3</p>")
        for text in await page.locator("p.n").all_inner_texts():
            yield {"id": int(text), "week": ctx.week}
