"""consolidate: fleet.transform.consolidate.consolidate vs bare polars scan/sink of a file per source, each in a fresh
process."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from bench.util import PY, ROOT, median, rnd, run_measured
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore

WEEK = "2026-11-16"


def _write_inputs(root: Path, n: int, m: int) -> dict[str, str]:
    """n sources' raw rows and outcomes, stored as a week's scrape stores them; returns each source's raw file, which
    the bare-polars baseline reads (found through the store's own keys, so it follows any change of layout)."""
    import polars as pl

    store = LocalArtifactStore(root)
    paths = {}
    for i in range(n):
        name = f"s{i:04d}"
        h = pl.col("j").hash(seed=i)
        frame = pl.select(j=pl.int_range(0, m, dtype=pl.Int64)).select(
            sku=pl.format("{}-{}", pl.lit(name), pl.col("j")),
            title=pl.format("category-{} item", (h % 50)),
            price=(h % 100_000).cast(pl.Float64) / 1000,
            qty=(h % 1000).cast(pl.Int64),
        )
        attempt = keys.new_attempt_id()
        store.write_parquet(WEEK, keys.raw_key(name, attempt), frame)
        keys.write_outcome(store, WEEK, {"source": name, "status": "ok", "category": None, "rows": m, "week": WEEK,
                                         "attempt": attempt})
        paths[name] = store.location(WEEK, keys.raw_key(name, attempt))
    return paths


def run(size: str, repeats: int) -> dict:
    n, m = {"smoke": (3, 1_000), "quick": (40, 25_000), "full": (40, 250_000)}[size]
    tmp = Path(tempfile.mkdtemp(prefix="bench-consolidate-"))
    try:
        paths = _write_inputs(tmp / "store", n, m)
        rows = n * m
        listing = tmp / "raw-files.json"
        listing.write_text(json.dumps(paths))
        fleet_runs, base_runs = [], []
        for _ in range(repeats):
            LocalArtifactStore(tmp / "store").delete(WEEK, keys.CONSOLIDATED_META_KEY)
            r = run_measured([PY, "-m", "bench.child", "consolidate-fleet", str(tmp / "store"), WEEK, str(n)], cwd=ROOT)
            r["op_s"] = json.loads(r["output"].strip().splitlines()[-1])["op_s"]
            fleet_runs.append(r)
            base_out = tmp / "baseline"
            shutil.rmtree(base_out, ignore_errors=True)
            b = run_measured([PY, "-m", "bench.child", "consolidate-polars", str(listing), str(base_out)], cwd=ROOT)
            b["op_s"] = json.loads(b["output"].strip().splitlines()[-1])["op_s"]
            base_runs.append(b)
        fw, bw = median([r["wall"] for r in fleet_runs]), median([r["wall"] for r in base_runs])
        fr, br = median([r["peak_rss_mb"] for r in fleet_runs]), median([r["peak_rss_mb"] for r in base_runs])
        wall_ratio, rss_ratio = fw / bw, fr / br
        return {
            "ratio": rnd(wall_ratio), "goal": 1.2, "ok": wall_ratio <= 1.2 and rss_ratio <= 1.5,
            "rss_ratio": rnd(rss_ratio), "rss_goal": 1.5,
            "sources": n, "rows_per_source": m, "rows": rows, "repeats": repeats,
            "fleet_wall_s": rnd(fw), "baseline_wall_s": rnd(bw),
            "fleet_op_s": rnd(median([r["op_s"] for r in fleet_runs])),
            "baseline_op_s": rnd(median([r["op_s"] for r in base_runs])),
            "fleet_peak_rss_mb": rnd(fr, 1), "baseline_peak_rss_mb": rnd(br, 1),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
