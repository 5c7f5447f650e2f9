"""A failed source's evidence as raw-asset metadata, shown where an operator looks first, whichever host scraped it.

Inline: the screenshot as a markdown image (the UI's markdown allows ``data:`` images) and the page's HTML as
plain text: it is third-party content, never handed to the operator's browser as HTML. Linked: for a local store
the files' paths (``screenshot_file``, ``html_file``, ``trace_file``, ``evidence_dir``); for a remote one, presigned
https links another machine's browser can open (``screenshot_url``, ``trace_url``; ``html_url`` and ``error_url``
served as text/plain), next to the objects' s3:// URLs (``*_object``). ``debug``: the command that opens the
attempt's Playwright trace offline (``fleet debug SOURCE --week W``)."""
from __future__ import annotations

import base64

from dagster import AssetObservation, MetadataValue

from fleet.storage import store as keys

LINK_TYPES = {"screenshot": "image/png", "html": "text/plain; charset=utf-8", "error": "text/plain; charset=utf-8",
              "stack": "text/plain; charset=utf-8", "trace": "application/zip"}
# Inline up to this size: a full-page screenshot is ~100 KB; a huge one stays a link, not event-log bulk.
SCREENSHOT_INLINE_MAX = 1_000_000
HTML_SHOWN_MAX = 20_000


def _read(store, location: str | None, limit: int | None = None) -> bytes | None:
    if not location:
        return None
    try:
        data = store.read_location(location)
    except (OSError, ValueError):
        return None
    return None if limit is not None and len(data) > limit else data


def inline(store, evidence: dict) -> dict:
    meta = {}
    shot = _read(store, evidence.get("screenshot"), SCREENSHOT_INLINE_MAX)
    if shot:
        meta["screenshot"] = MetadataValue.md(
            f"![screenshot of the page when it failed](data:image/png;base64,{base64.b64encode(shot).decode()})")
    html = _read(store, evidence.get("html"))
    if html is not None:
        meta["page_html"] = MetadataValue.text(html.decode("utf-8", errors="replace")[:HTML_SHOWN_MAX])
    if evidence.get("page_url"):
        meta["page_url"] = MetadataValue.text(evidence["page_url"])
    return meta


def links(store, week: str, source: str, evidence: dict) -> dict:
    if not any(str(v or "").startswith("s3://") for v in evidence.values()):
        out = {f"{what}_file": MetadataValue.path(evidence[what]) for what in ("screenshot", "html", "trace")
               if evidence.get(what)}
        return {**out, "evidence_dir": MetadataValue.path(store.location(week, keys.evidence_key(source)))}
    out = {}
    for what, content_type in LINK_TYPES.items():
        where = evidence.get(what)
        if not where:
            continue
        link = store.sign(where, content_type)
        out[f"{what}_url"] = MetadataValue.url(link) if link else MetadataValue.text(where)
        out[f"{what}_object"] = MetadataValue.text(where)
    return out


def evidence_metadata(store, week: str, source: str, evidence: dict) -> dict:
    """The metadata of a failure's ``evidence`` (what the runner stored: name -> location)."""
    debug = {"debug": MetadataValue.text(f"fleet debug {source} --week {week}")} if evidence.get("trace") else {}
    return {**links(store, week, source, evidence), **inline(store, evidence), **debug}


def failure_observation(key, week: str, category: str, error: str, metadata: dict) -> AssetObservation:
    """The failed week of ``key`` on the asset's page (Events): Dagster records no asset event for a failed step,
    so the page showed "Failed in <run>" and "No metadata found"."""
    first = (error or "").strip().splitlines()
    return AssetObservation(asset_key=key, partition=week,
                            description=f"[{category}] {first[0] if first else 'failed'}"[:500],
                            metadata={"fleet/category": category, "error": MetadataValue.text(error or ""),
                                      **metadata})
