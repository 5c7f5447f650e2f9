"""Run one source outside the weekly pipeline (live, recording, or replaying a fixture) in a child process that is
killed, with its browser, at the source's own timeout; nothing is stored in the artifact store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from fleet.config import chromium_path
from fleet.scraping import procs
from fleet.scraping.discovery import Source

# Playwright's driver and Chromium start within this, before the source's own clock matters
STARTUP_S = 60


def drive(source: Source, week: str, *, record_har: Path | None = None, replay_har: Path | None = None,
          env: dict | None = None, first_rows: int | None = None, timeout_s: float | None = None,
          evidence_dir: Path | None = None) -> dict:
    """The result of one attempt of ``source`` (see fleet/lifecycle/harness.py), with ``seconds`` and, when it was
    killed at its limit, ``error`` saying so."""
    if source.broken:
        return {"rows": 0, "fill": {}, "error": source.error, "missing": [], "seconds": 0.0}
    timeout = float(timeout_s or source.timeout_s)
    with tempfile.TemporaryDirectory(prefix=f"fleet-{source.name}-") as tmp:
        spec = {"source": source.name, "module_path": str(source.module_path), "class_name": source.class_name,
                "week": week, "run_id": f"lifecycle-{uuid.uuid4().hex[:8]}", "timeout_s": timeout,
                "chromium": chromium_path(), "work_dir": tmp, "result_path": str(Path(tmp) / "result.json"),
                "record_har": str(record_har) if record_har else None,
                "replay_har": str(replay_har) if replay_har else None, "first_rows": first_rows,
                "evidence_dir": str(evidence_dir) if evidence_dir else None}
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        started = time.monotonic()
        with open(Path(tmp) / "output.log", "wb") as out:
            child = subprocess.Popen([sys.executable, "-m", "fleet.lifecycle.harness", str(spec_path)],
                                     env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            try:
                child.wait(timeout=timeout + STARTUP_S)
            except subprocess.TimeoutExpired:
                procs.kill_tree(child.pid)
                child.wait()
        seconds = round(time.monotonic() - started, 1)
        result_path = Path(spec["result_path"])
        if result_path.exists():
            result = json.loads(result_path.read_text())
        else:
            tail = (Path(tmp) / "output.log").read_text(errors="replace").strip().splitlines()[-1:]
            why = (f"timed out after {timeout:g}s (timeout_s)" if child.returncode == -9
                   else f"its process ended ({child.returncode}) without a result: {' '.join(tail)}")
            result = {"rows": 0, "fill": {}, "error": why, "missing": []}
        result["seconds"] = seconds
        if result.get("infra"):
            result["error"] = f"[infra] {result['infra']}"
        return result
