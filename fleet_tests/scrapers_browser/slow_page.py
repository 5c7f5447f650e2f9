import os

import polars as pl

from fleet import Scraper


class SlowPage(Scraper):
    """Goes back and forth between two sites of the test's slow site (127.0.0.1 and localhost: a renderer each,
    which the browser's zygote starts), and waits on its slow page (i=1) while the test kills a process of its
    browser."""

    name = "slow_page"
    schema = {"id": pl.Int64, "text": pl.String}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        base = os.environ["FLEET_TEST_SLOW_SITE"]
        sites = (base, base.replace("127.0.0.1", "localhost"))
        for i in range(3):
            await ctx.goto(page, f"{sites[i % 2]}/slow?i={i}")
            yield {"id": i, "text": await page.locator("p").inner_text()}


class AbortsItself(Scraper):
    """A site that aborts its own navigation: it answers 204 No Content, which Chromium reports as
    ``net::ERR_ABORTED``, as it does a navigation its killed renderer or network service dropped."""

    name = "aborts_itself"
    schema = {"id": pl.Int64, "text": pl.String}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await ctx.goto(page, os.environ["FLEET_TEST_SLOW_SITE"] + "/nocontent")
        yield {"id": 0, "text": await page.locator("p").inner_text()}
