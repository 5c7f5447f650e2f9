import polars as pl

from fleet import Scraper, site_url

ITEMS_JS = """items => items.map(li => ({
  sku: li.querySelector('.sku')?.textContent ?? null,
  name: li.querySelector('.name')?.textContent ?? null,
  category: li.querySelector('.category')?.textContent ?? null,
  price: li.querySelector('.price')?.textContent ?? null,
}))"""


class Catalog(Scraper):
    """Products of a paginated catalog, following the "next" links page by page."""

    name = "catalog"
    schema = {"sku": pl.Utf8, "name": pl.Utf8, "category": pl.Utf8, "price": pl.Float64, "page": pl.Int64}
    key = ("sku",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        url, number = site_url("/catalog?week=" + ctx.week.isoformat()), 1
        while url:
            await ctx.goto(page, url)
            for item in await page.locator("#products li.product").evaluate_all(ITEMS_JS):
                item["price"] = float(item["price"]) if item["price"] else None
                yield {**item, "page": number}
            nxt = page.locator("a[rel=next]")
            url = await nxt.evaluate("a => a.href") if await nxt.count() else None
            number += 1
