import polars as pl

from fleet import Scraper, site_url

ROWS_JS = """rows => rows.map(r => ({
  shop_id: r.querySelector('.shop_id')?.textContent ?? null,
  name: r.querySelector('.name')?.textContent ?? null,
  city: r.querySelector('.city')?.textContent ?? null,
  visitors: r.querySelector('.visitors')?.textContent ?? null,
  detail: r.querySelector('.name a')?.href ?? null,
}))"""


class Shops(Scraper):
    """Shops from a listing; the rating lives on each shop's detail page, fetched only in deep runs."""

    name = "shops"
    schema = {"shop_id": pl.Utf8, "name": pl.Utf8, "city": pl.Utf8, "visitors": pl.Int64, "rating": pl.Float64}
    key = ("shop_id",)
    optional = ("rating",)  # filled only by deep runs
    timeout_s = 120

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/shops?week=" + ctx.week.isoformat()))
        rows = await page.locator("#shops tr.shop").evaluate_all(ROWS_JS)
        ratings = ctx.checkpoint.setdefault("ratings", {})  # survives a re-execution of this week
        for row in rows:
            detail = row.pop("detail")
            if ctx.deep and detail and row["shop_id"] not in ratings:  # the expensive phase
                await ctx.goto(page, detail)
                ratings[row["shop_id"]] = float(await page.locator("#shop .rating").inner_text())
                ctx.save_checkpoint()
            row["visitors"] = int(row["visitors"]) if row["visitors"] else None
            yield {**row, "rating": ratings.get(row["shop_id"]) if ctx.deep else None}
