import polars as pl

from fleet import Scraper, site_url

ROWS_JS = """rows => rows.map(r => ({
  job_id: r.querySelector('.job_id')?.textContent ?? null,
  title: r.querySelector('.title')?.textContent ?? null,
  city: r.querySelector('.city')?.textContent ?? null,
  salary: r.querySelector('.salary')?.textContent ?? null,
}))"""
GREW_JS = "n => document.querySelectorAll('#jobs tr.job').length > n || !document.querySelector('#load-more')"


class Jobs(Scraper):
    """Job ads behind a "Load more" button that fetches further rows as JSON."""

    name = "jobs"
    schema = {"job_id": pl.Int64, "title": pl.Utf8, "city": pl.Utf8, "salary": pl.Int64}
    key = ("job_id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        await ctx.goto(page, site_url("/jobs?week=" + ctx.week.isoformat()))
        rows, button = page.locator("#jobs tr.job"), page.locator("#load-more")
        while await button.count():
            before = await rows.count()
            await button.click()
            await page.wait_for_function(GREW_JS, arg=before, timeout=15_000)
        for row in await rows.evaluate_all(ROWS_JS):
            row["job_id"] = int(row["job_id"])
            row["salary"] = int(row["salary"].replace(",", "")) if row["salary"] else None
            yield row
