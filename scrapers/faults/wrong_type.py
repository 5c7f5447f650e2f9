import polars as pl

from fleet import Scraper, site_url


class WrongType(Scraper):
    """FAULT: yields good rows, then one whose Float64 column "price" holds the string "n/a"."""

    name = "wrong_type"
    schema = {"isbn": pl.Utf8, "price": pl.Float64}
    key = ("isbn",)
    timeout_s = 30

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/books?week=" + ctx.week.isoformat()))
        cells = await page.locator("table#books td.isbn").all_inner_texts()
        for isbn in cells[:3]:
            yield {"isbn": isbn, "price": 1.0}
        yield {"isbn": "0000000000000", "price": "n/a"}  # wrong type on purpose
