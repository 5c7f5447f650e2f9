import os
from pathlib import Path

import polars as pl

from fleet import Scraper


def _slow(n):
    class Slow(Scraper):
        __doc__ = f"Renders {n} pages slowly; in flight when kills_browser strikes."
        name = f"slow_{n}"
        schema = {"id": pl.Int64, "text": pl.String}
        key = ("id",)
        timeout_s = 60

        async def scrape(self, page, ctx):
            for i in range(8):
                await page.set_content(f"<p>{n}-{i}</p>")
                if i == 1:  # tells kills_browser this source is mid-scrape
                    (Path(os.environ["FLEET_TEST_COUNTER_DIR"]) / f"slow_{n}.started").touch()
                await page.wait_for_timeout(400)
                yield {"id": i, "text": await page.locator("p").inner_text()}
    Slow.__name__ = Slow.__qualname__ = f"Slow{n}"
    return Slow


Slow1, Slow2 = _slow(1), _slow(2)
