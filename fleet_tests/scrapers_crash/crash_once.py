import asyncio
import os
import signal

import polars as pl

from fleet import Scraper


class CrashOnce(Scraper):
    """Kills its Dagster step process on the first attempt of a week (a real worker crash), then succeeds."""

    name = "crash_once"
    schema = {"id": pl.Int64, "label": pl.String}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        with open(os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name), "a") as fh:
            fh.write("x")
        if not ctx.checkpoint.get("crashed"):
            ctx.checkpoint["crashed"] = True
            ctx.save_checkpoint()
            os.kill(ctx.step_pid, signal.SIGKILL)  # the step process: Dagster sees a crashed child
            await asyncio.sleep(30)
        await page.set_content("<ul><li>one</li><li>two</li></ul>")
        for i, li in enumerate(await page.locator("li").all()):
            yield {"id": i, "label": await li.inner_text()}
