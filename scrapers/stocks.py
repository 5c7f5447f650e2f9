import polars as pl

from fleet import Scraper, site_url

ROWS_JS = """rows => rows.map(r => ({
  symbol: r.querySelector('.symbol')?.textContent ?? null,
  company: r.querySelector('.company')?.textContent ?? null,
  close: r.querySelector('.close')?.textContent ?? null,
  change_pct: r.querySelector('.change_pct')?.textContent ?? null,
}))"""


class Stocks(Scraper):
    """Weekly closing quotes; the table is built by JavaScript after load, so a real browser is needed."""

    name = "stocks"
    schema = {"symbol": pl.Utf8, "company": pl.Utf8, "close": pl.Float64, "change_pct": pl.Float64}
    key = ("symbol",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/stocks?week=" + ctx.week.isoformat()))
        await page.locator("#quotes[data-ready='1']").wait_for(state="attached", timeout=15_000)
        for row in await page.locator("#quotes tr.quote").evaluate_all(ROWS_JS):
            row["close"] = float(row["close"]) if row["close"] else None
            row["change_pct"] = float(row["change_pct"].rstrip("%")) if row["change_pct"] else None
            yield row
