import polars as pl

from fleet import Scraper


class Own(Scraper):
    """Asks for a Chromium of its own (own_browser), so a crash of the shared one does not touch it."""

    name = "own"
    schema = {"id": pl.Int64, "agent": pl.String}
    key = ("id",)
    timeout_s = 60
    own_browser = True

    async def scrape(self, page, ctx):
        for i in range(8):
            await page.wait_for_timeout(400)
            yield {"id": i, "agent": page.context.browser.version}
