"""fleet: a weekly fleet of Playwright scrapers as a Dagster asset graph, committed to a Git-LFS data repo.

Public API for scraper authors: ``Scraper``, ``ScrapeContext``, ``RetryPolicy``, ``retry_async``, ``NavigationError``,
and ``site_url`` (a path on the demo sites, whose address fleet passes in as FLEET_DEMO_URL), and
``BlockedError`` (raise it when a page turns the scraper away).
They are imported on first use (PEP 562), so a process that needs only part of fleet, such as the commit
loop, does not pay for importing polars.
"""
from fleet.errors import BadRowError, BlockedError, NavigationError, ScraperDefinitionError

__all__ = [
    "Scraper", "ScrapeContext", "RetryPolicy", "retry_async", "retry_sync",
    "NavigationError", "BlockedError", "BadRowError", "ScraperDefinitionError", "site_url",
]
_LAZY = {"Scraper": "fleet.scraping.contract", "ScrapeContext": "fleet.scraping.contract",
         "RetryPolicy": "fleet.scraping.retry", "retry_async": "fleet.scraping.retry",
         "retry_sync": "fleet.scraping.retry", "site_url": "fleet.demo.sites"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fleet' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
