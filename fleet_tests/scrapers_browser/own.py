import os

import polars as pl

from fleet import Scraper


class Own(Scraper):
    """Asks for a Chromium no other source used (own_browser): a worker of its own, not a warm one."""

    name = "own"
    schema = {"id": pl.Int64, "agent": pl.String, "pid": pl.Int64}
    key = ("id",)
    timeout_s = 60
    own_browser = True

    async def scrape(self, page, ctx):
        for i in range(8):
            await page.wait_for_timeout(400)
            yield {"id": i, "agent": page.context.browser.version, "pid": os.getpid()}
