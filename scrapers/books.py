import polars as pl

from fleet import Scraper, site_url

ROWS_JS = """rows => rows.map(r => ({
  isbn: r.querySelector('.isbn')?.textContent ?? null,
  title: r.querySelector('.title')?.textContent ?? null,
  price: r.querySelector('.price')?.textContent ?? null,
}))"""


class Books(Scraper):
    """Book prices from a static HTML table (one page, no JavaScript needed)."""

    name = "books"
    schema = {"isbn": pl.Utf8, "title": pl.Utf8, "price": pl.Float64}
    key = ("isbn",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/books?week=" + ctx.week.isoformat()))
        for row in await page.locator("table#books tr.book").evaluate_all(ROWS_JS):
            price = row["price"]
            row["price"] = float(price.lstrip("£")) if price else None
            yield row
