"""commit: fleet.publish.commit_files of one large random file to a fresh local bare remote with LFS,
vs a plain shell sequence in a fresh clone (clone, git lfs track, add, commit, git lfs push, git push)."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from bench.util import PY, ROOT, median, rnd, run_measured

BASELINE_SH = r"""
set -e
remote="$1"; work="$2"; src="$3"
git init -q --bare --initial-branch=main "$remote"
git clone -q "$remote" "$work" 2>/dev/null
cd "$work"
git lfs install --local >/dev/null
mkdir -p data/2026-11-16
(cd data && git lfs track "*.parquet" >/dev/null)
cp "$src" data/2026-11-16/raw.parquet
git add data/.gitattributes data/2026-11-16/raw.parquet
git -c user.name=bench -c user.email=bench@localhost commit -q -m "bench: raw rows for 2026-11-16"
git lfs push origin main >/dev/null 2>&1
git push -q origin main
"""

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}


def _random_file(path: Path, size: int) -> None:
    chunk = 8 << 20
    with open(path, "wb") as fh:
        fh.write(b"PAR1")
        left = size - 8
        while left > 0:
            n = min(chunk, left)
            fh.write(os.urandom(n))
            left -= n
        fh.write(b"PAR1")


def run(size_name: str, repeats: int) -> dict:
    size = {"smoke": 4 << 20, "quick": 200 << 20, "full": 1 << 30}[size_name]
    tmp = Path(tempfile.mkdtemp(prefix="bench-commit-"))
    try:
        src = tmp / "raw.parquet"
        _random_file(src, size)
        script = tmp / "baseline.sh"
        script.write_text(BASELINE_SH)
        fleet_runs, base_runs = [], []
        for i in range(repeats):
            d = tmp / f"f{i}"
            r = run_measured([PY, "-m", "bench.child", "commit-fleet", str(d / "remote.git"), str(d / "clone"), str(src)],
                             cwd=ROOT, env=GIT_ENV)
            info = json.loads(r["output"].strip().splitlines()[-1])
            assert info["status"] == "committed", info
            r["op_s"] = info["op_s"]
            fleet_runs.append(r)
            shutil.rmtree(d)
            d = tmp / f"b{i}"
            base_runs.append(run_measured(["bash", str(script), str(d / "remote.git"), str(d / "clone"), str(src)],
                                          env=GIT_ENV))
            shutil.rmtree(d)
        fw, bw = median([r["wall"] for r in fleet_runs]), median([r["wall"] for r in base_runs])
        frss = median([r["peak_rss_mb"] for r in fleet_runs])
        ratio = fw / bw
        return {
            "ratio": rnd(ratio), "goal": 1.2, "ok": ratio <= 1.2 and frss <= 200,
            "fleet_peak_rss_mb": rnd(frss, 1), "rss_goal_mb": 200,
            "baseline_peak_rss_mb": rnd(median([r["peak_rss_mb"] for r in base_runs]), 1),
            # ru_maxrss of the same runs: floored at the bench's own RSS when it started them (bench/util.py)
            "fleet_ru_maxrss_mb": rnd(median([r["ru_maxrss_mb"] for r in fleet_runs]), 1),
            "file_mb": size >> 20, "repeats": repeats,
            "fleet_wall_s": rnd(fw), "baseline_wall_s": rnd(bw),
            "fleet_op_s": rnd(median([r["op_s"] for r in fleet_runs])),
            "fleet_cpu_s": rnd(median([r["cpu"] for r in fleet_runs])),
            "baseline_cpu_s": rnd(median([r["cpu"] for r in base_runs])),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
