"""A failed source step's evidence as Dagster metadata, shown where an operator looks first: the asset's own page
(an observation of the failed week) as well as the run's step failure."""
from __future__ import annotations

import base64
from pathlib import Path

from dagster import AssetObservation, MetadataValue

# Inline up to this size: a full-page screenshot is ~100 KB; a huge one stays a path on disk, not event-log bulk.
SCREENSHOT_INLINE_MAX = 1_000_000
HTML_SHOWN_MAX = 20_000


def _png(path: str | None) -> bytes | None:
    try:
        return Path(path).read_bytes() if path and Path(path).stat().st_size <= SCREENSHOT_INLINE_MAX else None
    except OSError:
        return None


def _text(path: str | None) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")[:HTML_SHOWN_MAX] if path else None
    except OSError:
        return None


def evidence_metadata(evidence: dict) -> dict:
    """``screenshot``, rendered inline as a markdown image (the UI's markdown allows ``data:`` images), and
    ``page_html``, the stored page as plain text: it is third-party content, so it is never handed to the operator's
    browser as HTML. The files' own locations stay in ``screenshot_file``/``html_file``."""
    meta = {}
    shot = _png(evidence.get("screenshot"))
    if shot:
        meta["screenshot"] = MetadataValue.md(
            f"![screenshot of the page when it failed](data:image/png;base64,{base64.b64encode(shot).decode()})")
    html = _text(evidence.get("html"))
    if html is not None:
        meta["page_html"] = MetadataValue.text(html)
    for name, key in (("screenshot_file", "screenshot"), ("html_file", "html")):
        if evidence.get(key):
            meta[name] = MetadataValue.path(evidence[key])
    if evidence.get("page_url"):
        meta["page_url"] = MetadataValue.text(evidence["page_url"])
    return meta


def failure_observation(key, week: str, category: str, error: str, metadata: dict) -> AssetObservation:
    """The failed week of ``key`` on the asset's page (Events): Dagster records no asset event for a failed step,
    so the page showed "Failed in <run>" and "No metadata found"."""
    first = (error or "").strip().splitlines()
    return AssetObservation(asset_key=key, partition=week,
                            description=f"[{category}] {first[0] if first else 'failed'}"[:500],
                            metadata={"fleet/category": category, "error": MetadataValue.text(error or ""),
                                      **metadata})
