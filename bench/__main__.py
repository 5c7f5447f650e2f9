"""python -m bench [--quick | --smoke] [--out results.json] [--only NAME,...] [--repeats N]

Sizes: full (the default, what BENCHMARKS.md reports), quick (smaller), smoke (the smallest run of each bench, one
pair: it shows every bench still runs, its numbers mean nothing; fleet_tests/test_bench.py runs it)."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback

import polars  # noqa: F401  (sets _RJEM_MALLOC_CONF when first imported: the process's setting, not a bench's)

from bench.util import process_state, restore

ORDER = ["consolidate", "commit", "many_sources", "deep_phase", "fleet_overhead", "crash_recovery", "scale_out",
         "trace_cost"]
MODULES = {name: f"bench.{name}" for name in ORDER}
# (quick, full) pairs of runs per benchmark; smoke: one
DEFAULT_REPEATS = {"consolidate": (5, 5), "commit": (3, 3), "many_sources": (3, 5), "deep_phase": (2, 3),
                   "fleet_overhead": (2, 3), "crash_recovery": (2, 3),
                   "scale_out": (1, 1), "trace_cost": (2, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller sizes (scale_out: its one size)")
    size.add_argument("--smoke", action="store_true", help="the smallest size, once: does every bench still run")
    ap.add_argument("--out", default="results.json")
    ap.add_argument("--only", default="", help="comma-separated benchmark names: " + ",".join(ORDER))
    ap.add_argument("--repeats", type=int, default=None, help="pairs of (fleet, baseline) runs per benchmark")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or ORDER
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(ORDER)}")
    results = {}
    for name in names:
        size = "smoke" if args.smoke else "quick" if args.quick else "full"
        repeats = args.repeats or (1 if args.smoke else DEFAULT_REPEATS[name][0 if args.quick else 1])
        t = time.perf_counter()
        print(f"[bench] {name} ({size}, {repeats} repeats) ...", file=sys.stderr, flush=True)
        res = run_one(name, size, repeats)
        res["bench_seconds"] = round(time.perf_counter() - t, 1)
        results[name] = res
        print(f"[bench] {name} done in {res['bench_seconds']}s", file=sys.stderr, flush=True)
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)
    print(table(results))
    return 0


def run_one(name: str, size: str, repeats: int) -> dict:
    """Benchmark ``name``'s result, or its error (one broken benchmark does not hide the others). Each bench must
    leave the process as it found it (bench.util.process_state): what one left behind is put back before the next
    starts, and fails the bench that left it, naming it, so that it is fixed where it is set."""
    before = process_state()
    try:
        res = importlib.import_module(MODULES[name]).run(size, repeats)
    except Exception as exc:
        traceback.print_exc()
        res = {"ratio": None, "goal": None, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    finally:
        left = restore(before)
    if left:
        res["ok"] = False
        res["error"] = "; ".join([*filter(None, [res.get("error")]),
                                  f"it left behind (put back since): {', '.join(left)}"])
    return res


def _extra(name: str, r: dict) -> str:
    if "error" in r:
        return "ERROR " + r["error"].splitlines()[0][:100]
    keys = {
        "consolidate": ["rss_ratio", "fleet_wall_s", "baseline_wall_s", "fleet_peak_rss_mb", "baseline_peak_rss_mb"],
        "commit": ["fleet_wall_s", "baseline_wall_s", "fleet_peak_rss_mb", "baseline_peak_rss_mb"],
        "many_sources": ["seconds", "zero_sources_s", "cpu_s", "first_s", "asset_keys"],
        "fleet_overhead": ["fleet_wall_s", "baseline_wall_s", "cpu_per_source_s"],
        "crash_recovery": ["crash_wall_s", "clean_wall_s", "crashing", "sources"],
        "deep_phase": ["deep_s", "shallow_s", "deep_pages", "shallow_pages"],
        "scale_out": ["speedup", "one_worker", "two_workers"],
        "trace_cost": ["traced_wall_s", "off_wall_s", "traced_cpu_s", "off_cpu_s"],
    }.get(name, [])
    return ", ".join(f"{k}={r[k]}" for k in keys if k in r)


def table(results: dict) -> str:
    rows = [("benchmark", "ratio", "goal", "ok", "details")]
    for name, r in results.items():
        rows.append((name, str(r.get("ratio")), str(r.get("goal")), "yes" if r.get("ok") else "NO", _extra(name, r)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + " | " + row[4] + " |")
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|---|")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
