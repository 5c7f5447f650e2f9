"""One scraper in a browser of its own, outside the weekly pipeline: live, live while recording a HAR, or replayed
offline from a HAR. Run as ``python -m fleet.lifecycle.harness SPEC.json`` by fleet/lifecycle/browse.py, which kills it
at the source's timeout; it writes its result (rows' count and fill, error, missing URLs) as JSON."""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import sys
import time
import traceback
from pathlib import Path

# Requests a page needs to make sense; anything else missing from a fixture (images, fonts, analytics, cache
# busters no recording can match) is aborted quietly.
NEEDED = ("document", "xhr", "fetch")


async def run(spec: dict) -> dict:
    from playwright.async_api import async_playwright

    from fleet.errors import NavigationError
    from fleet.scraping.contract import ScrapeContext
    from fleet.scraping.discovery import load_module
    from fleet.storage.frames import add_unique, encode_row, validate_row

    name = spec["source"]
    result: dict = {"rows": 0, "fill": {}, "error": None, "missing": [], "sample": []}
    missing: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=spec["chromium"], headless=True)
        options = {"service_workers": "block"}
        if spec.get("record_har"):
            options.update(record_har_path=spec["record_har"], record_har_mode="full")
        context = await browser.new_context(**options)
        if spec.get("replay_har"):
            async def not_in_fixture(route):
                req = route.request
                if req.resource_type in NEEDED:
                    missing.append(f"{req.method} {req.url}")
                await route.abort()

            # routes run newest first: the HAR answers what it holds and falls back to this for the rest
            await context.route("**/*", not_in_fixture)
            await context.route_from_har(spec["replay_har"], not_found="fallback")
        page = await context.new_page()
        work = Path(spec["work_dir"])
        ctx = ScrapeContext(source=name, week=dt.date.fromisoformat(spec["week"]), run_id=spec["run_id"],
                            state_dir=work, deadline=time.monotonic() + spec["timeout_s"],
                            logger=logging.getLogger(f"fleet.scraper.{name}"))
        by_key: dict = {}
        count = 0
        limit = spec.get("first_rows")
        try:
            cls = getattr(load_module(Path(spec["module_path"])), spec["class_name"])
            schema, key = dict(cls.schema), tuple(cls.key)
            result["columns"] = list(schema)
            filled = {c: 0 for c in schema}
            async for row in cls().scrape(page, ctx):
                clean = validate_row(name, schema, key, row, count)
                if add_unique(name, schema, key, by_key, clean):
                    for c, v in clean.items():
                        filled[c] += v is not None
                    if len(result["sample"]) < 3:
                        result["sample"].append(json.loads(encode_row(clean)))
                count += 1
                if limit and count >= limit:
                    break
            result["rows"] = len(by_key)
            result["fill"] = {c: round(n / len(by_key), 4) if by_key else 0.0 for c, n in filled.items()}
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
            if isinstance(exc, NavigationError):
                result["url"] = exc.url
            result["traceback"] = traceback.format_exc()
            if spec.get("evidence_dir"):
                result["evidence"] = await _evidence(page, Path(spec["evidence_dir"]))
        result["pages"] = ctx.pages_visited
        result["url"] = result.get("url") or ctx.last_url
        await context.close()  # writes the HAR
        await browser.close()
    result["missing"] = sorted(set(missing))
    return result


async def _evidence(page, folder: Path) -> dict:
    """A screenshot and the HTML of the page a failed scraper left, as far as the page still answers."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    try:
        await asyncio.wait_for(page.screenshot(path=str(folder / "screenshot.png"), full_page=True), 10)
        out["screenshot"] = str(folder / "screenshot.png")
        (folder / "page.html").write_text(await asyncio.wait_for(page.content(), 10))
        out["html"] = str(folder / "page.html")
    except Exception:  # a crashed or hung page: the error and URL are the evidence then
        pass
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    try:
        result = asyncio.run(run(spec))
    except Exception as exc:  # the browser or Playwright itself failed: not the scraper's doing
        result = {"infra": f"{type(exc).__name__}: {exc}".strip().splitlines()[0], "traceback": traceback.format_exc()}
    Path(spec["result_path"]).write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
