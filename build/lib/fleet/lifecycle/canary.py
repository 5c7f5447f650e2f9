"""`fleet canary`: one live page per source, through the scraper's own first navigation and first rows, nothing
committed. Meant to run daily (cron, or the daemon's ``fleet_canary_daily`` schedule, off by default): a source whose
canary starts failing raises one alert with its evidence that day; a pass lifts a quarantine."""
from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path

from fleet.lifecycle import quarantine
from fleet.lifecycle.replay import Checked, attempt
from fleet.engine.spec import Trial
from fleet.scraping.discovery import Source
from fleet.storage.store import ArtifactStore
from fleet.weeks import last_complete_week, parse_week
from fleet.weeks import today as today_utc

FIRST_ROWS = 1


def state_key(source: str) -> str:
    return f"lifecycle/{source}.canary.json"


def evidence_key(source: str, name: str) -> str:
    return f"evidence/canary/{source}/{name}"


def _last_state(store: ArtifactStore, source: str) -> dict:
    for w in sorted(store.weeks(), reverse=True):
        rec = store.read_json(w, state_key(source))
        if rec:
            return rec
    return {}


def check(sources: list[Source], store: ArtifactStore, home: Path, webhook: str | None = None,
          today: dt.date | None = None) -> list[Checked]:
    """Each source's canary; results and evidence are kept in the store under the current week, and a source that
    passed (or was never checked) before and fails now raises one alert."""
    from fleet.quality import alerts as alerting
    from fleet.quality.checks import last_good_week

    today = today or today_utc()
    week = last_complete_week(today).isoformat()        # the week the scraper is asked for, as in a weekly run
    here = parse_week(today).isoformat()                # the week the records are kept in
    out, found = [], []
    for src in sources:
        before = _last_state(store, src.name)
        with tempfile.TemporaryDirectory(prefix="fleet-canary-") as tmp:
            got = attempt(src, week, Path(tmp), Trial(first_rows=FIRST_ROWS))
            ok = not got["error"] and got["rows"] > 0
            evidence = {}  # every file of the attempt's evidence (screenshot, page.html, error.txt), by its name
            folder = got["evidence_dir"]
            for local in sorted(folder.iterdir()) if folder.is_dir() else []:
                name = next((k for k, v in got["evidence"].items() if Path(v).name == local.name), local.stem)
                evidence[name] = str(store.write_bytes(here, evidence_key(src.name, local.name), local.read_bytes()))
        error = None if ok else (got["error"] or "no rows from its first page")
        store.write_json(here, state_key(src.name), {"source": src.name, "day": today.isoformat(), "ok": ok,
                                                     "category": None if ok else got["category"] or "source",
                                                     "error": error, "url": got.get("url"), "evidence": evidence})
        detail = ""
        if ok and quarantine.state(store, src.name, src.quarantine_after):
            quarantine.lift(store, src.name, by="fleet canary")
            detail = "passed live: quarantine lifted"
        if not ok:
            detail = error.splitlines()[0][:200]
            if before.get("ok", True):
                url = f" at {got['url']}" if got.get("url") else ""
                found.append(alerting.Alert(
                    source=src.name, week=today.isoformat(), check="canary", severity="ERROR",
                    category=got["category"] or "source",
                    message=f"canary: source {src.name} failed live on {today.isoformat()}{url}: {detail}",
                    evidence={**evidence, "error": error, **({"url": got["url"]} if got.get("url") else {})},
                    last_good_week=last_good_week(store, src.name, week), run_id=None))
        out.append(Checked(src.name, "pass" if ok else "fail", got["rows"], got["seconds"], detail))
    alerting.deliver(found, home, webhook=webhook, owners={s.name: s.owner for s in sources})
    return out
