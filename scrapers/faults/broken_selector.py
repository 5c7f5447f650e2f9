import polars as pl

from fleet import Scraper, site_url


class BrokenSelector(Scraper):
    """FAULT: waits for a table id the site no longer has; fails after 2 s with a Playwright TimeoutError."""

    name = "broken_selector"
    schema = {"isbn": pl.Utf8, "price": pl.Float64}
    key = ("isbn",)
    timeout_s = 30

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/books?week=" + ctx.week.isoformat()))
        await page.locator("table#book-list-v1 tr.book").first.wait_for(timeout=2000)  # raises
        yield {"isbn": "never", "price": None}
