import polars as pl

from fleet import Scraper, site_url


class EmptyFeed(Scraper):
    """FAULT: loads a feed page that has no items this week and yields zero rows (no error)."""

    name = "empty_feed"
    schema = {"item": pl.Utf8, "value": pl.Float64}
    key = ("item",)
    timeout_s = 30

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/empty?week=" + ctx.week.isoformat()))
        for item in await page.locator("#items tr").all_inner_texts():
            yield {"item": item, "value": None}
