"""`fleet test` (each source replayed offline from its fixture, checked against its schema, key and expectation) and
`fleet record` (re-record a fixture live, update its expectation, show the difference)."""
from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import uuid
from pathlib import Path

from fleet import config
from fleet.errors import FleetError
from fleet.lifecycle import fixtures
from fleet.engine.spec import Trial
from fleet.scraping.discovery import Source, discover
from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore
from fleet.weeks import last_complete_week


@dataclasses.dataclass
class Checked:
    source: str
    result: str          # pass | fail | untested (the row of a table, for `fleet test`, `smoke` and `canary`)
    rows: int
    seconds: float
    detail: str = ""


def attempt(source: Source, week: str, scratch: Path, trial: Trial = Trial()) -> dict:
    """One attempt of ``source`` through the weekly run's engine (fleet/engine/runner.py), in a browser process
    of its own, with its rows and evidence in a scratch store in ``scratch`` (the caller's temporary folder, which
    holds them until it is removed): the outcome's fields, with ``fill`` (per column of the scraper's schema, the
    share of rows with a value) and ``evidence_dir``. ``error`` is the outcome's without the source's name."""
    from fleet.engine.runner import EngineSettings, run_source

    scratch.chmod(0o711)  # the sandbox's user reaches its attempt's folders in it
    store = LocalArtifactStore(scratch / "store")
    settings = dataclasses.replace(EngineSettings.from_env(), browser_hosts="fresh")
    out = run_source(source, week, store=store, run_id=f"lifecycle-{uuid.uuid4().hex[:8]}", settings=settings,
                     refresh=True, trial=trial)
    got = {**out.to_json(), "fill": {}, "evidence_dir": store.local_dir(week, keys.evidence_key(source.name))}
    if got["error"]:
        got["error"] = got["error"].removeprefix(f"source {source.name}: ")
        if out.category == "infra":
            got["error"] = f"[infra] {got['error']}"
    if keys.rows_stored(store, week, got):
        frame = store.read_parquet(week, keys.raw_key(source.name, out.attempt)).drop(provenance.COLUMNS, strict=False)
        got["fill"] = {c: round(1 - frame[c].null_count() / frame.height, 4) if frame.height else 0.0
                       for c in frame.columns}
    return got


def select(dirs: list[Path], names: tuple[str, ...]) -> tuple[list[Source], bool]:
    """The sources ``names`` (all when empty) and whether they were named; an unknown name is a FleetError."""
    sources = {s.name: s for s in discover(dirs)}
    unknown = [n for n in names if n not in sources]
    if unknown:
        raise FleetError(f"unknown source(s): {', '.join(unknown)}; known: {', '.join(sorted(sources)) or 'none'}")
    return ([sources[n] for n in dict.fromkeys(names)] if names else list(sources.values())), bool(names)


def replay(source: Source) -> Checked:
    """``source`` replayed offline from its fixture: every document and xhr/fetch it asks for must be in the
    fixture, its rows must fit its schema and key, and their count and per-column fill must match the fixture's."""
    try:
        meta = fixtures.load(source)
    except FleetError as exc:
        return Checked(source.name, "fail", 0, 0.0, str(exc))
    env = {"FLEET_DEMO_URL": meta["demo_url"]} if meta.get("demo_url") else {}
    with tempfile.TemporaryDirectory(prefix="fleet-test-") as tmp:
        got = attempt(source, meta["week"], Path(tmp), Trial(replay_har=fixtures.har_path(source), env=env))
    if got["error"]:  # a request the fixture lacks is the attempt's error, naming its URL
        return Checked(source.name, "fail", got["rows"], got["seconds"], got["error"])
    problems = fixtures.compare(meta["expect"], got)
    return Checked(source.name, "fail" if problems else "pass", got["rows"], got["seconds"],
                   "; ".join(f"expected {p}" for p in problems))


def test_sources(dirs: list[Path], names: tuple[str, ...]) -> list[Checked]:
    """Each source (or those named) replayed from its fixture; a broken module or class fails at its FILE:LINE
    (it was never run), a source without a fixture is ``untested``."""
    sources, _ = select(dirs, names)
    out = []
    for src in sources:
        if src.broken:
            out.append(Checked(src.name, "fail", 0, 0.0, f"{src.where or src.module_path}: {' '.join(src.error.split())}"))
        elif not fixtures.has_fixture(src):
            out.append(Checked(src.name, "untested", 0, 0.0, f"no fixture; record one with `fleet record {src.name}`"))
        else:
            out.append(replay(src))
    return out


def record(source: Source, week: str | None = None) -> tuple[dict | None, dict]:
    """Record ``source`` live into its fixture and store the rows' expectation; the previous expectation (None if
    there was no readable fixture) and the new one. A failed recording leaves the fixture as it was."""
    week = week or last_complete_week().isoformat()
    try:
        old = fixtures.load(source)["expect"]
    except FleetError:
        old = None
    with tempfile.TemporaryDirectory(prefix="fleet-record-") as tmp:
        raw = Path(tmp) / "har" / "raw.har.zip"
        raw.parent.mkdir()
        got = attempt(source, week, Path(tmp), Trial(record_har=raw))
        if got["error"] or not raw.exists():
            raise FleetError(f"source {source.name}: recording failed: {got['error'] or 'no HAR written'}; "
                             f"{fixtures.har_path(source)} is unchanged")
        fixtures.scrub(raw, fixtures.har_path(source))
    new = fixtures.expectation(got)
    fixtures.write_meta(source, week, config.demo_url() or None, new)
    return old, new


@contextlib.contextmanager
def demo_sites_if_bundled():
    """The bundled demo scrapers find their sites through FLEET_DEMO_URL: start them when fleet's own scrapers
    are used (no FLEET_SCRAPERS_DIR) and nobody runs them yet, as `fleet demo` and `fleet ui` do."""
    if config.scrapers_dir_set() or config.demo_url():
        yield None
        return
    from fleet.demo.sites import DemoSites

    with DemoSites() as sites:
        config.export(FLEET_DEMO_URL=sites.url)
        try:
            yield sites
        finally:
            config.export(FLEET_DEMO_URL=None)


def print_table(rows: list[Checked], echo) -> None:
    w = max([20, *(len(r.source) for r in rows)])
    rw = max([6, *(len(r.result) for r in rows)])
    echo(f"{'source':<{w}} {'result':<{rw}} {'rows':>6} {'seconds':>8}  detail")
    for r in rows:
        echo(f"{r.source:<{w}} {r.result:<{rw}} {r.rows:>6} {r.seconds:>8.1f}  {r.detail}")
