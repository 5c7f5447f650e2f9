"""Recorded fixtures: ``<scrapers>/fixtures/NAME.har.zip`` (Playwright's HAR, scrubbed of cookies and credential
headers) and ``NAME.fixture.json`` (the week and demo base URL it was recorded with, and the expected rows)."""
from __future__ import annotations

import json
import os
import re
import tempfile
import zipfile
from pathlib import Path

from fleet.errors import FleetError
from fleet.scraping.discovery import Source

FORMAT = 1
# header names whose values are credentials; also any name with one of these words in it
SECRET_HEADERS = re.compile(r"^(cookie|set-cookie|authorization|proxy-authorization)$|token|secret|api-?key|auth|session|csrf|xsrf",
                            re.I)
FILL_TOLERANCE = 0.01


def har_path(source: Source) -> Path:
    return source.module_path.parent / "fixtures" / f"{source.name}.har.zip"


def meta_path(source: Source) -> Path:
    return source.module_path.parent / "fixtures" / f"{source.name}.fixture.json"


def has_fixture(source: Source) -> bool:
    return har_path(source).exists() or meta_path(source).exists()


def load(source: Source) -> dict:
    """The fixture's metadata, checked: a FleetError naming the file for one that is missing, corrupt, or another
    source's."""
    meta, har = meta_path(source), har_path(source)
    for p in (meta, har):
        if not p.exists():
            raise FleetError(f"{p}: no fixture for source {source.name}; record one with `fleet record {source.name}`")
    try:
        data = json.loads(meta.read_text())
    except (OSError, ValueError) as exc:
        raise FleetError(f"{meta}: not a readable fixture ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or data.get("fleet_fixture") != FORMAT or not isinstance(data.get("expect"), dict):
        raise FleetError(f"{meta}: not a fleet fixture (format {FORMAT} with an expectation)")
    if data.get("source") != source.name:
        raise FleetError(f"{meta}: the fixture of source {data.get('source')!r}, not of {source.name!r}")
    try:
        with zipfile.ZipFile(har) as z:
            entries = json.loads(z.read("har.har"))["log"]["entries"]
        assert isinstance(entries, list)
    except Exception as exc:
        raise FleetError(f"{har}: not a HAR fixture recorded by Playwright ({type(exc).__name__}: {exc})") from None
    return data


def _cookies_set(entries: list) -> dict[str, str]:
    """The values of the cookies the site set (its Set-Cookie headers, the recorder's cookie lists), by name."""
    found = {}
    for entry in entries:
        for part in (entry.get("request", {}), entry.get("response", {})):
            for c in part.get("cookies") or []:
                found[f"the cookie {c.get('name')!r}"] = str(c.get("value") or "")
            for h in part.get("headers") or []:
                if h.get("name", "").lower() == "set-cookie":
                    for line in str(h.get("value", "")).splitlines():
                        name, _, value = line.split(";", 1)[0].partition("=")
                        found[f"the cookie {name.strip()!r}"] = value.strip()
    return {k: v for k, v in found.items() if len(v) >= 6}  # "1", "true": in any page, not a secret


def _leaks(entries: list, others: dict[str, bytes], values: dict[str, str]) -> list[str]:
    """Where in the scrubbed recording each of ``values`` (a secret's value, by what it is) still is."""
    from base64 import b64decode
    from urllib.parse import quote

    out = []
    for i, entry in enumerate(entries):
        req, resp = entry.get("request", {}), entry.get("response", {})
        content = resp.get("content") or {}
        body = str(content.get("text") or "").encode()
        if content.get("encoding") == "base64":
            try:
                body = b64decode(body)
            except ValueError:
                pass
        parts = {"URL": str(req.get("url", "")).encode(), "request headers": json.dumps(req.get("headers")).encode(),
                 "request body": str((req.get("postData") or {}).get("text") or "").encode(),
                 "response headers": json.dumps(resp.get("headers")).encode(),
                 "response body": body + others.get(str(content.get("_file") or ""), b"")}
        for what, value in values.items():
            forms = {value.encode(), quote(value, safe="").encode()}
            out += [f"entry {i} ({req.get('url')}) {part} holds {what}" for part, text in parts.items()
                    if any(f in text for f in forms)]
    return out


def scrub(raw_zip: Path, target: Path) -> int:
    """Copy Playwright's recording ``raw_zip`` to ``target`` without cookies or credential headers (its recorder
    keeps them); returns how many values were removed. Refused, writing nothing, when what is left holds the value
    of a configured secret (fleet/secrets.py) or of a cookie the site set, naming where. Written atomically: a
    reader never sees a half fixture."""
    from fleet.secrets import secret_values

    removed = 0
    with zipfile.ZipFile(raw_zip) as z:
        har = json.loads(z.read("har.har"))
        others = {n: z.read(n) for n in z.namelist() if n != "har.har"}
    values = {**_cookies_set(har["log"]["entries"]), **{f"the value of {n}": v for n, v in secret_values().items()}}
    for entry in har["log"]["entries"]:
        for part in (entry.get("request", {}), entry.get("response", {})):
            removed += len(part.get("cookies") or [])
            part["cookies"] = []
            kept = [h for h in part.get("headers") or [] if not SECRET_HEADERS.search(h.get("name", ""))]
            removed += len(part.get("headers") or []) - len(kept)
            part["headers"] = kept
    leaks = _leaks(har["log"]["entries"], others, values)
    if leaks:
        raise FleetError(f"{target}: not written: the recording holds a secret: {'; '.join(leaks[:3])}"
                         f"{f' (and {len(leaks) - 3} more)' if len(leaks) > 3 else ''}; record against a site "
                         "that does not put it in its pages (a test account), or rotate it")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("har.har", json.dumps(har))
            for n, data in others.items():
                z.writestr(n, data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep a fixture meant for the repository from others
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return removed


def expectation(result: dict) -> dict:
    return {"rows": int(result["rows"]), "fill": dict(result.get("fill") or {})}


def write_meta(source: Source, week: str, base_url: str | None, expect: dict) -> Path:
    p = meta_path(source)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = {"fleet_fixture": FORMAT, "source": source.name, "week": week, "demo_url": base_url, "expect": expect}
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, p)
    return p


def compare(expect: dict, got: dict) -> list[str]:
    """What differs between the stored expectation and a run's rows: row count, columns, per-column fill."""
    problems = []
    if got["rows"] != expect.get("rows"):
        problems.append(f"rows {expect.get('rows')} -> {got['rows']}")
    old, new = expect.get("fill") or {}, got.get("fill") or {}
    for col in sorted(set(old) | set(new)):
        if col not in new:
            problems.append(f"column {col} gone")
        elif col not in old:
            problems.append(f"column {col} new (fill {new[col]:.0%})")
        elif abs(old[col] - new[col]) > FILL_TOLERANCE:
            problems.append(f"fill of {col} {old[col]:.0%} -> {new[col]:.0%}")
    return problems
