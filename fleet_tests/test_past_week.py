"""The past-week rule inside the raw assets: a run launched as the UI launches it (no CLI driver) never scrapes
today's web into a past week, reuses a past week's stored rows, and scrapes one only under fleet/force=true."""
import datetime as dt
import json
import subprocess
import sys
import textwrap

from fleet_tests.conftest import SOURCE, WEEK, committed_rows, run_fleet, stored_outcome, writable_dir
from fleet_tests.gitremote import log, make_remote

COUNTED = textwrap.dedent('''
    import os

    import polars as pl

    from fleet import Scraper


    class {cls}(Scraper):
        """A source that counts its scrapes (inline HTML: no site needed)."""

        name = "{name}"
        schema = {{"id": pl.Int64, "week": pl.Date}}
        key = ("id",)
        timeout_s = 60

        async def scrape(self, page, ctx):
            with open(os.path.join(os.environ["FLEET_TEST_COUNTER_DIR"], self.name), "a") as fh:
                fh.write("x")
            await page.set_content("<p class=n>1</p><p class=n>2</p>")
            for text in await page.locator("p.n").all_inner_texts():
                yield {{"id": int(text), "week": ctx.week}}
''')

# A run of the week as the UI's "Materialize all" or a backfill launches it (tags: the partition, and whatever
# the launch dialog adds), then what the follow-up policy asks for, executed as the sensors would.
UI_RUN = textwrap.dedent('''
    import json
    import sys
    from dagster import DagsterEventType, execute_job, reconstructable
    from fleet.config import settings
    from fleet.defs import definitions as d
    from fleet.defs.instance import get_instance
    from fleet.policy import taxonomy as tx
    from fleet.policy.followup import follow_up_request
    from fleet.storage.store import LocalArtifactStore

    if __name__ == "__main__":
        week, extra = sys.argv[1], json.loads(sys.argv[2])
        instance, store = get_instance(settings()), LocalArtifactStore(settings().store_root)
        result = execute_job(reconstructable(d.scrape_week_job), instance,
                             tags={tx.PARTITION_TAG: week, **extra}, raise_on_error=False)
        run = instance.get_run_by_id(result.run_id)
        reused = {}
        for rec in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
            mat = rec.asset_materialization
            reused[mat.asset_key.path[-1]] = mat.metadata["reused"].value
        action, request = follow_up_request(instance, run, settings().crash_reruns, store)
        out = {"success": result.success, "reused": reused, "action": action.kind,
               "failure_tag": instance.get_run_by_id(run.run_id).tags.get(tx.TAG_FAILURE),
               "outcomes": {s: [o.status, o.category, o.error, o.metadata.get("fleet/status")]
                            for s, o in tx.run_outcomes(instance, run, store).items()}}
        if action.kind == "publish":
            pub = execute_job(reconstructable(d.publish_week_job), instance,
                              tags={tx.PARTITION_TAG: week, **request.tags}, raise_on_error=False)
            out["published"] = pub.success
        print(json.dumps(out))
''')

SOURCES = ("alpha", "beta")


def _env(fleet_env):
    d = fleet_env.tmp / "counted"
    d.mkdir(exist_ok=True)
    for name in SOURCES:
        (d / f"{name}.py").write_text(COUNTED.format(name=name, cls=name.capitalize()))
    counters = writable_dir(fleet_env.home)
    script = fleet_env.tmp / "ui_run.py"
    script.write_text(UI_RUN)
    # no FLEET_DEMO_URL: the demo sites are not running, and nothing here needs them
    return {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(d), "FLEET_TEST_COUNTER_DIR": str(counters)}, counters, script


def _scrapes(counters) -> dict:
    return {p.name: len(p.read_text()) for p in sorted(counters.iterdir())}


def _forced_on(fleet_env, name) -> str:
    """The day the stored outcome says ``name`` was scraped on under fleet/force=true: today (UTC), or yesterday
    for a test that crossed midnight."""
    day = stored_outcome(fleet_env.home, name)["forced"]
    today = dt.datetime.now(dt.timezone.utc).date()
    assert day in (today.isoformat(), (today - dt.timedelta(days=1)).isoformat()), day
    return day


def _ui_run(env, script, fleet_env, week=WEEK, tags=None) -> dict:
    res = subprocess.run([sys.executable, str(script), week, json.dumps(tags or {})], env=env, capture_output=True,
                         text=True, timeout=300, cwd=fleet_env.home)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_past_week_without_stored_rows_is_refused_inside_the_run(fleet_env):
    env, counters, script = _env(fleet_env)
    commits = log(fleet_env.remote)
    out = _ui_run(env, script, fleet_env)
    assert out["success"] is False and out["reused"] == {}
    assert sorted(out["outcomes"]) == list(SOURCES)
    for name, (status, category, error, md_status) in out["outcomes"].items():
        assert (status, category, md_status) == ("failed", "refused", "refused")
        assert f"week {WEEK} is older than the last complete week" in error and f"source {name} " in error, error
        assert "fleet/force=true" in error
    assert out["failure_tag"] == "refused"
    assert out["action"] == "none"      # no rerun (not a crash), and nothing to publish
    assert _scrapes(counters) == {}     # nothing was scraped ...
    assert not list((fleet_env.home / "browser-hosts").glob("*.pid"))  # ... nor a worker or browser started
    assert log(fleet_env.remote) == commits

    status = run_fleet(env, "status", "--week", WEEK)
    line = {l.split()[0]: l for l in status.stdout.splitlines()[2:] if l.split()}
    for name in SOURCES:
        assert line[name].split()[1:3] == ["refused", "refused"], status.stdout
        assert line[name].split()[5] == "0"  # a refusal is no attempt
    stored = stored_outcome(fleet_env.home, "alpha")
    assert (stored["status"], stored["category"]) == ("refused", "refused")


def test_a_past_week_with_its_rows_stored_is_published_again_without_the_network(fleet_env):
    env, counters, script = _env(fleet_env)
    # the week's rows are stored by a forced CLI run, committed elsewhere
    (fleet_env.tmp / "elsewhere").mkdir()
    elsewhere = make_remote(fleet_env.tmp / "elsewhere")
    first = run_fleet({**env, "FLEET_DATA_REMOTE": str(elsewhere)}, "run", "--week", WEEK, "--force")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    scraped = _scrapes(counters)
    assert scraped == {"alpha": 1, "beta": 1}
    commits = log(fleet_env.remote)

    out = _ui_run(env, script, fleet_env)
    assert out["success"] is True, out
    assert out["reused"] == {"alpha": True, "beta": True}
    assert out["action"] == "publish" and out["published"] is True
    assert _scrapes(counters) == scraped  # no new scrape
    new = log(fleet_env.remote)[: -len(commits)]
    assert [c["subject"] for c in new] == [f"fleet: processed rows for week {WEEK}", f"fleet: raw rows for week {WEEK}"]
    # the rows are the forced scrape's, whichever run publishes them: the commit still says so
    day = _forced_on(fleet_env, "alpha")
    assert f"Forced: sources scraped on {day} for past week {WEEK} (fleet/force=true): alpha, beta" in new[1]["message"]
    frame = committed_rows(fleet_env.remote, WEEK)
    assert sorted(frame[SOURCE].to_list()) == ["alpha", "alpha", "beta", "beta"]


def test_a_forced_past_week_is_scraped_and_its_commit_says_so(fleet_env):
    env, counters, script = _env(fleet_env)
    commits = log(fleet_env.remote)
    out = _ui_run(env, script, fleet_env, tags={"fleet/force": "true"})
    assert out["success"] is True, out
    assert out["reused"] == {"alpha": False, "beta": False}
    assert _scrapes(counters) == {"alpha": 1, "beta": 1}
    assert out["action"] == "publish" and out["published"] is True
    new = log(fleet_env.remote)[: -len(commits)]
    assert len(new) == 2
    day = _forced_on(fleet_env, "alpha")
    for commit in new:
        assert (f"Forced: sources scraped on {day} for past week {WEEK} (fleet/force=true): alpha, beta"
                in commit["message"]), commit["message"]

    # a tag value that is neither true nor false is refused, naming the tag, not taken as either
    for name in SOURCES:
        for record in (fleet_env.home / "artifacts" / WEEK / "raw" / name).glob("*.outcome.json"):
            record.unlink()
    bad = _ui_run(env, script, fleet_env, tags={"fleet/force": "yes"})
    assert {s: o[1] for s, o in bad["outcomes"].items()} == {"alpha": "refused", "beta": "refused"}
    assert "run tag fleet/force='yes' is neither true nor false" in bad["outcomes"]["alpha"][2]
    assert _scrapes(counters) == {"alpha": 1, "beta": 1}


def _tiny_job():
    from dagster import job, op

    @op
    def nothing():
        return None

    @job
    def tiny():
        nothing()

    return tiny


def test_past_is_judged_when_the_weeks_run_was_created(tmp_path):
    """Not when a step starts: a step of a current week's run, retried (or rerun by the follow-up policy) after
    the week became past, still scrapes; a week already past when its run was created does not."""
    from dagster import DagsterInstance

    from fleet.policy import pastweek
    from fleet.storage.store import LocalArtifactStore

    store = LocalArtifactStore(tmp_path / "artifacts")
    now = dt.datetime.now(dt.timezone.utc)
    current = pastweek.oldest_week(now).isoformat()                    # the last complete week: still scraped
    past = (pastweek.oldest_week(now) - dt.timedelta(days=7)).isoformat()
    later = now + dt.timedelta(days=15)                                 # a retry two weeks on
    with DagsterInstance.ephemeral() as instance:
        tiny = _tiny_job()
        first = instance.create_run_for_job(tiny, tags={"dagster/partition": current})
        rerun = instance.create_run_for_job(tiny, tags={"dagster/partition": current, "fleet/kind": "rerun",
                                                        "fleet/recovers": first.run_id})
        assert pastweek.origin(instance, rerun).run_id == first.run_id
        for run in (first, rerun):
            assert pastweek.judge_step(instance, run, current, "alpha", store=store, now=later) == (None, None)
        why, forced = pastweek.judge_step(instance, first, past, "alpha", store=store, now=later)
        assert forced is None and why.startswith(f"week {past} is older than the last complete week ({current}) "
                                                 "when its run was created")
        assert "source alpha has no complete stored rows" in why

        forced_run = instance.create_run_for_job(tiny, tags={"dagster/partition": past, "fleet/force": "true"})
        its_rerun = instance.create_run_for_job(tiny, tags={"dagster/partition": past, "fleet/kind": "rerun",
                                                            "fleet/recovers": forced_run.run_id})
        for run in (forced_run, its_rerun):  # a rerun of a forced run is forced too
            assert pastweek.judge_step(instance, run, past, "alpha", store=store, now=later) == \
                (None, later.date().isoformat())
