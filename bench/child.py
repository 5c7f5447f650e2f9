"""Entry points run in fresh subprocesses by the benchmarks: ``python -m bench.child NAME ARGS...``.

Each prints one JSON line with the in-process seconds of the measured operation (after imports)."""
from __future__ import annotations

import json
import sys
import time


def consolidate_fleet(root: str, week: str, n: str) -> None:
    from fleet.transform.consolidate import consolidate
    from fleet.storage.store import LocalArtifactStore
    t = time.perf_counter()
    summary = consolidate(LocalArtifactStore(root), week, [f"s{i:04d}" for i in range(int(n))])
    print(json.dumps({"op_s": time.perf_counter() - t, "rows": summary["rows"]}))


def consolidate_polars(listing: str, out: str) -> None:
    """Bare polars over the raw files the bench stored (``listing``: a JSON object, source -> its file's path): each
    source's rows with its name, into a file of its own in the folder ``out``, as fleet's layout has them."""
    from pathlib import Path

    import polars as pl
    t = time.perf_counter()
    with open(listing) as fh:
        files = json.load(fh)
    Path(out).mkdir(parents=True, exist_ok=True)
    for name, path in sorted(files.items()):
        pl.scan_parquet(path).select(pl.lit(name).alias("source"), pl.all()).sink_parquet(Path(out) / f"{name}.parquet")
    print(json.dumps({"op_s": time.perf_counter() - t}))


def commit_fleet(remote: str, workdir: str, src: str) -> None:
    from pathlib import Path

    from fleet.publish import DataRepo, commit_files, create_remote
    t = time.perf_counter()
    repo = DataRepo(remote=remote, clone_dir=Path(workdir))
    create_remote(repo)
    res = commit_files(repo, {"2026-11-16/raw.parquet": Path(src)}, subject="bench: raw rows for 2026-11-16",
                       idempotency_key="bench-2026-11-16-raw")
    print(json.dumps({"op_s": time.perf_counter() - t, "status": res.status}))


def defs_import() -> None:
    t = time.perf_counter()
    from fleet.defs.definitions import defs
    n = len(list(defs.resolve_all_asset_keys())) if hasattr(defs, "resolve_all_asset_keys") else -1
    print(json.dumps({"op_s": time.perf_counter() - t, "asset_keys": n}))


def _load_scrapers(directory: str) -> list:
    import importlib.util
    from pathlib import Path

    from fleet import Scraper
    classes = []
    for path in sorted(Path(directory).glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"bench_src_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        classes += [c for c in vars(mod).values()
                    if isinstance(c, type) and issubclass(c, Scraper) and c is not Scraper]
    return classes


def overhead_baseline(directory: str, week: str, cap: str) -> None:
    """One process, one asyncio loop, one Chromium, at most ``cap`` pages at once."""
    import asyncio
    import datetime as dt

    from playwright.async_api import async_playwright

    from fleet import ScrapeContext
    from fleet.config import chromium_path
    classes = _load_scrapers(directory)
    monday = dt.date.fromisoformat(week)

    async def main():
        sem = asyncio.Semaphore(int(cap))
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium_path(), headless=True)

            async def one(cls):
                async with sem:
                    context = await browser.new_context()
                    page = await context.new_page()
                    ctx = ScrapeContext(source=cls.name, week=monday, run_id="bench")
                    rows = [row async for row in cls().scrape(page, ctx)]
                    await context.close()
                    return len(rows)
            counts = await asyncio.gather(*(one(c) for c in classes))
            await browser.close()
        return sum(counts)

    t = time.perf_counter()
    rows = asyncio.run(main())
    print(json.dumps({"op_s": time.perf_counter() - t, "rows": rows}))


def runner_only(directory: str, week: str, cap: str) -> None:
    """fleet's scraping layer without Dagster: ``run_source`` for every source, ``cap`` at a time from threads of
    one process, in warm workers with a browser each, every artifact stored (FLEET_HOME from the environment).
    What a week costs fleet before orchestration: no steps, events, checks, consolidation or commits."""
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from fleet.config import settings
    from fleet.engine import pool
    from fleet.scraping.discovery import discover
    from fleet.engine.runner import run_source
    from fleet.engine.settings import EngineSettings
    from fleet.storage.open import open_store
    s = settings()
    sources = discover([Path(directory)])
    store = open_store(s.store_url, s.artifact_cache)
    ws = EngineSettings.from_env()
    t = time.perf_counter()
    with ThreadPoolExecutor(int(cap)) as threads:
        outs = list(threads.map(lambda src: run_source(src, week, store=store, run_id="bench-runner-only",
                                                       settings=ws), sources))
    op = time.perf_counter() - t
    pool.stop_idle(ws.hosts_dir)
    print(json.dumps({"op_s": op, "ok": sum(o.status == "ok" for o in outs), "rows": sum(o.rows for o in outs),
                      "not_ok": {o.source: f"{o.status} ({o.category}): {o.error}" for o in outs if o.status != "ok"}}))


def deep_phase(root: str, deep: str) -> None:
    """run_source for the demo's heavy source (shops), with its expensive phase on or off."""
    import os
    from pathlib import Path

    from fleet.config import PROJECT_ROOT
    from fleet.engine import pool
    from fleet.scraping.discovery import discover
    from fleet.engine.runner import run_source
    from fleet.engine.settings import EngineSettings
    from fleet.storage.store import LocalArtifactStore
    os.environ["FLEET_HOME"] = root
    shops = next(s for s in discover([PROJECT_ROOT / "scrapers"]) if s.name == "shops")
    ws = EngineSettings.from_env()
    t = time.perf_counter()
    out = run_source(shops, "2026-11-16", store=LocalArtifactStore(Path(root) / "artifacts"), run_id="bench",
                     deep=deep == "1", refresh=True, settings=ws)
    op = time.perf_counter() - t
    pool.stop_idle(ws.hosts_dir)  # otherwise its warm worker idles for FLEET_BROWSER_HOST_IDLE_S
    print(json.dumps({"op_s": op, "status": out.status, "rows": out.rows, "pages": out.pages}))


if __name__ == "__main__":
    globals()[sys.argv[1].replace("-", "_")](*sys.argv[2:])
