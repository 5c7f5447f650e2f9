import polars as pl

from fleet import Scraper, site_url

QUERIES = ("bolt", "nut", "washer")
ROWS_JS = """rows => rows.map(r => ({
  part_no: r.querySelector('.part_no')?.textContent ?? null,
  name: r.querySelector('.name')?.textContent ?? null,
  price: r.querySelector('.price')?.textContent ?? null,
  in_stock: r.querySelector('.in_stock')?.textContent ?? null,
}))"""


class Parts(Scraper):
    """Hardware parts found through a search form, one search per query term."""

    name = "parts"
    schema = {"part_no": pl.Utf8, "name": pl.Utf8, "query": pl.Utf8, "price": pl.Float64, "in_stock": pl.Boolean}
    key = ("part_no",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/parts?week=" + ctx.week.isoformat()))
        for query in QUERIES:
            await page.fill("#q", query)
            async with page.expect_navigation():
                await page.click("#search button[type=submit]")
            for row in await page.locator("#results tr.part").evaluate_all(ROWS_JS):
                row["price"] = float(row["price"]) if row["price"] else None
                row["in_stock"] = {"yes": True, "no": False}.get(row["in_stock"])
                yield {**row, "query": query}
