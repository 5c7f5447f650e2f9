"""Playwright's Python client on a WebSocket to Playwright's browser server, with no Node.js driver in this process.

``browser_type.connect(endpoint)`` starts a Node.js driver in the calling process and relays every message
through it: the client speaks to its driver over a pipe, and the driver speaks to the server. With the shared
browser (``FLEET_BROWSER=shared``, fleet/scraping/browser.py) that is one more Node.js process per worker, and
every page's traffic crosses two of them. Measured on the 2-core machine of BENCHMARKS.md (a temporary script:
10 processes of 4 sources × 10 pages of a local site at 1 s of latency, whole process tree): a driver and a
Chromium per process 35.9-39.6 CPU-s; one browser server, each process on a WebSocket of its own and no driver
26.3-29.7 CPU-s.

:func:`connect` does what the driver's ``connect`` does on its side: it opens the WebSocket and runs the
client's protocol ``Connection`` on it. The server gives this connection its browser (``preLaunchedBrowser``)
and only the contexts the connection creates, and closes those when the connection drops. Everything a scraper
uses works as with a driver: pages, screenshots, HTML, routes. What needs the driver's local utilities does
not: tracing to a zip and HAR files (``connection.local_utils()`` is None), which fleet does not use.

The ``Connection`` is not a public API of Playwright. :func:`available` checks that this Playwright has the
parts used here; where it does not, the worker connects through a driver as before (worker.py).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json

OPEN_TIMEOUT_S = 60.0


@functools.cache
def available() -> bool:
    """Whether this Playwright's client can run on a WebSocket of ours (the parts of ``playwright._impl`` used
    below exist with the signatures they have in 1.65)."""
    try:
        from websockets.asyncio.client import connect  # websockets >= 14; older ones take other arguments
        from playwright._impl.browser import Browser
        from playwright._impl.connection import Connection
        from playwright._impl.errors import Error  # noqa: F401
        from playwright._impl.events import Events  # noqa: F401
        from playwright._impl.utils.tasks import wait_for_next_task  # noqa: F401
        from playwright.async_api._generated import mapping  # noqa: F401
    except ImportError:
        return False
    params = list(inspect.signature(Connection.__init__).parameters)
    return ("proxy" in inspect.signature(connect).parameters and params[1:3] == ["loop", "local_utils"]
            and hasattr(Connection, "mark_as_remote") and hasattr(Connection, "initialize_playwright")
            and hasattr(Browser, "_connect_to_browser_type") and hasattr(Browser, "_did_close"))


def _user_agent() -> str:
    # The server refuses a client whose "Playwright/X.Y" differs from its own version, as it refuses a driver's.
    try:
        from playwright._repo_version import version
    except ImportError:
        return "fleet"
    return f"Playwright/{version} (python; fleet)"


async def connect(endpoint: str, *, timeout_s: float = OPEN_TIMEOUT_S):
    """A ``playwright.async_api.Browser`` on the browser server at ``endpoint`` (``ws://...``). Closing it, or the
    server dropping the connection, ends the connection: the browser emits "disconnected", and pending calls fail
    with a ``TargetClosedError``."""
    from playwright._impl.browser import Browser
    from playwright._impl.connection import Connection
    from playwright._impl.errors import Error
    from playwright._impl.events import Events
    from playwright._impl.utils.tasks import wait_for_next_task
    from playwright.async_api._generated import mapping
    from websockets.asyncio.client import connect as ws_connect

    loop = asyncio.get_running_loop()
    ws = await ws_connect(endpoint, additional_headers={"x-playwright-browser": "chromium"},
                          user_agent_header=_user_agent(), open_timeout=timeout_s,
                          proxy=None,  # the server is on 127.0.0.1: no HTTP(S)_PROXY (a driver ignores them too)
                          max_size=None,  # a full-page screenshot comes as one message
                          ping_interval=None,  # a scraper that blocks its loop must not lose its browser
                          compression=None)
    connection = Connection(loop, None)
    connection.mark_as_remote()
    outbox: asyncio.Queue = asyncio.Queue()
    browser = None

    async def send_all() -> None:  # one sender, so messages leave in the order the client made them
        while True:
            message = await outbox.get()
            if message is None:
                break
            try:
                await ws.send(message)
            except Exception as exc:
                connection.close(f"the browser server connection failed: {exc}")
                break

    async def receive_all() -> None:
        why = "the browser server closed the connection"
        try:
            async for data in ws:
                connection.dispatch(json.loads(data))
                await wait_for_next_task()  # as the driver's pipe does: one message per task, like Node.js
        except Exception as exc:
            why = f"the browser server connection failed: {exc}"
        connection.close(why)

    def on_close() -> None:
        outbox.put_nowait(None)
        tasks.append(loop.create_task(ws.close()))
        # What the driver's connect does when its pipe closes: pages, contexts and the browser close.
        for context in browser.contexts if browser else []:
            for page in context.pages:
                page._on_close()
            context._on_close()
        loop.call_soon(lambda: browser._did_close() if browser else None)

    def onmessage(message: dict) -> None:
        # Serialized here, in the API call, as the driver's pipe does: a value JSON cannot carry (NaN, infinity)
        # fails that call with Playwright's Error, instead of the connection and every page on it.
        try:
            outbox.put_nowait(json.dumps(message, allow_nan=False))
        except ValueError as exc:
            raise Error(str(exc)) from None

    connection.onmessage = onmessage
    connection.on("close", on_close)
    tasks = [loop.create_task(send_all()), loop.create_task(receive_all())]
    try:
        playwright = await asyncio.wait_for(connection.initialize_playwright(), timeout_s)
        launched = playwright._initializer.get("preLaunchedBrowser")
        if not launched:
            raise RuntimeError(f"{endpoint} is not a browser server (no pre-launched browser)")
        browser = Browser.from_(launched)
    except BaseException:
        connection.close("connect failed")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), 5)
        raise
    browser._should_close_connection_on_close = True
    browser._connect_to_browser_type(playwright.chromium, {}, None)
    browser.on(Events.Browser.Disconnected, lambda _: connection.close())
    browser._fleet_ws_tasks = tasks  # referenced, so that the loop keeps them
    return mapping.from_impl(browser)
