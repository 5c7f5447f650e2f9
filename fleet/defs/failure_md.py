"""A failed source step shown where an operator looks first: the asset's own page (an observation of the failed
week, with the evidence of fleet/defs/evidence.py) as well as the run's step failure."""
from __future__ import annotations

from dagster import AssetObservation, MetadataValue

def failure_observation(key, week: str, category: str, error: str, metadata: dict) -> AssetObservation:
    """The failed week of ``key`` on the asset's page (Events): Dagster records no asset event for a failed step,
    so the page showed "Failed in <run>" and "No metadata found"."""
    first = (error or "").strip().splitlines()
    return AssetObservation(asset_key=key, partition=week,
                            description=f"[{category}] {first[0] if first else 'failed'}"[:500],
                            metadata={"fleet/category": category, "error": MetadataValue.text(error or ""),
                                      **metadata})
