"""Checks and alerts over several real weeks: the demo sites change between weeks; a webhook gets one POST per problem."""
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fleet.demo.sites import set_mode
from fleet_tests.conftest import run_fleet

SOURCES = ["--source", "books", "--source", "jobs", "--source", "stocks"]


class Receiver:
    def __init__(self):
        self.posts = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"

    def keys(self, start=0):
        return sorted((p.get("source") or "-", p["week"], p["check"], p["severity"]) for p in self.posts[start:])


def printed_alerts(stdout: str) -> list[tuple[str, str, str]]:
    """(severity, source, check) of each alert line `fleet run` printed under "alerts for week ...":"""
    return sorted(re.findall(r"^  (ERROR|WARN) +(\S+) +(\S+) ", stdout, re.M))


def test_checks_alert_once_per_problem_over_real_weeks(fleet_env):
    hook = Receiver()
    state = fleet_env.tmp / "sites"
    env = {**fleet_env.env, "FLEET_ALERT_WEBHOOK": hook.url, "FLEET_DEMO_STATE_DIR": str(state)}
    try:
        for week in ("2026-10-26", "2026-11-02", "2026-11-09"):   # clean weeks build the history
            res = run_fleet(env, "demo", "--week", week, "--force", *SOURCES)
            assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        assert hook.posts == []  # no alert when all is well

        set_mode(state, "books", "selector_rot")      # price cells stop matching in 9 rows of 10
        set_mode(state, "jobs", "volume_collapse")    # 5% of the usual rows
        set_mode(state, "stocks", "empty")            # nothing at all
        res = run_fleet(env, "demo", "--week", "2026-11-16", "--force", *SOURCES)
        # books and jobs are held out of the commit by the quality gate and stocks has no rows: nothing to commit
        assert res.returncode == 2, res.stdout[-3000:]
        got = hook.keys()
        assert ("books", "2026-11-16", "coverage", "WARN") in got
        assert ("jobs", "2026-11-16", "volume", "ERROR") in got
        assert ("stocks", "2026-11-16", "non_empty", "ERROR") in got
        assert len(got) == len(set(got))  # one POST per problem
        rot = next(p for p in hook.posts if p["check"] == "coverage")
        assert "selector rot suspected: column `price` filled in" in rot["message"] and "usually 100%" in rot["message"]
        assert rot["last_good_week"] is not None and rot["evidence"] is not None
        vol = next(p for p in hook.posts if p["check"] == "volume")
        assert vol["message"] == "volume collapse: 2 rows, usual 35"  # 5% of 35, rounded up
        # fleet run ends with the alerts it delivered: one line each, the same ones the webhook got
        assert "alerts for week 2026-11-16 (" in res.stdout, res.stdout[-3000:]
        assert printed_alerts(res.stdout) == sorted((p["severity"], p["source"] or "week", p["check"]) for p in hook.posts)

        n = len(hook.posts)
        assert run_fleet(env, "demo", "--week", "2026-11-16", "--force", *SOURCES).returncode == 2
        assert len(hook.posts) == n  # a rerun of the same week repeats nothing

        set_mode(state, "books", "normal")
        set_mode(state, "jobs", "normal")
        run_fleet(env, "demo", "--week", "2026-11-23", "--force", *SOURCES)  # a past week once 2026-12-07 began
        week5 = hook.keys(n)
        assert ("stocks", "2026-11-23", "stale", "ERROR") in week5
        assert ("stocks", "2026-11-23", "non_empty", "ERROR") in week5
        assert not any(k[0] in ("books", "jobs") for k in week5)
        log = (fleet_env.home / "alerts" / "alerts.jsonl").read_text().splitlines()
        assert len(log) == len(hook.posts)
    finally:
        hook.server.shutdown()
