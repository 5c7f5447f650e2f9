import asyncio
import os
import signal

import polars as pl

from fleet import Scraper
from fleet.engine.procs import stat_fields


def _parent(pid: int) -> int:
    return int(stat_fields(pid)[1])


class KillsItsRun(Scraper):
    """On its first attempt of a week, kills the process of the run it is in, which no retry policy can answer.

    ``FLEET_TEST_KILL_RUN``: ``SIGKILL`` (the run process and this step die at once, as in kill -9 or an OOM) or
    ``SIGTERM`` (the run process is told to stop, as by a shutdown; Dagster interrupts its steps and fails the
    run). The run process is ``FLEET_TEST_RUN_PID``, else the parent of the forkserver this step was forked from.
    With ``FLEET_TEST_KILL_WHEN`` (a path) it waits for that file first, so the test decides what else is done.
    Later attempts: ``FLEET_TEST_THEN=ok`` returns two rows, ``crash`` SIGKILLs the step process."""

    name = "kills_its_run"
    schema = {"id": pl.Int64}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        with open(os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name), "a") as fh:
            fh.write("x")
        if not ctx.checkpoint.get("killed"):
            ctx.checkpoint["killed"] = True
            ctx.save_checkpoint()
            go = os.environ.get("FLEET_TEST_KILL_WHEN")
            while go and not os.path.exists(go) and ctx.time_left() > 5:
                await asyncio.sleep(0.2)
            run_pid = int(os.environ.get("FLEET_TEST_RUN_PID") or _parent(_parent(ctx.step_pid)))
            sig = getattr(signal, os.environ.get("FLEET_TEST_KILL_RUN", "SIGKILL"))
            os.kill(run_pid, sig)
            if sig == signal.SIGKILL:
                os.kill(ctx.step_pid, signal.SIGKILL)  # nothing of this step reports after its run died
            await asyncio.sleep(30)
        elif os.environ.get("FLEET_TEST_THEN", "ok") == "crash":
            os.kill(ctx.step_pid, signal.SIGKILL)
            await asyncio.sleep(30)
        for i in range(2):
            yield {"id": i}
