"""A failed source's evidence as raw-asset metadata the UI can open, whichever host scraped it: local paths for a
local store; for a remote one, presigned https links (the page's HTML served as text/plain, never rendered as a
page in the operator's browser) next to the objects' s3:// URLs."""
from dagster import MetadataValue

from fleet.storage import store as keys

LINK_TYPES = {"screenshot": "image/png", "html": "text/plain; charset=utf-8", "error": "text/plain; charset=utf-8",
              "stack": "text/plain; charset=utf-8"}


def _md_path(p):
    return MetadataValue.path(p) if p else MetadataValue.text("-")


def evidence_metadata(store, week: str, source: str, evidence: dict) -> dict:
    shown = {"screenshot": evidence.get("screenshot"), "html": evidence.get("html")}
    if not any(str(v or "").startswith("s3://") for v in evidence.values()):
        return {**{k: _md_path(v) for k, v in shown.items()},
                "evidence_dir": _md_path(store.location(week, keys.evidence_key(source)))}
    out = {}
    for what, content_type in LINK_TYPES.items():
        where = evidence.get(what)
        if not where:
            continue
        link = store.sign(where, content_type)
        out[what] = MetadataValue.url(link) if link else MetadataValue.text(where)
        out[f"{what}_object"] = MetadataValue.text(where)
    for what in shown:
        out.setdefault(what, MetadataValue.text("-"))
    return out
