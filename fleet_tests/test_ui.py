"""The Dagster UI as an operator uses it (issue 39): `fleet ui` (webserver and daemon) with the demo sites, on a
free loopback port and a temporary FLEET_HOME, driven by Playwright in Debian's headless Chromium shell.

One UI for the module. Each week is launched once, from the UI, by a module fixture, and several tests assert on
it: the week in progress with faults (Materialize all), the last complete week (the schedule's tick), a past week
scraped under the run tag fleet/force=true, and a backfill of two past weeks. Every step's screenshot is saved in
``--ui-screenshots DIR``/test_ui, else in the session's temporary folder (its path is printed at the end)."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleet.weeks import last_complete_week, parse_week
from fleet_tests import ui_selectors as ui
from fleet_tests.conftest import ROOT, SOURCE, committed_rows, run_fleet, start_ui, stop_ui
from fleet_tests.gitremote import log, make_remote


def _weeks(now: dt.datetime) -> None:
    """The module's weeks, as of ``now``: set again as the UI starts (a session that crosses Monday 00:00 UTC
    between collecting and reaching this module would otherwise scrape a week that has become past)."""
    global NOW, FAULT_WEEK, TICK, TICK_WEEK, PAST_A, PAST_B
    NOW = now
    FAULT_WEEK = parse_week(NOW.date()).isoformat()          # the week in progress: never a past week
    TICK = dt.datetime.combine(parse_week(NOW.date()), dt.time(6), tzinfo=dt.timezone.utc)  # this Monday's tick
    TICK_WEEK = last_complete_week(TICK.date()).isoformat()  # the week that tick scrapes
    PAST_A = (parse_week(TICK_WEEK) - dt.timedelta(days=7)).isoformat()    # forced from the UI, then backfilled
    PAST_B = (parse_week(TICK_WEEK) - dt.timedelta(days=14)).isoformat()   # backfilled with nothing stored


_weeks(dt.datetime.now(dt.timezone.utc))

SCRAPERS = ROOT / "scrapers"
SOURCE_FILES = [SCRAPERS / "books.py", SCRAPERS / "stocks.py",
                SCRAPERS / "faults" / "broken_selector.py",   # raises
                SCRAPERS / "faults" / "hang_async.py",        # hangs until its hard limit
                SCRAPERS / "faults" / "empty_feed.py",        # no rows: non_empty fails
                ROOT / "fleet_tests" / "scrapers_ui" / "hostile_page.py"]  # raises on a page that runs script
SOURCES = sorted(p.stem for p in SOURCE_FILES)
FAILING = ["broken_selector", "hang_async", "hostile_page"]
CHECK = "quality"  # a source's one check, carrying five: non_empty, volume, coverage, schema, structure
PUBLISH = ["consolidated_raw_rows", "raw_commit", "post_processed", "processed_commit"]
TIMEOUT_MS = 90_000
WEEK_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def site(tmp_path_factory, request):
    from playwright.sync_api import sync_playwright

    from fleet.config import chromium_path
    from fleet.engine import pool

    _weeks(dt.datetime.now(dt.timezone.utc))
    tmp = tmp_path_factory.mktemp("ui")
    home, scrapers = tmp / "home", tmp / "scrapers"
    home.mkdir()
    scrapers.mkdir()
    for path in SOURCE_FILES:
        shutil.copy(path, scrapers / path.name)
    remote = make_remote(tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k != "DAGSTER_HOME"}
    env.update(FLEET_HOME=str(home), FLEET_DATA_REMOTE=str(remote), FLEET_DEMO_LATENCY_MS="20",
               FLEET_SCRAPERS_DIR=str(scrapers), FLEET_MAX_PARALLEL="3", FLEET_START_WEEK="2026-01-05",
               DAGSTER_HOME=str(home / "dagster"), PYTHONPATH=str(ROOT))
    chosen = request.config.getoption("--ui-screenshots")
    shots = Path(chosen) / "test_ui" if chosen else tmp / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    proc, port = start_ui(SimpleNamespace(home=home, tmp=tmp), env, ticked=False, demo=True)
    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=chromium_path())
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT_MS)
    taken = []

    def snap(name: str) -> Path:
        path = shots / f"{len(taken) + 1:02d}-{name}.png"
        page.screenshot(path=str(path))
        taken.append(path)
        return path

    s = SimpleNamespace(base=f"http://127.0.0.1:{port}", page=page, env=env, home=home, remote=remote, tmp=tmp,
                        scrapers=scrapers, snap=snap, shots=shots, first_visit=None)
    # The very first page of a new instance: whatever it needs beyond `fleet ui` is what the README must say.
    page.goto(s.base + "/")
    try:
        ui.skip_community_modal(page, TIMEOUT_MS)
        s.first_visit = "skipped"
    except Exception as exc:  # test_first_visit reports it; the other tests go on
        s.first_visit = exc
    snap("first-visit")
    try:
        yield s
    finally:
        browser.close()
        pw.stop()
        stop_ui(proc)
        pool.stop(home / "browser-hosts")
        print(f"\nUI screenshots: {shots}")


def gql(site, query: str, **variables) -> dict:
    body = json.dumps({"query": query, "variables": variables}).encode()
    req = urllib.request.Request(site.base + "/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        out = json.load(resp)
    assert not out.get("errors"), out["errors"]
    return out["data"]


RUNS = """query($week: String!) { runsOrError(filter: {tags: [{key: "dagster/partition", value: $week}]}) {
  ... on Runs { results { runId jobName status tags { key value } } } } }"""


def runs(site, week: str) -> list[dict]:
    found = gql(site, RUNS, week=week)["runsOrError"]["results"]
    for r in found:
        r["tags"] = {t["key"]: t["value"] for t in r["tags"]}
    return found


UNFINISHED = {"QUEUED", "NOT_STARTED", "STARTING", "STARTED", "MANAGED", "CANCELING"}


def wait_until(site, what: str, predicate, timeout_s: float = WEEK_TIMEOUT_S):
    """Poll the state (GraphQL, the data repository) until ``predicate()`` returns something true."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            tail = (site.tmp / "ui.log").read_text(errors="replace")[-4000:]
            raise AssertionError(f"gave up waiting for {what}\n{tail}")
        time.sleep(1)


def wait_published(site, week: str, publishes: int = 1) -> list[dict]:
    """The week's runs once they are all finished and ``publishes`` publish runs succeeded."""
    def done():
        rs = runs(site, week)
        ok = [r for r in rs if r["jobName"] == "publish_week" and r["status"] == "SUCCESS"]
        return rs if len(ok) >= publishes and not any(r["status"] in UNFINISHED for r in rs) else None
    return wait_until(site, f"week {week} published ({publishes})", done)


def commit_subjects(site) -> list[str]:
    return [c["subject"] for c in log(site.remote)]


def fleet_status(site, week: str) -> str:
    res = run_fleet(site.env, "status", "--week", week, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


# ---------------------------------------------------------------- the weeks, each launched once from the UI


@pytest.fixture(scope="module")
def fault_week(site):
    """"Materialize all" for the week in progress, picked in the partition field of the launch dialog."""
    page = site.page
    page.goto(site.base + ui.LINEAGE)
    toast = ui.materialize_all(page, FAULT_WEEK)
    site.snap("materialize-all-launched")
    assert toast.startswith("Launched run"), toast
    return wait_published(site, FAULT_WEEK)


@pytest.fixture(scope="module")
def tick_week(site):
    """The schedule turned on from the UI, and this Monday's tick evaluated and launched from its page."""
    page = site.page
    from playwright.sync_api import expect

    rows = ui.automation_rows(page, site.base)
    site.snap("automation")
    rows["weekly_fleet"].click()
    switch, box = ui.schedule_switch(page)
    expect(box).not_to_be_checked()
    switch.click()
    expect(box).to_be_checked()
    site.snap("schedule-on")
    ui.preview_and_launch_tick(page, ui.tick_label(TICK))
    site.snap("tick-launched")
    return wait_published(site, TICK_WEEK)


@pytest.fixture(scope="module")
def past_weeks(site):
    """PAST_A materialized by hand from the UI (refused), then again under the run tag fleet/force=true (scraped);
    then a backfill of PAST_B..PAST_A from the UI, without the tag."""
    page = site.page
    page.goto(site.base + ui.LINEAGE)
    toast = ui.materialize_all(page, PAST_A)
    site.snap("past-week-by-hand-launched")
    assert toast.startswith("Launched run"), toast
    by_hand = wait_until(site, f"the hand-launched run of {PAST_A}",
                         lambda: [r for r in runs(site, PAST_A) if r["status"] not in UNFINISHED])
    hand_refusals = {name: observation(site, name, PAST_A)["description"] for name in SOURCES}
    page.goto(site.base + ui.LINEAGE)
    toast = ui.materialize_all(page, PAST_A, tags={"fleet/force": "true"})
    site.snap("forced-past-week-launched")
    assert toast.startswith("Launched run"), toast
    wait_published(site, PAST_A)
    commits = log(site.remote)
    page.goto(site.base + ui.LINEAGE)
    toast = ui.materialize_all(page, f"[{PAST_B}...{PAST_A}]")
    site.snap("backfill-launched")
    assert toast.startswith("Created backfill"), toast
    backfill = toast.split()[-1]
    refused = wait_until(site, f"the backfill's run of {PAST_B}",
                         lambda: [r for r in runs(site, PAST_B) if r["status"] not in UNFINISHED
                                  and r["tags"].get("dagster/backfill") == backfill])
    reused = wait_published(site, PAST_A, publishes=2)
    return SimpleNamespace(backfill=backfill, commits_before=commits, refused=refused, reused=reused,
                           by_hand=by_hand, hand_refusals=hand_refusals)


# ---------------------------------------------------------------- 6. the first visit


def test_first_visit_needs_only_what_the_readme_says(site):
    """`fleet ui` is all the README asks for: the first page offers the community modal, "Skip" dismisses it, and
    the code location is loaded (no error to fix first)."""
    if isinstance(site.first_visit, Exception):
        raise site.first_visit
    for name, link in ui.navigation(site.page).items():
        assert link.first.is_visible(), name
    data = gql(site, """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
                          locationOrLoadError { __typename } } } } }""")
    [entry] = data["workspaceOrError"]["locationEntries"]
    assert (entry["loadStatus"], entry["locationOrLoadError"]["__typename"]) == ("LOADED", "RepositoryLocation")
    site.page.reload()
    site.page.get_by_role("link", name="Lineage").first.wait_for()
    assert not site.page.get_by_text(ui.COMMUNITY_MODAL).is_visible()  # dismissed for good


# ---------------------------------------------------------------- 1. the asset graph


ASSETS = """{ assetNodes { assetKey { path } description groupName dependencyKeys { path } } }"""


def test_asset_graph_shows_every_source_and_the_publish_chain_with_descriptions(site):
    from fleet.scraping.discovery import discover

    page = site.page
    page.goto(site.base + ui.LINEAGE)
    ui.expand_all_groups(page)
    page.reload()  # re-fitted to the expanded graph
    names = SOURCES + PUBLISH
    wait_until(site, "every asset in the graph",
               lambda: all(ui.shown_as(n, ui.graph_node_names(page)) for n in names), timeout_s=90)
    site.snap("asset-graph")
    nodes = {"/".join(n["assetKey"]["path"]): n for n in gql(site, ASSETS)["assetNodes"]}
    # and the commands' run requests, an external asset the sensor fleet_requests answers (fleet/defs/requests.py)
    assert sorted(nodes) == sorted([f"raw/{s}" for s in SOURCES] + PUBLISH + ["fleet/requests"])
    deps = {k: sorted("/".join(d["path"]) for d in n["dependencyKeys"]) for k, n in nodes.items()}
    assert deps["consolidated_raw_rows"] == [f"raw/{s}" for s in SOURCES]
    assert deps["raw_commit"] == ["consolidated_raw_rows"]
    assert deps["post_processed"] == ["raw_commit"]
    assert deps["processed_commit"] == ["post_processed"]
    for src in discover([site.scrapers]):
        assert src.description and nodes[f"raw/{src.name}"]["description"] == src.description
        page.goto(ui.asset_url(site.base, f"raw/{src.name}"))
        page.get_by_text(src.description, exact=True).wait_for()
    site.snap("asset-description")


# ---------------------------------------------------------------- 2. a materialization from the UI


def test_materialize_all_from_the_ui_reaches_both_commits(site, fault_week):
    [scrape] = [r for r in fault_week if r["tags"].get("dagster/from_ui") == "true"]
    assert scrape["status"] == "FAILURE"  # the failing sources' steps failed
    publish = [r for r in fault_week if r["jobName"] == "publish_week"]
    assert [(r["status"], r["tags"].get("dagster/sensor_name")) for r in publish] == \
        [("SUCCESS", "fleet_after_failed_run")]
    subjects = commit_subjects(site)
    assert f"fleet: raw rows for week {FAULT_WEEK}" in subjects
    assert f"fleet: processed rows for week {FAULT_WEEK}" in subjects
    frame = committed_rows(site.remote, FAULT_WEEK)
    assert sorted(set(frame[SOURCE])) == ["books", "stocks"]
    assert committed_rows(site.remote, FAULT_WEEK, "processed").height > 0
    message = next(c["message"] for c in log(site.remote) if c["subject"] == f"fleet: raw rows for week {FAULT_WEEK}")
    for name in FAILING:
        assert name in message.split("Sources missing")[1], message
    site.page.goto(f"{site.base}/runs/{scrape['runId']}")
    site.page.get_by_text(scrape["runId"][:8]).first.wait_for()
    site.snap("materialize-all-run")


OBSERVATIONS = """query($path: [String!]!, $week: String!) { assetNodes(assetKeys: [{path: $path}]) {
  assetObservations(partitions: [$week]) { description metadataEntries { label
    ... on TextMetadataEntry { text } ... on MarkdownMetadataEntry { mdStr } } } } }"""


def observation(site, source: str, week: str) -> dict:
    [node] = gql(site, OBSERVATIONS, path=["raw", source], week=week)["assetNodes"]
    assert node["assetObservations"], f"no observation of raw/{source} for {week}"
    latest = node["assetObservations"][0]
    latest["meta"] = {m["label"]: m.get("text", m.get("mdStr")) for m in latest["metadataEntries"]}
    return latest


@pytest.mark.parametrize("source", ["broken_selector", "hang_async"])
def test_a_failed_source_shows_its_category_error_screenshot_and_html_on_its_page(site, fault_week, source):
    """broken_selector raises, hang_async hangs until its hard limit: the asset's own page shows the week's
    failure with its category and error, the screenshot renders on a click, the page's HTML shows as text."""
    page = site.page
    ui.events(page, site.base, f"raw/{source}", FAULT_WEEK).click()
    obs = observation(site, source, FAULT_WEEK)
    category = obs["meta"]["fleet/category"]
    assert category in ("source", "infra")
    shown = page.get_by_text(re.compile(rf"^\[{category}\] source {source}: ")).first
    shown.wait_for()
    assert obs["description"].startswith(f"[{category}] source {source}: ")
    page.get_by_text(obs["meta"]["error"].strip().splitlines()[0], exact=False).first.wait_for()
    html = obs["meta"]["page_html"]
    assert html.lstrip().lower().startswith(("<!doctype", "<html")), html[:200]
    page.get_by_text(html[:60], exact=False).first.wait_for()  # the markup itself, as text
    if source == "broken_selector":  # its Playwright trace, and the command that opens it (a hang has no time left)
        assert obs["meta"]["debug"] == f"fleet debug {source} --week {FAULT_WEEK}", obs["meta"]
        page.get_by_text(f"fleet debug {source} --week {FAULT_WEEK}").first.wait_for()
    site.snap(f"failed-{source}")
    dialog = ui.open_markdown(page)
    img = dialog.locator("img").first
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle())
    site.snap(f"failed-{source}-screenshot")
    ui.close_dialog(page)


def test_the_stored_page_html_never_runs_in_the_operators_browser(site, fault_week):
    """hostile_page stored a page whose script and onerror handler set window.fleetHostileRan: shown as
    evidence, it is text; none of its elements exist in the UI's document."""
    page = site.page
    ui.events(page, site.base, "raw/hostile_page", FAULT_WEEK).click()
    page.get_by_text("window.fleetHostileRan = true", exact=False).first.wait_for()  # visible, as text
    ui.open_markdown(page).locator("img").first.wait_for()
    site.snap("hostile-page-evidence")
    ui.close_dialog(page)
    assert page.evaluate("() => window.fleetHostileRan === undefined")
    assert page.locator("#fleet-hostile, #fleet-hostile-img").count() == 0
    assert all(f.get_attribute("sandbox") is not None for f in page.locator("iframe").all())


# ---------------------------------------------------------------- 3. the checks


CHECK_EXECUTION = """query($path: [String!]!, $check: String!, $week: String!) {
  assetCheckExecutions(assetKey: {path: $path}, checkName: $check, partition: $week, limit: 1) {
    status evaluation { severity success description } } }"""


def check_execution(site, source: str, check: str, week: str) -> dict | None:
    found = gql(site, CHECK_EXECUTION, path=["raw", source], check=check, week=week)["assetCheckExecutions"]
    return found[0] if found else None


def test_empty_feed_fails_non_empty_with_error_severity(site, fault_week):
    page = site.page
    result = ui.check_detail(page, site.base, "raw/empty_feed", CHECK)
    result.get_by_text(ui.CHECK_FAILED, exact=True).wait_for()
    page.get_by_text(f"non_empty: empty feed: source empty_feed returned no rows for week {FAULT_WEEK}").first.wait_for()
    site.snap("check-non-empty-failed")
    got = check_execution(site, "empty_feed", CHECK, FAULT_WEEK)
    assert (got["status"], got["evaluation"]["severity"], got["evaluation"]["success"]) == ("FAILED", "ERROR", False)


# ---------------------------------------------------------------- 7. the CLI and the UI agree


def test_fleet_status_lists_the_failed_checks_dagster_records_for_the_week(site, fault_week):
    """Before, `fleet status` read only the evaluated checks ("checks: 1 failed") while the UI showed, besides,
    the check of every failed source as failed (its step failed before evaluating it). An evaluated check is
    listed per failed part (its name: non_empty, ...), one that never ran as the check itself."""
    out = fleet_status(site, FAULT_WEEK)
    listing = out.partition("checks: ")[2]
    count = int(listing.split()[0])
    cli = set()
    for line in listing.splitlines()[1:1 + count]:
        severity, source, check = line.split()[:3]
        cli.add((source, check))
    dagster = {s for s in SOURCES
               if (check_execution(site, s, CHECK, FAULT_WEEK) or {}).get("status") in ("FAILED", "EXECUTION_FAILED")}
    assert {s for s, _ in cli} == dagster and len(cli) == count, out
    assert ("empty_feed", "non_empty") in cli
    assert {(s, CHECK) for s in FAILING} <= cli
    page = site.page
    page.goto(ui.asset_url(site.base, "raw/broken_selector", "checks"))
    page.get_by_text(CHECK, exact=True).first.wait_for()
    wait_until(site, "the failed check listed",
               lambda: page.get_by_text(ui.CHECK_FAILED, exact=True).count() >= 1, timeout_s=60)
    site.snap("failed-source-checks")


# ---------------------------------------------------------------- 4. automation


SENSORS = """{ sensorsOrError(repositorySelector: {repositoryLocationName: "fleet",
  repositoryName: "__repository__"}) { ... on Sensors { results { name sensorState { status } } } } }"""
SCHEDULE = """{ scheduleOrError(scheduleSelector: {repositoryLocationName: "fleet",
  repositoryName: "__repository__", scheduleName: "weekly_fleet"}) { ... on Schedule { scheduleState { status } } } }"""


def test_schedule_turned_on_from_the_ui_and_its_tick_runs_the_right_week(site, tick_week):
    sensors = {s["name"]: s["sensorState"]["status"] for s in gql(site, SENSORS)["sensorsOrError"]["results"]}
    assert sensors == {"fleet_after_failed_run": "RUNNING", "fleet_after_scrape_run": "RUNNING",
                       "fleet_requests": "RUNNING"}
    assert gql(site, SCHEDULE)["scheduleOrError"]["scheduleState"]["status"] == "RUNNING"
    [scrape] = [r for r in tick_week if r["tags"].get("dagster/schedule_name") == "weekly_fleet"]
    assert scrape["jobName"] == "scrape_week" and scrape["tags"]["fleet/kind"] == "scrape"
    assert scrape["tags"]["dagster/partition"] == TICK_WEEK  # the week before the tick's, not today's
    assert any(r["jobName"] == "publish_week" and r["status"] == "SUCCESS" for r in tick_week)
    assert f"fleet: raw rows for week {TICK_WEEK}" in commit_subjects(site)


ROW_COUNTS = """query($weeks: [String!]!) { assetNodes(assetKeys: [{path: ["raw", "books"]}]) {
  assetMaterializations(partitions: $weeks) { partition metadataEntries { label ... on IntMetadataEntry { intValue } } } } }"""


def test_row_count_plot_shows_two_weeks(site, fault_week, tick_week):
    title, canvas = ui.plots(site.page, site.base, "raw/books", "dagster/row_count")
    canvas.wait_for()
    title.scroll_into_view_if_needed()
    site.snap("row-count-plot")
    [node] = gql(site, ROW_COUNTS, weeks=[FAULT_WEEK, TICK_WEEK])["assetNodes"]
    counts = {m["partition"]: next(e["intValue"] for e in m["metadataEntries"] if e["label"] == "dagster/row_count")
              for m in node["assetMaterializations"]}
    assert counts == {FAULT_WEEK: 24, TICK_WEEK: 24}


# ---------------------------------------------------------------- 5. backfills never scrape today into the past


def test_a_ui_backfill_of_two_past_weeks_reuses_stored_rows_or_refuses(site, past_weeks):
    page = site.page
    # PAST_A by hand, without the tag: every source refused inside the run, nothing published for it then
    [by_hand] = past_weeks.by_hand
    assert by_hand["status"] == "FAILURE" and by_hand["tags"].get("dagster/from_ui") == "true"
    for name, why in past_weeks.hand_refusals.items():
        assert why.startswith(f"[refused] week {PAST_A} is older") and f"source {name} has" in why, why
    # PAST_A, forced from the launch dialog's tags: its commit message says what was scraped when
    raw_a = next(c for c in log(site.remote) if c["subject"] == f"fleet: raw rows for week {PAST_A}")
    assert re.search(rf"Forced: sources scraped on {NOW.date()} for past week {PAST_A} \(fleet/force=true\): "
                     r"books, empty_feed, stocks", raw_a["message"]), raw_a["message"]
    # ... backfilled: every stored source reused without the network, the week consolidated and committed again
    # from them (the same content: no new commit), the sources with nothing stored refused
    assert log(site.remote) == past_weeks.commits_before
    [backfill_a] = [r for r in past_weeks.reused if r["tags"].get("dagster/backfill") == past_weeks.backfill]
    reused = gql(site, """query($week: String!) { assetNodes { assetKey { path } assetMaterializations(partitions: [$week]) {
        runId metadataEntries { label ... on BoolMetadataEntry { boolValue } } } } }""", week=PAST_A)["assetNodes"]
    in_backfill = {"/".join(n["assetKey"]["path"]): next(
        (e.get("boolValue") for m in n["assetMaterializations"] if m["runId"] == backfill_a["runId"]
         for e in m["metadataEntries"] if e["label"] == "reused"), None) for n in reused}
    assert {k: v for k, v in in_backfill.items() if k.startswith("raw/") and v is not None} == \
        {"raw/books": True, "raw/empty_feed": True, "raw/stocks": True}
    for name in FAILING:
        assert observation(site, name, PAST_A)["description"].startswith(f"[refused] week {PAST_A} is older")
    status_a = fleet_status(site, PAST_A)
    for name in FAILING:
        assert re.search(rf"^{name}\s+refused\s+refused\s", status_a, re.M), status_a
    # PAST_B, with nothing stored: each source refused inside the run, naming the week and itself; not committed
    assert [r["status"] for r in past_weeks.refused] == ["FAILURE"]
    assert not any(r["jobName"] == "publish_week" for r in runs(site, PAST_B))
    assert not any(PAST_B in s for s in commit_subjects(site))
    for name in SOURCES:
        why = observation(site, name, PAST_B)["description"]
        assert why.startswith(f"[refused] week {PAST_B} is older than the last complete week"), why
        assert f"source {name} has no complete stored rows" in why and "fleet/force=true" in why, why
    ui.events(page, site.base, "raw/books", PAST_B).click()
    page.get_by_text(re.compile(rf"^\[refused\] week {PAST_B} is older than the last complete week")).first.wait_for()
    site.snap("backfill-refused-week")
    status_b = fleet_status(site, PAST_B)
    for name in SOURCES:
        assert re.search(rf"^{name}\s+refused\s+refused\s", status_b, re.M), status_b
