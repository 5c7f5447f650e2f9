"""What `fleet run`, `status` and `history` print about a week: the table of sources, the commits, the alerts, held
rows and failed steps, read from the Dagster instance and the artifact store; and the exit code a week's end
deserves."""
from __future__ import annotations

import click

from fleet import config
from fleet.config import scraper_dirs, settings
from fleet.errors import without_credentials
from fleet.storage.open import host_store
from fleet.upkeep import mb

EXIT_OK, EXIT_PARTIAL, EXIT_NOTHING = 0, 1, 2


def source_names() -> list[str]:
    """The names of the sources the definitions hold (one raw asset each)."""
    from fleet.defs import definitions as d

    return sorted(k.path[-1] for k in d.defs.resolve_all_asset_keys() if k.path[0] == "raw")


def report(instance, store, week: str, names: list[str], publish_run, echo, selected: list[str],
           run_ids: list[str]) -> int:
    """The end of a driven week: its table, commits, alerts, held rows and failed steps; 0 when every selected
    source is ok and both commits landed, 1 when something is partial, 2 when nothing was committed."""
    from dagster import DagsterEventType

    from fleet import records
    from fleet.policy.status import week_status
    from fleet.publish import message
    from fleet.storage import store as keys

    rows = week_status(instance, store, week, names)
    print_status(rows, echo)
    steps_ok = set()
    failures = {}
    if publish_run is not None:
        for rec in records.events(instance, publish_run.run_id, (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE)):
            ev = rec.event_log_entry.dagster_event
            if ev.event_type == DagsterEventType.STEP_SUCCESS:
                steps_ok.add(ev.step_key)
            else:
                failures[ev.step_key] = step_error(ev.step_failure_data.error)
    landed = []
    for stage in ("raw", "processed"):
        rec = store.read_json(week, keys.commit_key(stage))
        if f"{stage}_commit" in steps_ok and rec:
            echo(f"commit {stage:<9} {rec['status']:<10} {rec['sha']}")
            landed.append(rec)
    for line in message.week_folder_report(week, landed):  # what the week's folder keeps that this run did not write
        echo(f"  {line}")
    print_alerts(week, echo, run_ids=run_ids)
    held = (store.read_json(week, keys.CONSOLIDATED_META_KEY) or {}).get("held") or {}
    for name, why in sorted(held.items()):
        echo(f"HELD {name}: {why['rows']} rows kept out of the commit by the quality gate ({'; '.join(why['checks'])}); "
             f"`fleet release {name} --week {week}` commits them", err=True)
    for step, msg in failures.items():
        echo(f"FAILED {step}: {msg.splitlines()[0] if msg else ''}", err=True)
    print_next(store, week, [r for r in rows if r.source in selected], echo)
    if "raw_commit" not in steps_ok:
        if publish_run is None:
            echo("nothing was committed: no publish run happened", err=True)
        return EXIT_NOTHING
    if "processed_commit" not in steps_ok:
        echo("the raw rows were committed, but post-processing or its commit failed (see above); "
             "rerun with `fleet reprocess` or `fleet commit --stage processed`", err=True)
        return EXIT_PARTIAL
    return EXIT_OK if all(r.status == "ok" and r.source not in held for r in rows if r.source in selected) else EXIT_PARTIAL


def print_next(store, week: str, rows, echo) -> None:
    """One line per failed source: its evidence folder (or s3:// prefix) and files, else the URL it failed at, and
    what to run next: `fleet debug` when a trace was kept, `fleet doctor` when the failure is the source's own."""
    import os
    from pathlib import Path

    from fleet.policy import taxonomy as tx
    from fleet.storage import store as keys
    from fleet.upkeep import evidence_folder, kept_evidence

    for r in rows:
        if r.status in (*keys.USABLE_STATUSES, "not run") or r.category in (tx.REFUSED, tx.QUARANTINED):
            continue  # refused and quarantined sources did not fail: their lines above say why they did not run
        kept = kept_evidence(store, week, r.source)
        found = kept[2] if kept else {}
        if found:
            folder = evidence_folder(found)
            if not folder.startswith("s3://") and Path(folder).resolve().is_relative_to(Path.cwd()):
                folder = os.path.relpath(folder) + "/"  # as short as it can be from where the command was typed
            where = f"evidence {folder} ({', '.join(loc.rsplit('/', 1)[-1] for loc in found.values())})"
        else:
            url = (keys.read_outcome(store, week, r.source) or {}).get("url")
            where = f"no evidence kept; it failed at {url}" if url else "no evidence kept"
        then = ([f"fleet debug {r.source} --week {week}"] if "trace" in found else []) + \
            ([f"fleet doctor {r.source}"] if r.category == "source" else [])
        echo("; ".join([f"next: {r.source} {r.status} ({r.category or '-'}): {where}", *then]))


def step_error(error) -> str:
    """What a failed step says: the error its own code raised, not Dagster's wrapper around it ("Error occurred
    while executing op ..."), whose cause it is."""
    if error is None:
        return "failed"
    while error.cause is not None and error.cls_name == "DagsterExecutionStepExecutionError":
        error = error.cause
    return error.message.strip()


def print_alerts(week: str, echo, run_ids: list[str] | None = None) -> None:
    """The week's alerts that the runs ``run_ids`` delivered (each alert is delivered once, by the run that first
    found its problem), as the alert log records them; all of the week's if ``run_ids`` is None."""
    from fleet.quality import alerts as alerting

    mine = alerting.logged(settings().home, week=week, run_ids=run_ids)
    if mine:
        echo(f"alerts for week {week} ({len(mine)}):")
        for a in mine:
            echo(f"  {a['severity']:<5} {a.get('source') or 'week':<20} {a['check']:<12} {a['message'].splitlines()[0][:160]}")


def print_status(rows, echo=click.echo) -> None:
    # as wide as the longest name (up to NAME_MAX, 63), at least 20 as it always was
    w = max([20, *(len(r.source) for r in rows)])
    echo(f"{'source':<{w}} {'status':<11} {'category':<8} {'rows':>6} {'seconds':>8} {'attempts':>8}  {'host':<16}  detail")
    for r in rows:
        detail = r.note or ""
        if r.error:  # whole: a failed source's line names its call, locator and URL, then what to run next
            detail = (detail + "; " if detail else "") + r.error.strip().splitlines()[0]
        echo(f"{r.source:<{w}} {r.status:<11} {(r.category or '-'):<8} {r.rows:>6} {r.seconds:>8.1f} {r.attempts:>8}  "
             f"{(r.host or '-'):<16}  {detail}")


def status(week: str, echo=click.echo) -> int:
    """`fleet status`: per source, then the failed checks (what the UI shows, not only what was evaluated), the
    commits, what the store holds, and the sources carried forward or in quarantine."""
    from fleet.defs.assets import QUALITY_CHECK, SOURCE_CHECKS
    from fleet.defs.instance import get_instance
    from fleet.policy.status import failed_checks, skipped_checks, week_status
    from fleet.publish.week import describe
    from fleet.storage import store as keys

    names = source_names()
    store = host_store()
    echo(f"week {week}")
    instance = get_instance(settings())
    print_status(week_status(instance, store, week, names), echo)
    print_slots(echo)
    failed = failed_checks(instance, week, names, QUALITY_CHECK, SOURCE_CHECKS)
    echo(f"checks: {len(failed)} failed" + (":" if failed else ""))
    for c in failed:
        echo(f"  {c.severity:<5} {c.source:<20} {c.check:<10} {(c.message.splitlines() or [''])[0][:140]}")
    skipped = skipped_checks(instance, week, names, QUALITY_CHECK, SOURCE_CHECKS)
    echo(f"checks skipped: {len(skipped)}" + (":" if skipped else ""))
    by_reason: dict[tuple, list[str]] = {}  # a new fleet's first week skips the same way for every source
    for c in skipped:
        by_reason.setdefault((c.check, c.message), []).append(c.source)
    for (check, why), who in by_reason.items():
        more = f" and {len(who) - 8} more" if len(who) > 8 else ""
        echo(f"  {check:<10} {why} ({', '.join(who[:8])}{more})")
    for stage in ("raw", "processed"):
        rec = store.read_json(week, keys.commit_key(stage))
        lfs = f"  (added {mb(rec['lfs_bytes'])} of LFS storage)" if (rec or {}).get("lfs_bytes") else ""
        echo(f"commit {stage:<9} {describe(rec)}{lfs}")
    held = {folder: store.size(week, folder) for folder in ("raw", "evidence", "work")}
    echo(f"store: week {week} holds " + ", ".join(f"{k} {mb(v)}" for k, v in held.items())
         + f"; all weeks {mb(sum(store.size(x, '.') for x in store.weeks()))}")
    print_domains(store, week, names, echo)
    print_lifecycle(store, week, echo)
    return EXIT_OK


def print_slots(echo=click.echo) -> None:
    """The sources scraping now, in the cap's slots, and those whose steps wait for one (fleet/engine/slot.py)."""
    from fleet.engine import slot
    from fleet.engine.settings import EngineSettings

    s, shared = settings(), config.politeness()["shared"]
    try:
        scraping, waiting = slot.now(EngineSettings.under(s.home, chromium="").slots_dir, shared)
    except Exception as exc:  # the broker's Redis down: the rest of the status still holds
        echo(f"scraping now: cannot be read from {without_credentials(shared)} ({type(exc).__name__}: {exc})")
        return
    if scraping or waiting:
        line = lambda recs: ", ".join(sorted(f"{r.get('source', '?')} ({r.get('host', '?')})" for r in recs)) or "-"
        echo(f"scraping now: {len(scraping)} of {s.max_parallel} (FLEET_MAX_PARALLEL): {line(scraping)}")
        echo(f"waiting for a scrape slot: {len(waiting)}" + (f": {line(waiting)}" if waiting else ""))


def print_domains(store, week: str, names: list[str], echo=click.echo) -> None:
    """Per domain the week's sources reached: what they asked, the 429s and waits, the bounds, robots.txt."""
    from fleet import config
    from fleet.policy.status import domain_summary

    found = domain_summary(store, week, names, settings().home / "politeness", config.politeness()["shared"])
    echo(f"domains: {len(found)}" + (":" if found else ""))
    for host, d in sorted(found.items()):
        nxt = f"; next week concurrency /{2 ** d['next_week_halvings']} after 429s" if d["next_week_halvings"] else ""
        echo(f"  {host:<24} requests {d['requests']}, 429s {d['http_429']}, Retry-After waits "
             f"{d['retry_after_waits']} ({d['retry_after_s']:g}s), concurrency {d['concurrency']}, interval "
             f"{d['interval_s']:g}s, robots.txt {d['robots']}{nxt}")


def print_lifecycle(store, week: str, echo=click.echo) -> None:
    """The sources carried forward into ``week``, and those in quarantine now."""
    from fleet.lifecycle import quarantine
    from fleet.scraping.discovery import discover
    from fleet.storage import store as keys

    for name, c in sorted(((store.read_json(week, keys.CONSOLIDATED_META_KEY) or {}).get("carried") or {}).items()):
        echo(f"carried forward {name}: {c['rows']} rows of week {c['from']} (_fleet_stale_since {c['from']}); this week {c['status']}")
    for q in quarantine.current(store, discover(scraper_dirs())):
        echo(f"quarantined {q.source}: {q.describe()}")


def history(source: str, echo=click.echo) -> int:
    """`fleet history`: ``source`` over the stored weeks; 2 when no week has it."""
    from fleet.storage import store as keys

    store = host_store()
    echo(f"{'week':<11} {'status':<8} {'category':<8} {'rows':>6} {'seconds':>8}  detail")
    found = False
    for w in store.weeks():
        rec = keys.read_outcome(store, w, source)
        if not rec:
            continue
        found = True
        detail = (rec.get("error") or "").strip().splitlines()[0][:120] if rec.get("error") else ""
        echo(f"{w:<11} {rec['status']:<8} {(rec.get('category') or '-'):<8} {int(rec.get('rows') or 0):>6} "
             f"{float(rec.get('seconds') or 0):>8.1f}  {detail}")
    if not found:
        echo(f"fleet: no stored weeks for source {source!r}", err=True)
        return EXIT_NOTHING
    return EXIT_OK

