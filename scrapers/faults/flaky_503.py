import polars as pl

from fleet import Scraper, site_url


class Flaky503(Scraper):
    """FAULT (recoverable): the feed answers HTTP 503 twice per week before a 200; ctx.goto's retries get through."""

    name = "flaky_503"
    schema = {"code": pl.Utf8, "value": pl.Float64}
    key = ("code",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        week = ctx.week.isoformat()
        await ctx.goto(page, site_url(f"/flaky?key=flaky-{week}&week={week}"))
        for row in await page.locator("#items tr.item").evaluate_all(
            "rows => rows.map(r => [r.querySelector('.code').textContent, r.querySelector('.value').textContent])"
        ):
            yield {"code": row[0], "value": float(row[1])}
