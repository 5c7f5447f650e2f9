"""many_sources: 1,000 trivial scraper modules; time `from fleet.defs.definitions import defs` in a fresh process.

The first import after the scrapers change asks a sandboxed process about them (fleet/scraping/sandboxed.py, as
root); later ones read its kept answer. The goal is for the later ones, what every process of a week pays; the
first is reported on its own (``first_s``), and each leg starts with it, so a single repeat measures both."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from bench.util import PY, ROOT, median, rnd, run_measured

TEMPLATE = '''import polars as pl

from fleet import Scraper


class Source{i:04d}(Scraper):
    """Trivial generated source {i}."""

    name = "gen_{i:04d}"
    schema = {{"id": pl.Int64, "value": pl.String}}
    key = ("id",)
    timeout_s = 60

    async def scrape(self, page, ctx):
        yield {{"id": 1, "value": "x"}}
'''

GOAL_S = 3.0


def write_sources(where: Path, n: int) -> None:
    where.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (where / f"gen_{i:04d}.py").write_text(TEMPLATE.format(i=i))


def run(size: str, repeats: int) -> dict:
    n = 20 if size == "smoke" else 1000  # the goal is for 1,000
    tmp = Path(tempfile.mkdtemp(prefix="bench-many-"))
    try:
        write_sources(tmp / "scrapers", n)
        env = {"FLEET_SCRAPERS_DIR": str(tmp / "scrapers"), "FLEET_HOME": str(tmp / "home")}
        (tmp / "empty").mkdir()
        empty_env = {"FLEET_SCRAPERS_DIR": str(tmp / "empty"), "FLEET_HOME": str(tmp / "home0")}
        firsts = {"sources": _import(env), "empty": _import(empty_env)}  # each leg's cold import, reported apart
        runs, empty = [], []
        for _ in range(repeats):
            empty.append(_import(empty_env))
            runs.append(_import(env))
        secs = median([r["wall"] for r in runs])
        return {"ratio": rnd(secs / GOAL_S), "goal": 1.0, "ok": secs <= GOAL_S, "seconds": rnd(secs),
                "goal_s": GOAL_S, "zero_sources_s": rnd(median([r["wall"] for r in empty])), "sources": n,
                "repeats": repeats, "cpu_s": rnd(median([r["cpu"] for r in runs])),
                "zero_sources_cpu_s": rnd(median([r["cpu"] for r in empty])),
                "import_s_in_process": rnd(median([r["op_s"] for r in runs])),
                "first_s": rnd(firsts["sources"]["wall"]), "first_cpu_s": rnd(firsts["sources"]["cpu"]),
                "zero_sources_first_s": rnd(firsts["empty"]["wall"]),
                "walls_s": [rnd(r["wall"], 2) for r in runs], "asset_keys": runs[-1].get("asset_keys"),
                "peak_rss_mb": rnd(median([r["peak_rss_mb"] for r in runs]), 1)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _import(env: dict) -> dict:
    r = run_measured([PY, "-m", "bench.child", "defs-import"], cwd=ROOT, env=env)
    r.update(json.loads(r["output"].strip().splitlines()[-1]))
    return r
