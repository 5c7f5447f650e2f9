import polars as pl

from fleet import Scraper

# Third-party page content that runs script wherever it is rendered as HTML: the UI test checks that the stored
# page, shown as a failed source's evidence, never runs in the operator's browser.
HOSTILE = ('<html><head><title>hostile</title></head><body><h1 id="fleet-hostile">hostile page</h1>'
           '<script>window.fleetHostileRan = true;</script>'
           '<img id="fleet-hostile-img" src="nowhere.png" onerror="window.fleetHostileRan = true"></body></html>')


class HostilePage(Scraper):
    """FAULT (test): loads a page whose HTML runs script, then raises as a broken scraper does."""

    name = "hostile_page"
    schema = {"value": pl.Utf8}
    key = ("value",)
    timeout_s = 30

    async def scrape(self, page, ctx):
        await page.set_content(HOSTILE)
        raise RuntimeError("the hostile page has no rows")
        yield {"value": "never"}
