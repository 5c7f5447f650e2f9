"""Today's page for ``fleet doctor`` when the live site cannot be reached: the page a failed attempt of the source
kept as evidence (its ``page.html`` and URL, fleet/engine/evidence.py), newest first, as a HAR of that one document
that the engine and the doctor's browser replay offline."""
from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

from fleet.scraping.discovery import Source
from fleet.storage import store as keys

FAILED = ("failed", "timeout")


@dataclasses.dataclass
class StoredPage:
    week: str
    attempt: str
    url: str
    html: str


def _html(store, week: str, source: str, attempt: str, where: str) -> str | None:
    """The evidence's page.html: where its outcome says (a local store's path) or under the attempt's key (a
    remote store's copy, fleet/storage/s3.py)."""
    path = Path(where)
    if not where.startswith("s3://") and path.is_file():
        return path.read_text(encoding="utf-8", errors="replace")
    try:
        return store.local_copy(week, f"{keys.evidence_key(source)}/{attempt}/page.html").read_text(
            encoding="utf-8", errors="replace")
    except (FileNotFoundError, OSError):
        return None


def latest(source: Source) -> StoredPage | None:
    """The newest failed attempt of ``source`` in the host's store whose evidence holds a page of the site (one
    that failed before reaching it holds about:blank, which says nothing about the markup)."""
    from fleet.storage.open import host_store

    store = host_store()
    for week in sorted(store.weeks(), reverse=True):
        for attempt in reversed(keys.outcomes(store, week, source.name)):
            rec = keys.attempt_outcome(store, week, source.name, attempt)
            evidence = rec.get("evidence") or {}
            url = evidence.get("page_url") or ""
            if rec.get("status") in FAILED and evidence.get("html") and url.startswith(("http://", "https://")):
                html = _html(store, week, source.name, attempt, evidence["html"])
                if html:
                    return StoredPage(week, attempt, url, html)
    return None


def har(page: StoredPage, target: Path) -> Path:
    """A HAR (Playwright's zip form) holding ``page``'s document alone: replayed, every other request is aborted."""
    entry = {
        "startedDateTime": "1970-01-01T00:00:00.000Z", "time": 0, "_resourceType": "document",
        "request": {"method": "GET", "url": page.url, "httpVersion": "HTTP/1.1", "cookies": [], "headers": [],
                    "queryString": [], "headersSize": -1, "bodySize": 0},
        "response": {"status": 200, "statusText": "OK", "httpVersion": "HTTP/1.1", "cookies": [],
                     "headers": [{"name": "Content-Type", "value": "text/html; charset=utf-8"}],
                     "content": {"size": len(page.html.encode("utf-8")), "mimeType": "text/html; charset=utf-8",
                                 "text": page.html},
                     "redirectURL": "", "headersSize": -1, "bodySize": -1},
        "cache": {}, "timings": {"send": 0, "wait": 0, "receive": 0},
    }
    log = {"log": {"version": "1.2", "creator": {"name": "fleet doctor", "version": "1"}, "pages": [],
                   "entries": [entry]}}
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("har.har", json.dumps(log))
    return target
