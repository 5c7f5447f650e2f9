"""Errors fleet raises, each naming the source and what is wrong."""
import re

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")


def without_credentials(text: object) -> str:
    """``text`` with the user and password of every URL in it replaced by ``***``: a broker, database or remote
    URL may carry them, and a message must not."""
    return _URL_USERINFO.sub(r"\1***@", str(text))


class FleetError(Exception):
    """Base class for fleet's own errors."""


class ScraperDefinitionError(FleetError):
    """A scraper class or module is malformed (bad name, schema, key, import error)."""


class BadRowError(FleetError):
    """A scraped row does not match the scraper's schema or key."""


class NavigationError(FleetError):
    """A page could not be loaded (HTTP error status or network failure)."""

    def __init__(self, message: str, url: str, status: int | None = None, transient: bool = False,
                 retry_after: float | None = None):
        super().__init__(message)
        self.url = url
        self.status = status
        self.transient = transient
        self.retry_after = retry_after  # seconds the server asked to wait (Retry-After), honoured by the retries


class CommitError(FleetError):
    """The data could not be landed on the remote branch."""


class BlockedError(NavigationError):
    """The site said "go away": HTTP 403, a 429 whose wait does not fit the source's time, or a captcha or
    bot-check page. Classified ``blocked``: not the scraper's fault, and not re-executed within the run."""
