"""Every selector and every piece of wording of Dagster's UI (1.13) that fleet's UI tests rely on, in one place:
Dagster changes them between minor releases, and this is the one module to fix when it does."""
from __future__ import annotations

import re

LINEAGE = "/asset-groups"
AUTOMATION = "/automation"
COMMUNITY_MODAL = "Join the Dagster community"
EXECUTION_FAILED = "Execution failed"   # a check whose step failed before evaluating it
CHECK_FAILED = "Failed"


def asset_url(base: str, key: str, view: str | None = None) -> str:
    """An asset's page (``key`` like ``raw/books``); ``view``: events, checks, partitions or None (overview)."""
    return f"{base}/assets/{key}" + (f"?view={view}" if view else "")


def skip_community_modal(page, timeout_ms: float) -> None:
    """The first visit of a new instance asks to join the community; "Skip" dismisses it for good."""
    page.get_by_text(COMMUNITY_MODAL).wait_for(timeout=timeout_ms)
    page.get_by_role("button", name="Skip").click()
    page.get_by_text(COMMUNITY_MODAL).wait_for(state="hidden")


def navigation(page):
    """The left navigation's entries, as an operator finds them."""
    return {name: page.get_by_role("link", name=name) for name in ("Overview", "Runs", "Catalog", "Automation",
                                                                   "Lineage")}


def expand_all_groups(page) -> None:
    """The global lineage shows asset groups collapsed; its settings menu expands them all."""
    page.get_by_role("img", name="zoom_in").wait_for()  # the graph and its controls are drawn
    page.get_by_role("img", name="settings").last.click()
    expand = page.get_by_role("menuitem").filter(has_text="Expand all groups")
    collapse = page.get_by_role("menuitem").filter(has_text="Collapse all groups")
    expand.or_(collapse).first.wait_for()
    if expand.count():
        expand.click()
    else:
        page.keyboard.press("Escape")


def graph_node_names(page) -> list[str]:
    """The asset names the graph shows (a long one middle-truncated with "…")."""
    return page.locator('[class*="AssetNode_assetName"]').all_inner_texts()


def shown_as(name: str, texts: list[str]) -> bool:
    """Whether ``name`` is among the graph's (possibly middle-truncated) node names."""
    for t in texts:
        t = t.strip()
        head, sep, tail = t.partition("…")
        if t == name or (sep and name.startswith(head) and name.endswith(tail)):
            return True
    return False


def materialize_all(page, partitions: str, tags: dict | None = None) -> str:
    """"Materialize all…" on the lineage page for ``partitions`` (one key, or ``[first...last]``), with run tags
    added in the launch dialog; returns the toast: "Launched run <id>" or "Created backfill <id>"."""
    # "Materialize all (N)…" where the graph also holds assets that are not materialized (fleet/requests)
    page.get_by_role("button", name=re.compile(r"Materialize all( \(\d+\))?…")).click()
    dialog = page.get_by_role("dialog").filter(has_text="Launch runs to materialize")
    field = dialog.get_by_placeholder(re.compile("partitions|ex: "))
    field.fill(partitions)
    field.press("Enter")
    if tags:
        dialog.get_by_text("Tags", exact=True).click()
        dialog.get_by_role("button", name="Add tags").click()
        tag_dialog = page.get_by_role("dialog").filter(has_text="Add tags to run")
        for i, (key, value) in enumerate(tags.items()):
            if i:
                tag_dialog.get_by_role("button", name="Add custom tag").click()
            tag_dialog.get_by_placeholder("Tag Key").nth(i).fill(key)
            tag_dialog.get_by_placeholder("Tag Value").nth(i).fill(value)
        tag_dialog.get_by_role("button", name="Apply").click()
        for key, value in tags.items():
            dialog.get_by_text(f"{key}: {value}").wait_for()
    launch = dialog.get_by_role("button", name=re.compile(r"^Launch (1 run|backfill)$"))
    launch.click()
    toast = page.get_by_text(re.compile(r"^(Launched run|Created backfill) \w+"))
    toast.first.wait_for()
    return toast.first.inner_text()


def events(page, base: str, key: str, partition: str):
    """The asset's Events tab, and the event row of ``partition``'s latest event (an observation of a failed
    week, which fleet logs: Dagster records no asset event for a failed step)."""
    page.goto(asset_url(base, key, "events"))
    page.get_by_text(partition, exact=True).first.click()  # its entry in the list of events
    row = page.get_by_text(re.compile(rf"^Partition {partition} (observed|materialized) in run"))
    row.first.wait_for()
    return row.first


def open_markdown(page, label: str = "[Show Markdown]"):
    """A markdown metadata value opens in a dialog; returns that dialog."""
    page.get_by_text(label, exact=True).first.click()
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    return dialog


def close_dialog(page) -> None:
    page.get_by_role("dialog").get_by_role("button", name="Close").click()
    page.get_by_role("dialog").wait_for(state="hidden")


def check_detail(page, base: str, key: str, check: str):
    """The asset's Checks tab with ``check`` selected; returns its "Latest execution" evaluation result badge
    area (its text: "Failed", "Succeeded", "Execution failed", ...)."""
    page.goto(asset_url(base, key, "checks"))
    page.get_by_text(check, exact=True).first.click()
    page.get_by_text("Latest execution", exact=True).wait_for()
    return page.get_by_text("Evaluation result", exact=True).locator("xpath=..")


def check_list_status(page, check: str):
    """The status line under ``check`` in the Checks tab's list (e.g. "Failed")."""
    return page.get_by_text(check, exact=True).first.locator("xpath=following-sibling::*[1]")


def plots(page, base: str, key: str, label: str):
    """The asset overview's metadata plots; returns the title of ``label``'s plot and its canvas."""
    page.goto(asset_url(base, key))
    page.get_by_text("Plots", exact=True).first.click()
    title = page.get_by_text(label, exact=True).first
    title.wait_for()
    return title, title.locator("xpath=following::canvas[1]")


def automation_rows(page, base: str) -> dict:
    page.goto(base + AUTOMATION)
    out = {}
    for name, path, kind in (("fleet_after_failed_run", "sensors", "Run status sensor"),
                             ("fleet_after_scrape_run", "sensors", "Run status sensor"),
                             ("weekly_fleet", "schedules", "Scheduled")):
        link = page.locator(f'a[href$="/{path}/{name}"]').filter(has_text=kind)
        link.wait_for()
        out[name] = link
    return out


def schedule_switch(page):
    """On a schedule's page: its on/off switch (a checkbox styled as a switch, labelled "Running")."""
    return page.locator("label:has(input[type=checkbox])").first, page.locator("input[type=checkbox]").first


def tick_label(moment) -> str:
    """How the tick picker names a tick: "Nov 30, 6:00 AM UTC" (the year only when it is not this year's)."""
    import datetime as dt

    year = "" if moment.year == dt.datetime.now(dt.timezone.utc).year else f", {moment.year}"
    hour = moment.strftime("%I").lstrip("0")
    return f"{moment:%b} {moment.day}{year}, {hour}:{moment:%M} {moment:%p} UTC"


def preview_and_launch_tick(page, label: str) -> None:
    """"Preview tick result" for the tick ``label``, then "Launch all & commit tick result"."""
    page.get_by_role("button", name="Preview tick result").click()
    dialog = page.get_by_role("dialog").filter(has_text="Preview tick result for")
    dialog.get_by_text("Select an evaluation time to simulate").wait_for()
    dialog.get_by_role("button").filter(has_text=" UTC").first.click()
    page.get_by_role("menuitem", name=label, exact=True).click()
    dialog.get_by_role("button", name="Continue").click()
    dialog.get_by_text("1 run requests").wait_for()
    dialog.get_by_role("button", name="Launch all & commit tick result").click()
    page.get_by_text("Launched 1 runs").first.wait_for()
