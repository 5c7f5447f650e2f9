"""Entry points run in fresh subprocesses by the benchmarks: ``python -m bench.child NAME ARGS...``.

Each prints one JSON line with the in-process seconds of the measured operation (after imports)."""
from __future__ import annotations

import json
import sys
import time


def consolidate_fleet(root: str, week: str, n: str) -> None:
    from fleet.storage.consolidate import consolidate
    from fleet.storage.store import LocalArtifactStore
    t = time.perf_counter()
    summary = consolidate(LocalArtifactStore(root), week, [f"s{i:04d}" for i in range(int(n))])
    print(json.dumps({"op_s": time.perf_counter() - t, "rows": summary["rows"]}))


def consolidate_polars(root: str, week: str, n: str, out: str) -> None:
    import polars as pl
    t = time.perf_counter()
    frames = [pl.scan_parquet(f"{root}/{week}/raw/s{i:04d}.parquet").with_columns(pl.lit(f"s{i:04d}").alias("source"))
              for i in range(int(n))]
    pl.concat(frames, how="diagonal_relaxed").sink_parquet(out)
    print(json.dumps({"op_s": time.perf_counter() - t}))


def commit_fleet(remote: str, workdir: str, src: str) -> None:
    from pathlib import Path

    from fleet.publish.commit import DataRepo, commit_files, ensure_remote
    t = time.perf_counter()
    repo = DataRepo(remote=remote, workdir=Path(workdir))
    ensure_remote(repo)
    res = commit_files(repo, {"2026-11-16/raw.parquet": Path(src)}, subject="bench: raw rows for 2026-11-16",
                       idempotency_key="bench-2026-11-16-raw")
    print(json.dumps({"op_s": time.perf_counter() - t, "status": res.status}))


def defs_import() -> None:
    t = time.perf_counter()
    from fleet.defs.definitions import defs
    n = len(list(defs.resolve_all_asset_keys())) if hasattr(defs, "resolve_all_asset_keys") else -1
    print(json.dumps({"op_s": time.perf_counter() - t, "asset_keys": n}))


if __name__ == "__main__":
    globals()[sys.argv[1].replace("-", "_")](*sys.argv[2:])
