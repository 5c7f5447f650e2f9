"""`python -m bench.timeline [--week WEEK] [--json]`: where a week's wall time went, read from a `FLEET_HOME`'s
event log after `fleet run` (the home is `FLEET_HOME`'s, as for every fleet command).

For each of the week's runs, in the order they were created: when it was created, when its first step
started, when its last step ended. Then the scraping itself: each source's time in one of the cap's slots, from its
worker taking the source (the `attempt in process N` line its step logs) to the end of its scrape (its outcome's
`seconds`), and what that says about the week's length. With sources of about equal length, a week of n
sources at a cap of c ends when the slot that started last has run its n/c sources in a row: the time until
all c slots are busy is paid once, on top of n/c sources' time. Times are seconds from the first run's
creation (``t0_unix`` in the JSON; the command itself started a few seconds earlier: Python, Dagster's
import, the definitions, the instance).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys

WORKER_LINE = re.compile(r"\[(?P<source>[a-z][a-z0-9_]*)\] attempt in process (?P<pid>\d+) \((?P<how>[^;,)]+)[;,)]")
SLOT_WAIT = re.compile(r"waited (?P<s>[0-9.]+)s for a scrape slot")


def occupancy(intervals: list[tuple[float, float]], cap: int) -> dict:
    """How ``cap`` slots were used by ``intervals`` ((start, end) pairs, seconds): when all were first busy,
    when they were last all busy (from then on they drain), and the slot-seconds left idle between the first start and the last end."""
    if not intervals:
        return {"first_start": None, "all_busy_at": None, "all_busy_until": None, "last_end": None,
                "idle_slot_seconds": None}
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda e: (e[0], e[1]))
    busy, idle, all_at, all_until = 0, 0.0, None, None
    previous = edges[0][0]
    for t, step in edges:
        idle += max(0, cap - busy) * (t - previous)
        previous = t
        was, busy = busy, busy + step
        if busy >= cap and all_at is None:
            all_at = t
        if was >= cap > busy:
            all_until = t  # the last time it happens: from here on the slots drain
    return {"first_start": edges[0][0], "all_busy_at": all_at, "all_busy_until": all_until,
            "last_end": edges[-1][0], "idle_slot_seconds": round(idle, 2)}


def step_phases(events: list, outcome, cap: int, pool: int | None = None) -> dict:
    """Where each source step's time went, from one run's event log (``events``: its EventLogEntry list), as the
    median and max over the run's source steps, in seconds: ``launch`` (the run process launches the step, having
    taken its slot of the pool -> its process has started), ``boot`` (-> STEP_START: the job resolved, the instance
    and the resources built), ``pre_scrape`` (-> a worker took the source: fleet's refusals and the host),
    ``scrape`` (the attempt's own seconds), ``post_scrape`` (-> STEP_SUCCESS: the outcome stored, the checks, the
    materialization and check events) and ``handoff`` (a step's STEP_SUCCESS -> the launch of the step that took
    its slot of the ``pool``: the run process draining the step's events, freeing the slot and its next pass).
    ``pre_scrape`` leaves out ``slot_wait``, the time the step waited for one of fleet's ``cap`` scrape slots
    (fleet/engine/slot.py); ``slot_handoff`` is a scrape's end -> the start of the scrape that took its slot."""
    from dagster import DagsterEventType as T

    from fleet.policy import taxonomy as tx

    at: dict[str, dict[str, float]] = {}
    for e in events:
        d = e.dagster_event
        key = e.step_key or (d.step_key if d else None)
        if not key or not key.startswith(tx.RAW_PREFIX):
            continue
        marks = at.setdefault(key, {})
        if d is not None and d.event_type in (T.STEP_WORKER_STARTING, T.STEP_WORKER_STARTED, T.STEP_START,
                                               T.STEP_SUCCESS):  # the last of each: a re-executed step's last try
            marks[d.event_type.value] = e.timestamp
        elif WORKER_LINE.search(e.user_message or ""):
            marks["taken"] = e.timestamp
            wait = SLOT_WAIT.search(e.user_message or "")
            marks["slot_wait"] = float(wait["s"]) if wait else 0.0
    phases: dict[str, list[float]] = {k: [] for k in ("launch", "boot", "slot_wait", "pre_scrape", "scrape",
                                                       "post_scrape")}
    scrapes = []
    for key, m in at.items():
        seconds = float(outcome(key[len(tx.RAW_PREFIX):]).get("seconds") or 0.0)
        if not {"STEP_WORKER_STARTING", "STEP_WORKER_STARTED", "STEP_START", "taken", "STEP_SUCCESS"} <= set(m):
            continue
        phases["launch"].append(m["STEP_WORKER_STARTED"] - m["STEP_WORKER_STARTING"])
        phases["boot"].append(m["STEP_START"] - m["STEP_WORKER_STARTED"])
        phases["slot_wait"].append(m["slot_wait"])
        phases["pre_scrape"].append(m["taken"] - m["STEP_START"] - m["slot_wait"])
        phases["scrape"].append(seconds)
        scrapes.append((m["taken"], m["taken"] + seconds))
        phases["post_scrape"].append(m["STEP_SUCCESS"] - m["taken"] - seconds)
    launches = sorted(m["STEP_WORKER_STARTING"] for m in at.values() if "STEP_WORKER_STARTING" in m)
    ends = sorted(m["STEP_SUCCESS"] for m in at.values() if "STEP_SUCCESS" in m)
    # the n-th launch beyond the pool waited for the (n - pool)-th step to end
    pool = pool or cap
    phases["handoff"] = [launches[i] - ends[i - pool] for i in range(pool, len(launches)) if i - pool < len(ends)]
    # the n-th scrape beyond the cap waited for the (n - cap)-th scrape to end
    starts, stops = sorted(a for a, _ in scrapes), sorted(b for _, b in scrapes)
    phases["slot_handoff"] = [starts[i] - stops[i - cap] for i in range(cap, len(starts))]
    return {k: {"median": round(statistics.median(v), 2), "max": round(max(v), 2), "n": len(v)} if v else None
            for k, v in phases.items()}


def week_timeline(instance, week: str, outcome, cap: int) -> dict:
    """The week's runs and the cap's slots from ``instance``'s event log (see the module's doc); ``outcome(name)``
    is a source's stored outcome for the week ({} if none)."""
    from dagster import DagsterEventType, RunsFilter

    from fleet.defs.instance import pool_limit
    from fleet.policy import taxonomy as tx

    step_events = {DagsterEventType.STEP_START: "start", DagsterEventType.STEP_SUCCESS: "end",
                   DagsterEventType.STEP_FAILURE: "end"}
    records = sorted(instance.get_run_records(RunsFilter(tags={tx.PARTITION_TAG: week})),
                     key=lambda r: r.create_timestamp.timestamp())
    if not records:
        raise SystemExit(f"bench.timeline: no run of week {week} in this FLEET_HOME's event log")
    t0 = records[0].create_timestamp.timestamp()
    runs, slots, unfinished, phases = [], [], [], None
    for rec in records:
        run, steps, taken = rec.dagster_run, {}, {}
        events = instance.all_logs(run.run_id)
        if phases is None and run.tags.get(tx.TAG_KIND) == "scrape":
            phases = step_phases(events, outcome, cap, pool_limit(cap))
        for e in events:
            kind = step_events.get(e.dagster_event.event_type) if e.dagster_event else None
            if kind and e.step_key:  # a step with more than one end in its run: its first start, its last end
                at = round(e.timestamp - t0, 2)
                step = steps.setdefault(e.step_key, {})
                step[kind] = step.get(kind, at) if kind == "start" else at
            m = WORKER_LINE.search(e.user_message or "")
            if m:  # the last attempt's line wins: its outcome's seconds are the ones stored
                taken[m["source"]] = (e.timestamp - t0, m["pid"], m["how"])
        for source, (at, pid, how) in taken.items():
            end = steps.get(f"{tx.RAW_PREFIX}{source}", {}).get("end")
            seconds = float(outcome(source).get("seconds") or 0.0)
            stop = at + seconds if seconds else end
            if end is not None and stop is not None:
                stop = min(stop, end)
            if stop is None:  # no stored seconds and no end: a run killed while this source scraped
                unfinished.append(source)
                continue
            slots.append({"source": source, "run": run.run_id[:8], "worker": int(pid), "how": how,
                          "start": round(at, 2), "end": round(stop, 2)})
        starts = [s["start"] for s in steps.values() if "start" in s]
        ends = [s["end"] for s in steps.values() if "end" in s]
        runs.append({"run": run.run_id[:8], "kind": run.tags.get(tx.TAG_KIND, "-"), "status": run.status.value,
                     "created": round(rec.create_timestamp.timestamp() - t0, 2), "steps": sum(1 for k in steps if k.startswith(tx.RAW_PREFIX)),  # source steps (a --source run also checks freshness)
                     "first_step_start": min(starts, default=None), "last_step_end": max(ends, default=None),
                     "step_seconds": {k: round(v["end"] - v["start"], 2)
                                      for k, v in sorted(steps.items(), key=lambda kv: kv[1].get("start", 0))
                                      if "start" in v and "end" in v and not k.startswith(tx.RAW_PREFIX)}})
    slots.sort(key=lambda s: s["start"])
    used = occupancy([(s["start"], s["end"]) for s in slots], cap)
    per_source = [s["end"] - s["start"] for s in slots]
    chains: dict[int, list] = {}
    for s in slots:
        chains.setdefault(s["worker"], []).append(s)
    workers = {pid: {"sources": len(c), "from": c[0]["start"], "to": c[-1]["end"]} for pid, c in chains.items()}
    last = max(workers.items(), key=lambda kv: kv[1]["to"], default=None)
    return {"week": week, "cap": cap, "t0_unix": t0, "runs": runs, "slots": slots, "unfinished": unfinished,
            "occupancy": used, "step_phases": phases,
            "median_slot_seconds": round(statistics.median(per_source), 2) if per_source else None,
            "hosts": workers,
            # with sources of about equal length, the week's scraping ends with the worker that started last
            "last_worker": None if last is None else {
                "worker": last[0], **last[1], "seconds_per_source": round((last[1]["to"] - last[1]["from"]) / last[1]["sources"], 2)}}


def summary(t: dict, since_unix: float | None = None) -> dict:
    """The few numbers that place a week's wall time (see the module's doc), in seconds from ``since_unix``
    (when the command was spawned) if given, else from the first run's creation."""
    shift = (t["t0_unix"] - since_unix) if since_unix is not None else 0.0
    at = (lambda v: None if v is None else round(v + shift, 2))
    o, scrape = t["occupancy"], t["runs"][0]
    publish = next((r for r in t["runs"] if r["kind"] == "publish"), None)
    return {"run_created_s": at(0.0), "first_step_start_s": at(scrape["first_step_start"]),
            "first_slot_s": at(o["first_start"]), "all_slots_busy_s": at(o["all_busy_at"]),
            "last_scrape_end_s": at(o["last_end"]),
            "last_worker_seconds_per_source": (t["last_worker"] or {}).get("seconds_per_source"),
            "step_phases_median_s": {k: v["median"] for k, v in (t.get("step_phases") or {}).items() if v},
            "publish_s": None if publish is None or publish["last_step_end"] is None
            else round(publish["last_step_end"] - publish["created"], 2)}


def render(t: dict) -> str:
    lines = [f"week {t['week']}: seconds from the creation of its first run"]
    lines.append(f"{'run':<9} {'kind':<8} {'status':<8} {'created':>8} {'steps':>6} {'1st step':>9} {'last end':>9}")
    for r in t["runs"]:
        lines.append(f"{r['run']:<9} {r['kind']:<8} {r['status'][:8]:<8} {r['created']:>8.2f} {r['steps']:>6} "
                     f"{_s(r['first_step_start']):>9} {_s(r['last_step_end']):>9}")
        for step, secs in r["step_seconds"].items():
            lines.append(f"{'':<9} {step:<40} {secs:6.2f} s")
    if t["unfinished"]:
        lines.append(f"took a slot and never finished (left out): {', '.join(t['unfinished'])}")
    o, cap = t["occupancy"], t["cap"]
    if o["first_start"] is None:
        lines.append("no source took a slot in these runs (every source reused, or none started)")
        return "\n".join(lines)
    lines.append(f"scraping: {len(t['slots'])} sources in slots of {cap}; the first at {o['first_start']:.2f}, "
                 f"all {cap} busy first at {_s(o['all_busy_at'])}, last at {_s(o['all_busy_until'])}, the last done at "
                 f"{o['last_end']:.2f}; median {t['median_slot_seconds']:.2f} s per source in its slot; "
                 f"{o['idle_slot_seconds']:.1f} slot-seconds idle in between")
    if t.get("step_phases"):
        lines.append("a source step's time, median / max s: " + ", ".join(
            f"{k} {v['median']:.2f} / {v['max']:.2f}" for k, v in t["step_phases"].items() if v))
    w = t["last_worker"]
    lines.append(f"the last source done was worker {w['worker']}'s: it took its first source at {w['from']:.2f} and "
                 f"ran {w['sources']}, {w['seconds_per_source']:.2f} s each, slot changes included")
    for pid, w in sorted(t["hosts"].items(), key=lambda kv: kv[1]["from"]):
        lines.append(f"  worker {pid}: {w['sources']} source(s), {w['from']:.2f} -> {w['to']:.2f}")
    return "\n".join(lines)


def _s(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.timeline")
    ap.add_argument("--week", default=None, help="Monday or ISO week; default: the last complete week, as for fleet run")
    ap.add_argument("--json", action="store_true", help="print the timeline as JSON instead of a table")
    args = ap.parse_args(argv)

    from fleet.cli import resolve_week
    from fleet.config import settings
    from fleet.defs.instance import get_instance
    from fleet.storage import store as keys
    from fleet.storage.open import open_store

    s, week = settings(), resolve_week(args.week)
    store = open_store(s.store_url, s.artifact_cache)
    t = week_timeline(get_instance(s), week, lambda name: keys.read_outcome(store, week, name) or {},
                      s.max_parallel)
    print(json.dumps(t, indent=1) if args.json else render(t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
