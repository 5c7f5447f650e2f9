"""Politeness on every request a source's page makes to the sites it scrapes, however it was started (``ctx.goto``,
``page.goto``, a click, a form, a script): one route on the browser context, installed by the engine as it opens
the context (fleet/engine/attempt.py), holds robots.txt, the domain's bounds and its 429 back-off
(fleet/scraping/politeness.py) for them.

What counts as a request: every document (a navigation; a main frame's makes its site one the source scrapes), and
every subframe's document, xhr and fetch to a site the source scrapes. A page's own images, styles, scripts and
fonts, and third parties' requests, pass untouched: they are what a browser loads to show a page the site chose to
serve, and spacing each of them by the domain's interval would make one page take many intervals.

A disallowed request is never sent (the route aborts it) and the source fails as ``blocked`` naming the rule, even
when the scraper catches the error its click or goto sees. Playwright does not route a redirect's later hops (its
documentation; its Chromium network manager continues them itself, and a fulfilled 3xx is followed unrouted too, as
measured): a hop is held in its first request's slot, and checked against robots.txt as the browser sends it; a
disallowed one fails the source as ``blocked``, saying it was already sent.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import urlsplit

from fleet.errors import BlockedError, FleetError
from fleet.scraping.blocked import retry_after_s
from fleet.scraping.robots import site_of

COUNTED = ("xhr", "fetch")  # besides documents, on the sites a source scrapes
# A slot a request holds is freed when its response has been read, or after this long whatever it does: a
# long-poll or a stream would otherwise keep its domain's other requests waiting for ever.
HOLD_MAX_S = 30.0
REDIRECTS = (301, 302, 303, 307, 308)
log = logging.getLogger("fleet.politeness")


class PoliteRoute:
    """The route of one browser context, over one attempt's :class:`Politeness`."""

    def __init__(self, politeness):
        self.polite = politeness
        self.sites: set[str] = set()  # scheme://host:port of the main frames' navigations: the sites scraped
        self.refusal: FleetError | None = None  # the first request refused: the source fails with it
        self.refused = asyncio.Event()
        self._root: dict = {}  # a routed request, or a redirect hop of one -> the routed request holding the slot
        self._release: dict = {}  # a routed request -> frees its slot (once)
        self._timers: dict = {}  # a routed request -> its HOLD_MAX_S timer
        self._redirecting: set = set()  # requests answered with a redirect the browser follows
        self._ahead: dict[str, list] = {}  # host -> slots ctx.goto took before its page.goto
        self._tasks: set[asyncio.Task] = set()

    async def install(self, context) -> None:
        await context.route("**/*", self._route)
        context.on("request", self._on_request)
        context.on("response", self._on_response)
        context.on("requestfinished", self._on_done)
        context.on("requestfailed", self._on_done)
        self.context = context
        self.polite.route = self

    def guards(self, page) -> bool:
        return getattr(self, "context", None) is page.context

    # -- ctx.goto ---------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def ahead(self, url: str):
        """``ctx.goto``'s slot, taken before its ``page.goto`` (whose timeout is then the page's own, not the wait
        for the domain); the route gives it to the navigation's first request to that host."""
        host = urlsplit(url).hostname or ""
        entry = [await self.polite.hold(url)]
        self._ahead.setdefault(host, []).append(entry)
        try:
            yield
        finally:
            waiting = self._ahead.get(host, [])
            if entry in waiting:  # no request took it (a failed or same-document navigation)
                waiting.remove(entry)
                await entry[0]()
            await self.settled()

    async def settled(self) -> None:
        """Wait for the responses' notes (429s) to be recorded: the next request's bounds read them."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def raise_refusal(self) -> None:
        if self.refusal is not None:
            raise self.refusal

    # -- the route and the context's events ------------------------------------------------------------------

    def _counted(self, request) -> bool:
        site = site_of(request.url)
        if site is None:
            return False
        if request.resource_type == "document":
            with contextlib.suppress(Exception):  # a worker's request has no frame
                if request.frame.parent_frame is None:  # a page's own navigation: its site is scraped
                    self.sites.add(site)
        elif request.resource_type not in COUNTED:
            return False
        return site in self.sites

    async def _route(self, route) -> None:
        request = route.request
        if not self._counted(request):
            await route.fallback()
            return
        try:
            await self.polite.allowed(request.url)  # robots.txt: BlockedError, or unreachable: NavigationError
        except FleetError as exc:
            self._refuse(exc, request)
            await route.abort("blockedbyclient")
            return
        waiting = self._ahead.get(urlsplit(request.url).hostname or "")
        release = waiting.pop(0)[0] if waiting and request.resource_type == "document" else None
        if release is None:
            release = await self.polite.hold(request.url)
        self._hold(request, release)
        try:
            await route.fallback()
        except Exception:  # the page or context closed meanwhile: no request was sent
            await self._free(request)
            raise

    def _hold(self, request, release) -> None:
        freed = False

        async def once():
            nonlocal freed
            if not freed:
                freed = True
                await release()
        self._root[request] = request
        self._release[request] = once
        self._timers[request] = asyncio.get_running_loop().call_later(HOLD_MAX_S,
                                                                      lambda: self._spawn(self._free(request)))

    async def _free(self, root) -> None:
        timer = self._timers.pop(root, None)
        if timer is not None:
            timer.cancel()
        release = self._release.pop(root, None)
        if release is not None:
            await release()

    def _on_request(self, request) -> None:
        """A redirect's later hop, which no route sees: held in its chain's slot, checked against robots.txt."""
        before = request.redirected_from
        root = self._root.get(before) if before is not None else None
        if root is None:
            return
        self._root[request] = root
        self._spawn(self._check_hop(request))

    async def _check_hop(self, request) -> None:
        try:
            await self.polite.allowed(request.url)
        except FleetError as exc:
            self._refuse(exc, request, sent=True)

    def _on_response(self, response) -> None:
        request = response.request
        if request not in self._root:
            return
        if response.status in REDIRECTS and response.headers.get("location"):
            self._redirecting.add(request)
        self._spawn(self.polite.note(request.url, response.status, retry_after_s(response.headers.get("retry-after"))))

    def _on_done(self, request) -> None:
        root = self._root.get(request)
        if root is None:
            return
        if request in self._redirecting:  # its next hop goes on in the same slot (its "request" comes after this)
            self._redirecting.discard(request)
            return
        for hop in [r for r, of in self._root.items() if of is root]:
            del self._root[hop]
        self._spawn(self._free(root))

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _refuse(self, exc: FleetError, request, sent: bool = False) -> None:
        if sent:  # the text names the rule as ctx.goto's refusal does, and says this one was not stopped
            exc = BlockedError(f"{exc} (a redirect from {request.redirected_from.url}, which the browser follows "
                               f"without asking fleet: it was sent)", url=request.url)
        log.warning("[%s] politeness: refused %s %s: %s", self.polite.source, request.resource_type, request.url, exc)
        if self.refusal is None:
            self.refusal = exc
            self.refused.set()

    async def close(self) -> None:
        """Free every slot still held (the context is closing)."""
        for root in list(self._release):
            await self._free(root)
        await self.settled()
