"""`fleet doctor NAME`: for a source whose locators stopped matching, say which, and propose a tested replacement.

1. Last good week: the source's recorded fixture (``fixtures/NAME.har.zip``), replayed through the engine for its
   rows and pages; failing that, the newest week whose rows the artifact store holds (its pages are not kept: its
   parsed values are looked for, a number as the number a page's text holds). Today: the source's own site,
   scraped live through the engine for that same week (same values: only the markup may differ) and recorded
   into a HAR; when the site cannot be reached, the page its newest failed attempt kept as evidence
   (fleet/lifecycle/stored_page.py). No other network is used.
2. Every locator the scraper names (fleet/scraping/locators.py, and its Playwright locator chains,
   fleet/scraping/chains.py) is counted on last week's pages and today's, offline from the two HARs
   (fleet/lifecycle/examine.py): matched then, matched now. A chain it cannot follow is named by line, never guessed.
3. For each row locator with a broken part, today's page is searched for the elements holding last week's values,
   and the simplest locators that find exactly those are proposed (test ids and roles first, for a chain), as a
   unified diff of the module.
4. The scraper, patched, runs through the engine against today's page; its rows are shown next to last week's. It
   passes when it has no error and finds last week's keys with their columns filled as last week.
5. Only with ``--apply``, and only a proposal that passed, is written to the module (atomically).
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from fleet.errors import FleetError
from fleet.engine.spec import Trial
from fleet.lifecycle import fixtures, repair, stored_page
from fleet.lifecycle.examine import MIN_SHARE, broken, chain_row, examine_sandboxed, js_row, rows_of
from fleet.lifecycle.replay import attempt
from fleet.scraping import chains, locators
from fleet.scraping.discovery import Source
from fleet.storage import provenance
from fleet.storage import store as keys
from fleet.storage.store import LocalArtifactStore

SHOWN_ROWS = 5


def _frame(scratch: Path, week: str, got: dict):
    store = LocalArtifactStore(scratch / "store")
    if not keys.rows_stored(store, week, got):
        return None
    return store.read_parquet(week, keys.raw_key(got["source"], got["attempt"])).drop(provenance.COLUMNS, strict=False)


def _scratch(tmp: Path, name: str) -> Path:
    (folder := tmp / name).mkdir()
    return folder


def verdict(last, got: dict, new, key: tuple[str, ...]) -> list[str]:
    """Why the patched scraper's rows ``new`` do not stand for last week's ``last`` (empty: they do)."""
    if got["error"]:
        return [got["error"]]
    if new is None or new.height == 0:
        return ["no rows"]
    problems = []
    old_keys = {tuple(r) for r in last.select(key).iter_rows()}
    share = len(old_keys & {tuple(r) for r in new.select(key).iter_rows()}) / max(1, len(old_keys))
    if share < MIN_SHARE:
        problems.append(f"only {share:.0%} of last week's keys")
    for col in last.columns:
        before = 1 - last[col].null_count() / max(1, last.height)
        after = 1 - new[col].null_count() / new.height if col in new.columns else 0.0
        if after < before - fixtures.FILL_TOLERANCE:
            problems.append(f"fill of {col} {before:.0%} -> {after:.0%}")
    return problems


def side_by_side(last, new, key: tuple[str, ...], echo) -> None:
    cols = [c for c in last.columns if c not in key]
    echo(f"  {'key':<20} {'column':<12} {'last week':<28} with the proposal")
    index = {tuple(r[k] for k in key): r for r in (new.to_dicts() if new is not None else [])}
    for row in last.head(SHOWN_ROWS).to_dicts():
        k = tuple(row[c] for c in key)
        other = index.get(k, {})
        for i, c in enumerate(cols):
            echo(f"  {'/'.join(map(str, k)) if i == 0 else '':<20} {c:<12} {str(row[c]):<28} "
                 f"{other.get(c, '(missing)') if other else '(missing)'}")


def _from_fixture(source: Source, tmp: Path, echo):
    """Last good week from the source's fixture: its week, its rows (replayed through the engine), its HAR."""
    meta = fixtures.load(source)  # a FleetError naming the file when the fixture is unreadable
    har, week = fixtures.har_path(source), meta["week"]
    env = {"FLEET_DEMO_URL": meta["demo_url"]} if meta.get("demo_url") else {}
    last_dir = _scratch(tmp, "last")
    got = attempt(source, week, last_dir, Trial(replay_har=har, env=env))
    last = _frame(last_dir, week, got)
    if got["error"] or last is None or last.height == 0:
        echo(f"fleet doctor {source.name}: its fixture {har} gives no rows ({got['error'] or 'none'}); "
             f"re-record it from a good week with `fleet record {source.name}`")
        return None
    return week, last, har, f"fixture {har.name}"


def _from_store(source: Source):
    """Last good week from the artifact store (no fixture): the newest week whose rows the source stored; its
    pages are not kept, so only its row locators are known to have matched, and its parsed values are looked for."""
    from fleet.storage.open import host_store

    store = host_store()
    for week in sorted(store.weeks(), reverse=True):
        rec, _ = keys.consolidated_outcome(store, week, source.name)
        if rec and rec.get("status") in ("ok", "partial"):
            frame = store.read_parquet(week, keys.rows_key(rec)).drop(provenance.COLUMNS, strict=False)
            if frame.height:
                return week, frame, None, "its stored rows; no fixture"
    raise FleetError(f"source {source.name}: no fixture ({fixtures.har_path(source)}) and no week with its rows in "
                     f"the store: nothing to compare today's page with; record one with `fleet record {source.name}`")


def doctor(source: Source, apply: bool, echo) -> int:
    """The doctor's report on ``source``; 0 when nothing is broken or a passing proposal was found (and applied
    with ``apply``), 1 when a broken locator got no replacement that passes. The module changes only with
    ``apply`` and a proposal that passed."""
    try:
        used = locators.parse(source.module_path)
    except SyntaxError as exc:
        raise FleetError(f"source {source.name}: {source.module_path} does not parse ({exc.msg}, line {exc.lineno}); "
                         f"fleet doctor repairs locators, not Python") from None
    if not used.rows and not used.chains:
        raise FleetError(f"source {source.name}: {source.module_path} " + (
            f"has no row locator fleet doctor can read: {'; '.join(used.unread)}" if used.unread else
            "reads no row of the page through a locator (rows from page.locator(...).all(), .nth(i) or "
            ".evaluate_all(JS), fields read from each row): nothing for fleet doctor to repair"))
    for why in used.unread:
        echo(f"fleet doctor {source.name}: not read, left as it is: {why}")
    with tempfile.TemporaryDirectory(prefix="fleet-doctor-") as tmp:
        tmp = Path(tmp)
        tmp.chmod(0o711)  # the sandbox's user reaches its attempts' folders in it
        today_dir = _scratch(tmp, "today")
        found = _from_fixture(source, tmp, echo) if fixtures.has_fixture(source) else _from_store(source)
        if found is None:
            return 1
        week, last, har, label = found
        (today_dir / "har").mkdir()
        today_har = today_dir / "har" / "today.har.zip"
        now_got = attempt(source, week, today_dir, Trial(record_har=today_har))
        echo(f"fleet doctor {source.name}: last good week {week} ({label}): {last.height} rows; "
             f"today's page, live, same week: {now_got['rows']} rows ({now_got['status']}"
             f"{': ' + now_got['error'].splitlines()[0] if now_got['error'] else ''})")
        check_week, check_trial = week, Trial()
        if not (today_har.exists() and repair.documents(today_har)):  # the site is down: its last failure's page
            kept = stored_page.latest(source)
            if kept is None:
                echo(f"no replacement found: today's page could not be reached and no failed attempt of "
                     f"{source.name} kept one (its evidence's page.html); retry when the site answers")
                return 1
            today_har = stored_page.har(kept, today_dir / "har" / "stored.har.zip")
            check_week, check_trial = kept.week, Trial(replay_har=today_har)
            echo(f"  the site could not be reached: today's page is the one its failed attempt of week {kept.week} "
                 f"kept ({kept.url})")
        ex = examine_sandboxed(source, har, today_har, None if har else last.to_dicts(), tmp)
        w = max([24, *(len(s) for s in ex.then)])
        echo(f"  {'locator':<{w}} {'then':>5} {'now':>5}")
        for s in ex.then:
            state = ("broken" if broken(ex, s) else "not known then" if ex.then[s] == "?" else
                     "not known now (its rows are not found)" if ex.now[s] == "?" else
                     "never matched" if not ex.then[s] else "ok")
            show = lambda n: "bad" if n is None else str(n)  # noqa: E731
            echo(f"  {s:<{w}} {show(ex.then[s]):>5} {show(ex.now[s]):>5}  {state}")
        in_rows = {s for parts in rows_of(used).values() for s in parts}
        stray = [s for s in ex.then if broken(ex, s) and s not in in_rows]
        for s in stray:
            echo(f"no replacement found for {s}: it holds none of the rows' values, so nothing says what replaces it")
        if not any(broken(ex, s) for s in ex.then):
            echo("every locator that matched last week matches today; nothing to propose")
            return 0
        rows_new, fields_new, chain_edits = {}, {}, []
        for sel, p in ex.proposals.items():
            if (chained := chain_row(used, sel)) is not None:
                if "error" in p:
                    echo(f"no replacement found for {sel}: {p['error']}")
                    return 1
                chain_edits += [(chained.spans, p["row"])] if p["row"] != chained.chain else []
                chain_edits += [(f.spans, p["fields"][f.name]) for f in chained.fields
                                if p["fields"][f.name] != f.chain]
                echo(f"proposal for {sel}: {p['found']} of last week's rows found on today's page"
                     + ("" if p["exact"] else " (the locator also finds rows of the same shape that are new)"))
                continue
            row = js_row(used, sel)
            if "error" in p or row.other_fields and any(broken(ex, s) for s in row.other_fields.values()):
                echo(f"no replacement found for {sel}: {p.get('error') or 'a field it reads by attribute broke'}")
                return 1
            if p["row"] != sel:
                rows_new[sel] = p["row"]
            fields_new.update({(f, row.fields[f]): new for f, new in p["fields"].items() if new != row.fields[f]})
            echo(f"proposal for {sel}: {p['found']} of last week's rows found on today's page"
                 + ("" if p["exact"] else " (the selector also picks rows of the same shape that are new)"))
        if stray:
            return 1
        try:
            text = locators.patch(source.module_path, rows_new, fields_new,
                                  chains.patch(source.module_path.read_text(encoding="utf-8"), chain_edits))
        except SyntaxError:  # e.g. a selector's quotes inside the module's own string of the same quotes
            echo(f"no replacement found that fits: the proposed selectors {sorted(rows_new.values())} "
                 f"{sorted(fields_new.values())} cannot be written into {source.module_path.name}'s strings")
            return 1
        echo(locators.diff(source.module_path, text).rstrip("\n"))
        (trial_dir := _scratch(tmp, "proposal")).chmod(0o755)
        module = trial_dir / source.module_path.name
        module.write_text(text, encoding="utf-8")
        module.chmod(0o644)
        check_dir = _scratch(tmp, "check")
        got = attempt(dataclasses.replace(source, module_path=module), check_week, check_dir, check_trial)
        new = _frame(check_dir, check_week, got)
        problems = verdict(last, got, new, tuple(source.key))
        echo(f"the scraper with the proposal, against today's page{'' if check_trial.replay_har is None else ' (kept)'}"
             f": {got['rows']} rows (last week {last.height})")
        side_by_side(last, new, tuple(source.key), echo)
    if problems:
        echo(f"no replacement found that passes: {'; '.join(problems)}; {source.module_path} is unchanged")
        return 1
    if not apply:
        echo(f"the proposal passes; apply it with `fleet doctor {source.name} --apply` ({source.module_path} is "
             f"unchanged)")
        return 0
    tmp_path = source.module_path.with_name(f".{source.module_path.name}.doctor")
    tmp_path.write_text(text, encoding="utf-8")
    os.replace(tmp_path, source.module_path)
    echo(f"applied to {source.module_path}; re-record its fixture with `fleet record {source.name}`")
    return 0

