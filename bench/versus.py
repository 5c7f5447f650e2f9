"""python -m bench.versus OTHER_CHECKOUT [--only NAMES] [--rounds N]: this checkout's fleet against another's
(for example today's main), side by side in one invocation.

Each round runs ``python -m bench --only NAMES --repeats 1`` in the other checkout, with its own virtualenv
(``OTHER/.venv``), then in this one, so both meet the same machine load; each of those runs measures its own bare
baseline beside it. Prints the medians per benchmark and checkout, and the lines of Python in each ``fleet/``."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.util import ROOT, median, rnd

FIELDS = {"fleet_overhead": ["ratio", "cpu_per_source_s", "fleet_wall_s", "baseline_wall_s", "fleet_cpu_s",
                             "baseline_cpu_s", "fleet_peak_rss_mb"],
          "crash_recovery": ["ratio", "goal", "crash_wall_s", "clean_wall_s"],
          "many_sources": ["seconds", "zero_sources_s", "cpu_s", "first_s", "peak_rss_mb"]}


def fleet_lines(checkout: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (checkout / "fleet").rglob("*.py"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.versus")
    ap.add_argument("other", type=Path, help="another checkout of fleet, with its own .venv")
    ap.add_argument("--only", default="fleet_overhead,crash_recovery,many_sources")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="versus.json")
    args = ap.parse_args(argv)
    sides = {"other": args.other.resolve(), "this": ROOT}
    results = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="bench-versus-") as tmp:
        for i in range(args.rounds):
            for side, checkout in sides.items():
                out = Path(tmp) / f"{side}{i}.json"
                print(f"[versus] round {i + 1}/{args.rounds}: {side} ({checkout})", file=sys.stderr, flush=True)
                venv = checkout / ".venv" / "bin" / "python"
                subprocess.run([str(venv) if venv.exists() or checkout != ROOT else sys.executable, "-m", "bench", "--only", args.only,
                                "--repeats", "1", "--out", str(out)], cwd=checkout, check=True,
                               # each side's own fleet in its commands too (`fleet run`), whatever PYTHONPATH says
                               env={**os.environ, "PYTHONPATH": str(checkout)})
                results[side].append(json.loads(out.read_text()))
    summary = {"lines_in_fleet": {side: fleet_lines(c) for side, c in sides.items()}, "rounds": args.rounds}
    for name in args.only.split(","):
        summary[name] = {}
        for side in sides:
            runs = [r[name] for r in results[side] if r.get(name, {}).get("ratio") is not None]
            summary[name][side] = {f: rnd(median([r[f] for r in runs])) for f in FIELDS.get(name, ["ratio"])
                                   if runs and all(f in r for r in runs)}
            summary[name][side]["every_ratio"] = [r.get(name, {}).get("ratio") for r in results[side]]
    Path(args.out).write_text(json.dumps({"summary": summary, "runs": results}, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
