"""deep_phase: the demo's heavy source (shops) with its expensive phase (a detail page per shop) on vs off.
Both run `fleet.engine.runner.run_source` (worker, browser, spool, parquet) in a fresh process against the
demo sites. There is no goal: the ratio says what turning on ``--deep shops`` costs."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from bench.util import PY, ROOT, median, rnd, run_measured


def run(size: str, repeats: int) -> dict:  # one size: the demo's shops source
    from fleet.demo.sites import DemoSites
    latency_ms = 50
    tmp = Path(tempfile.mkdtemp(prefix="bench-deep-"))
    sites = DemoSites(latency_ms=latency_ms).start()
    try:
        runs: dict[str, list[dict]] = {"deep": [], "shallow": []}
        for i in range(repeats):
            for kind in ("deep", "shallow"):
                r = run_measured([PY, "-m", "bench.child", "deep-phase", str(tmp / f"{kind}{i}"),
                                  "1" if kind == "deep" else "0"], env={"FLEET_DEMO_URL": sites.url}, cwd=ROOT)
                r.update(json.loads(r["output"].strip().splitlines()[-1]))
                if r["status"] != "ok":
                    raise RuntimeError(f"shops ({kind}) ended {r['status']}:\n{r['output'][-3000:]}")
                runs[kind].append(r)
        dw, sw = median([r["op_s"] for r in runs["deep"]]), median([r["op_s"] for r in runs["shallow"]])
        return {"ratio": rnd(dw / sw), "goal": None, "ok": True, "latency_ms": latency_ms, "repeats": repeats,
                "deep_s": rnd(dw), "shallow_s": rnd(sw),
                "deep_pages": runs["deep"][0]["pages"], "shallow_pages": runs["shallow"][0]["pages"],
                "rows": runs["deep"][0]["rows"],
                "deep_cpu_s": rnd(median([r["cpu"] for r in runs["deep"]])),
                "shallow_cpu_s": rnd(median([r["cpu"] for r in runs["shallow"]]))}
    finally:
        sites.stop()
        shutil.rmtree(tmp, ignore_errors=True)
