import polars as pl

from fleet import Scraper, site_url


class HangAsync(Scraper):
    """FAULT: navigates to an endpoint that never answers, with no navigation timeout; only the 5 s hard timeout ends it."""

    name = "hang_async"
    schema = {"value": pl.Utf8}
    key = ("value",)
    timeout_s = 5

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/hang?week=" + ctx.week.isoformat()), timeout_ms=0)  # 0 = wait forever
        yield {"value": "unreachable"}
