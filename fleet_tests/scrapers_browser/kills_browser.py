import asyncio
import os
import signal
from pathlib import Path

import polars as pl

from fleet import Scraper


def _browser_of_this_worker() -> int:
    """The Chromium this attempt's page is in: the browser process (not a renderer, nor a shell that runs it)
    under this worker's Playwright driver."""
    todo = [os.getpid()]
    while todo:
        pid = todo.pop(0)
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            todo.append(child)
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"chrom" in argv[0] and not any(a.startswith(b"--type=") for a in argv):
                return child
    raise RuntimeError("no browser under this worker")


class KillsBrowser(Scraper):
    """Crashes the browser it runs in, on every attempt: a page that brings down Chromium itself. It waits until
    the other sources are mid-scrape."""

    name = "kills_browser"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 90

    async def scrape(self, page, ctx):
        counters = os.environ["FLEET_TEST_COUNTER_DIR"]
        for _ in range(300):  # until both slow sources are mid-scrape
            if all(os.path.exists(os.path.join(counters, f"slow_{n}.started")) for n in (1, 2)):
                break
            await asyncio.sleep(0.1)
        pid = _browser_of_this_worker()
        with open(os.path.join(counters, "killed_chromium"), "a") as fh:
            fh.write(f"{os.getpid()} {pid}\n")
        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(30)
        await page.set_content("<p>1</p>")
        yield {"id": int(await page.locator("p").inner_text())}
