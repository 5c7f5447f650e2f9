"""fleet: a weekly fleet of Playwright scrapers as a Dagster asset graph, committed to a Git-LFS data repo.

Public API for scraper authors: ``Scraper``, ``ScrapeContext``, ``RetryPolicy``, ``retry_async``, ``NavigationError``.
"""
from fleet.errors import BadRowError, NavigationError, ScraperDefinitionError
from fleet.scraping.contract import ScrapeContext, Scraper
from fleet.scraping.retry import RetryPolicy, retry_async, retry_sync

__all__ = [
    "Scraper", "ScrapeContext", "RetryPolicy", "retry_async", "retry_sync",
    "NavigationError", "BadRowError", "ScraperDefinitionError",
]
