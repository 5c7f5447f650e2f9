"""`fleet freshness` against a real bare data repository with GitHub-like hooks: exit 0 when the due week's raw
commit is there, 1 when it is not, one alert per missed week through the webhook; a bad deadline is one line."""
from fleet_tests.conftest import run_fleet
from fleet_tests.gitremote import clone_and_push
from fleet_tests.test_alerts_e2e import Receiver

W = "2026-11-16"  # a Monday; its raw commit is due Monday 2026-11-23 12:00 UTC by default


def test_the_dead_mans_switch_reads_the_data_repository(fleet_env):
    hook = Receiver()
    env = {**fleet_env.env, "FLEET_ALERT_WEBHOOK": hook.url}
    try:
        res = run_fleet(env, "freshness", "--as-of", "2026-11-23T13:00:00Z")
        assert res.returncode == 1, res.stdout + res.stderr
        assert res.stdout.startswith(f"STALE: no raw commit for week {W} in the data repository by its deadline "
                                     "2026-11-23 12:00 UTC; no week is committed"), res.stdout
        assert [(p["week"], p["check"], p["severity"]) for p in hook.posts] == [(W, "freshness", "ERROR")]
        again = run_fleet(env, "freshness", "--as-of", "2026-11-23T18:00:00Z")
        assert again.returncode == 1 and "(already alerted)" in again.stdout
        assert len(hook.posts) == 1  # one alert per missed week, however often the switch runs

        clone_and_push(fleet_env.remote, {f"data/{W}/raw/books.parquet": b"PAR1 stands for a parquet file PAR1"},
                       f"fleet: raw rows for week {W}")
        res = run_fleet(env, "freshness", "--as-of", "2026-11-23T19:00:00Z")
        assert res.returncode == 0 and f"fresh: week {W}'s raw commit is in the data repository" in res.stdout, res.stdout
        # before the next week's deadline, the week just committed is still the one due
        assert run_fleet(env, "freshness", "--as-of", "2026-11-30T11:59:00Z").returncode == 0
        late = run_fleet(env, "freshness", "--as-of", "2026-11-30T12:01:00Z")
        assert late.returncode == 1 and f"the last week committed is {W}" in late.stdout, late.stdout
        # a later deadline, from the setting
        assert run_fleet({**env, "FLEET_FRESHNESS_DEADLINE": "tue 08:00"}, "freshness",
                         "--as-of", "2026-11-30T12:01:00Z").returncode == 0
        assert len(hook.posts) == 2 and hook.posts[1]["week"] == "2026-11-23"

        bad = run_fleet({**env, "FLEET_FRESHNESS_DEADLINE": "mon 25:00"}, "freshness")
        assert bad.returncode == 2 and bad.stderr.strip() == (
            "fleet: error: FLEET_FRESHNESS_DEADLINE must be a weekday and a UTC time in the week after the week, "
            "such as 'mon 12:00', got 'mon 25:00'"), bad.stderr
        assert run_fleet({**env, "FLEET_FRESHNESS_DEADLINE": "someday"}, "run").returncode == 2  # nothing runs
        assert len(hook.posts) == 2
    finally:
        hook.server.shutdown()
