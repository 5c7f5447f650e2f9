"""robots.txt, by the book (RFC 9309), with the standard library's ``urllib.robotparser``: fetched once per site
(scheme, host and port) per week, kept under ``FLEET_HOME/politeness/robots/<week>/``, and obeyed by every
request fleet/scraping/polite_route.py holds: a disallowed URL is not requested (the source fails as ``blocked``,
naming the rule), and a ``Crawl-delay`` (or ``Request-rate``) becomes the domain's minimum interval between them.

fleet's user-agent token is ``fleet``: a group for ``fleet`` applies, else the ``*`` group. A robots.txt answered
with 401 or 403 disallows everything; any other 4xx (none there) allows everything; a 5xx or no answer is
"unreachable", which the RFC reads as "disallow everything": the navigation fails as a transient error (retried),
and the next attempt asks again (only an answer is kept for the week).
"""
from __future__ import annotations

import asyncio
import fcntl
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote, unquote, urlparse, urlsplit, urlunparse
from urllib.robotparser import RobotFileParser

from fleet.errors import BlockedError, NavigationError

AGENT = "fleet"
FETCH_TIMEOUT_S = 10.0
MAX_BYTES = 512 * 1024  # RFC 9309: a crawler may stop reading after 500 KiB


def site_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an http(s) ``url``, else None (about:, data:, file: have no robots.txt)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1].lower()}"


def _fetch(site: str) -> dict:
    """``site``'s robots.txt as ``{"status": code, "text": body}``; raises OSError when there is no answer."""
    req = urllib.request.Request(site + "/robots.txt", headers={"User-Agent": f"Mozilla/5.0 (compatible; {AGENT})"})
    try:
        with urllib.request.urlopen(req, timeout=FETCH_TIMEOUT_S) as resp:
            return {"status": resp.status, "text": resp.read(MAX_BYTES).decode("utf-8", "replace")}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "text": ""}


def _delays(text: str) -> dict[str, float]:
    """Crawl-delay per group: ``fleet``'s and ``*``'s, in seconds, fractions too (``urllib.robotparser`` reads
    whole numbers only)."""
    found, agents, in_rules = {}, [], False
    for raw in text.splitlines():
        key, sep, value = raw.split("#", 1)[0].partition(":")
        key, value = key.strip().lower(), value.strip()
        if not sep:
            continue
        if key == "user-agent":
            if in_rules:
                agents, in_rules = [], False
            agents.append(AGENT if value.lower().split("/")[0] in AGENT and value != "*" and value else value)
            continue
        in_rules = True
        if key == "crawl-delay":
            try:
                delay = float(value)
            except ValueError:
                continue
            if 0 <= delay < 86400:
                found.update({a: delay for a in agents if a in (AGENT, "*")})
    return found


class SiteRules:
    """One site's robots.txt, as fleet reads it."""

    def __init__(self, site: str, record: dict):
        self.site, self.status = site, int(record["status"])
        self.parser = RobotFileParser(site + "/robots.txt")
        if self.status in (401, 403):
            self.parser.disallow_all = True
        elif self.status >= 400:
            self.parser.allow_all = True
        else:
            self.parser.parse(record.get("text", "").splitlines())
        self.delays = _delays(record.get("text", "")) if self.status < 400 else {}

    def rule_for(self, url: str) -> str | None:
        """None when fleet may fetch ``url``, else the rule that forbids it, as robots.txt writes it."""
        if self.parser.can_fetch(AGENT, url):
            return None
        if self.parser.disallow_all:
            return f"robots.txt answered HTTP {self.status}: everything is disallowed"
        parsed = urlparse(unquote(url))  # as RobotFileParser.can_fetch reads it
        path = quote(urlunparse(("", "", parsed.path, parsed.params, parsed.query, parsed.fragment))) or "/"
        entry = next((e for e in self.parser.entries if e.applies_to(AGENT)), self.parser.default_entry)
        line = next((ln for ln in (entry.rulelines if entry else []) if ln.applies_to(path)), None)
        if line is not None and not line.allowance:
            return f"Disallow: {line.path or '/'} (User-agent: {', '.join(entry.useragents)})"
        return "a rule of robots.txt"

    def min_interval_s(self) -> float:
        """The seconds robots.txt asks between requests: its Crawl-delay, or what its Request-rate comes to."""
        delay = float(self.parser.crawl_delay(AGENT) or self.delays.get(AGENT, self.delays.get("*", 0.0)))
        rate = self.parser.request_rate(AGENT)
        if rate and rate.requests:
            delay = max(delay, rate.seconds / rate.requests)
        return delay


class Robots:
    """An attempt's view of the week's robots.txt files, kept under ``root/<week>/`` (one file per site, fetched by
    the first attempt that needs it, under a lock, so once per site per week on this machine)."""

    def __init__(self, root: Path | str, week: str):
        self.folder = Path(root) / str(week)
        self._rules: dict[str, SiteRules] = {}

    def _load(self, site: str) -> SiteRules:
        if site in self._rules:
            return self._rules[site]
        name = site.replace("://", "_").replace(":", "_").replace("/", "_")
        path = self.folder / f"{name}.json"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            lock = open(self.folder / f"{name}.lock", "a+")
        except OSError:  # a folder this user may not write (made by another): asked for here, not kept
            lock = None
        try:
            if lock is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                record = _fetch(site)  # OSError: no answer, nothing kept
                if record["status"] < 500 and lock is not None:
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")
                    try:
                        tmp.write_text(json.dumps(record))
                        os.replace(tmp, path)
                    except OSError:
                        tmp.unlink(missing_ok=True)
        finally:
            if lock is not None:
                lock.close()
        if record["status"] >= 500:
            raise OSError(f"HTTP {record['status']}")
        self._rules[site] = SiteRules(site, record)
        return self._rules[site]

    async def check(self, url: str, source: str) -> float:
        """Raise ``BlockedError`` when robots.txt disallows ``url`` (naming the rule), a transient
        ``NavigationError`` when it cannot be had; else the minimum interval (s) it asks for ``url``'s site."""
        site = site_of(url)
        if site is None:
            return 0.0
        try:
            rules = await asyncio.to_thread(self._load, site)
        except OSError as exc:
            raise NavigationError(f"source {source}: {site}/robots.txt is unreachable ({exc}); by RFC 9309 nothing "
                                  f"of the site may be fetched until it answers", url=url, transient=True) from None
        rule = rules.rule_for(url)
        if rule:
            raise BlockedError(f"source {source}: blocked: {rule} in {site}/robots.txt forbids {url}; a scraper may "
                               f"set obey_robots = False with obey_robots_reason", url=url)
        return rules.min_interval_s()
