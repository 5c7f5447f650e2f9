import asyncio
import json
import os
import signal

import polars as pl

from fleet import Scraper


class KillsBrowser(Scraper):
    """On its first attempt of a week, SIGKILLs the shared Chromium while the other sources are mid-scrape."""

    name = "kills_browser"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 90

    async def scrape(self, page, ctx):
        if not ctx.checkpoint.get("killed"):
            ctx.checkpoint["killed"] = True
            ctx.save_checkpoint()
            counters = os.environ["FLEET_TEST_COUNTER_DIR"]
            for _ in range(300):  # until both slow sources are mid-scrape in the shared browser
                if all(os.path.exists(os.path.join(counters, f"slow_{n}.started")) for n in (1, 2)):
                    break
                await asyncio.sleep(0.1)
            info = json.loads(open(os.path.join(os.environ["FLEET_HOME"], "browser", "endpoint.json")).read())
            with open(os.path.join(counters, "killed_chromium"), "w") as fh:
                fh.write(str(info["chromium_pid"]))
            os.kill(info["chromium_pid"], signal.SIGKILL)
            await asyncio.sleep(30)
        await page.set_content("<p>1</p>")
        yield {"id": int(await page.locator("p").inner_text())}
