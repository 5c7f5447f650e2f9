import time

import polars as pl

from fleet import Scraper, site_url


class HangBlocking(Scraper):
    """FAULT: blocks its thread with time.sleep (no await), so only a hard kill after 5 s can end it."""

    name = "hang_blocking"
    schema = {"value": pl.Utf8}
    key = ("value",)
    timeout_s = 5

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/books?week=" + ctx.week.isoformat()))
        time.sleep(10**6)  # deliberately blocking the event loop
        yield {"value": "unreachable"}
