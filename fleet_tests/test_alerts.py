"""fleet.alerts: dedup ledger, JSONL log, a real webhook receiver on 127.0.0.1, a refusing webhook, concurrency."""
import json
import multiprocessing
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from fleet.quality import alerts as al
from fleet.quality.checks import CheckOutcome

WEEK = "2026-11-16"


@pytest.fixture(autouse=True)
def _no_sink_env(monkeypatch):
    for name in ("FLEET_ALERT_WEBHOOK", "FLEET_ALERT_SLACK", "FLEET_SLACK_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def make(source="book_prices", check="volume", severity="WARN", message="volume collapse: 5 rows, usual 50", **kw):
    return al.Alert(source=source, week=WEEK, check=check, severity=severity, category=kw.pop("category", "source"),
                    message=message, evidence=kw.pop("evidence", {"screenshot": "/e/s.png", "html": "/e/p.html"}),
                    last_good_week=kw.pop("last_good_week", "2026-11-09"), run_id=kw.pop("run_id", "r1"))


@pytest.fixture
def receiver():
    posts: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            posts.append({"ctype": self.headers["Content-Type"], "json": json.loads(body)})
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", posts
    server.shutdown()
    server.server_close()
    thread.join(5)


def refused_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}/hook"


def log_lines(home):
    return [json.loads(x) for x in (home / "alerts" / "alerts.jsonl").read_text().splitlines()]


def test_one_post_per_problem_and_no_resend(tmp_path, receiver):
    url, posts = receiver
    batch = [make(), make(severity="ERROR"), make(source="b", check="coverage"), make(source=None, check="total_volume"),
             make()]  # the last one duplicates the first
    sent = al.deliver(batch, tmp_path, webhook=url)
    assert sent == batch[:4]
    assert len(posts) == 4
    assert posts[0]["ctype"] == "application/json"
    assert posts[0]["json"] == batch[0].to_json()
    assert {(p["json"]["source"], p["json"]["check"], p["json"]["severity"]) for p in posts} == {
        ("book_prices", "volume", "WARN"), ("book_prices", "volume", "ERROR"), ("b", "coverage", "WARN"),
        (None, "total_volume", "WARN")}
    # Delivering again (another process, a rerun with another run id) sends nothing.
    assert al.deliver(batch, tmp_path, webhook=url) == []
    assert al.deliver([make(run_id="r2", message="volume collapse: 6 rows, usual 50")], tmp_path, webhook=url) == []
    assert len(posts) == 4
    lines = log_lines(tmp_path)
    assert len(lines) == 4 and all("webhook_error" not in x for x in lines)
    # Another week is another alert.
    other = al.Alert(**{**make().to_json(), "week": "2026-11-23"})
    assert al.deliver([other], tmp_path, webhook=url) == [other]
    assert len(posts) == 5


def test_refusing_webhook_does_not_raise(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(al, "_RETRY_PAUSE_S", (0.0, 0.0))
    calls = []
    real = al.urllib.request.urlopen
    monkeypatch.setattr(al.urllib.request, "urlopen", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    batch = [make(), make(source="b")]
    sent = al.deliver(batch, tmp_path, webhook=refused_url())
    assert sent == batch
    assert len(calls) == 3  # 1 attempt + 2 retries, then the rest of the batch skips the dead webhook
    lines = log_lines(tmp_path)
    assert len(lines) == 2
    assert "Connection" in lines[0]["webhook_error"] or "refused" in lines[0]["webhook_error"].lower()
    assert lines[1]["webhook_error"].startswith("skipped: webhook unreachable")
    assert any("alert webhook failed" in r.message for r in caplog.records)
    # Recorded: not sent again.
    assert al.deliver(batch, tmp_path, webhook=refused_url()) == []


def test_webhook_from_env_and_slack_skipped(tmp_path, receiver, monkeypatch, caplog):
    url, posts = receiver
    monkeypatch.setenv("FLEET_ALERT_WEBHOOK", url)
    monkeypatch.setenv("FLEET_ALERT_SLACK", "#scrapers")
    assert al.deliver([make()], tmp_path) == [make()]
    assert len(posts) == 1
    assert any("dagster-slack is not installed" in r.message for r in caplog.records)
    assert al.deliver([make(check="schema")], tmp_path, webhook="") and len(posts) == 1  # "" disables


def _deliver_in_process(home, url, q):
    q.put(len(al.deliver([make(source=f"s{i}") for i in range(10)], home, webhook=url)))


def test_concurrent_processes_send_once(tmp_path, receiver):
    url, posts = receiver
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_deliver_in_process, args=(tmp_path, url, q)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert sorted(q.get(timeout=5) for _ in procs) == [0, 0, 10]
    assert len(posts) == 10 and len(log_lines(tmp_path)) == 10


def test_a_line_cut_short_by_a_crash_loses_no_other_alert(tmp_path):
    al.deliver([make()], tmp_path, webhook="")
    with open(tmp_path / "alerts" / "alerts.jsonl", "a") as fh:
        fh.write('{"source": "torn", "week": "2026-11-16", "chec')  # a crash mid-append
    assert al.deliver([make()], tmp_path, webhook="") == []  # the whole line before it still counts
    assert al.deliver([make(source="c")], tmp_path, webhook="") == [make(source="c")]
    assert al.deliver([make(source="c")], tmp_path, webhook="") == []  # on a line of its own: read back
    assert [r["source"] for r in al.logged(tmp_path)] == ["book_prices", "c"]


def test_builders_and_summary():
    outcomes = [CheckOutcome("non_empty", True, "ERROR", "50 rows", {}),
                CheckOutcome("volume", False, "WARN", "volume collapse: 20 rows, usual 50", {"rows": 20})]
    got = al.from_source_checks("book_prices", WEEK, outcomes, category="source", evidence={"screenshot": "/s.png"},
                                last_good_week="2026-11-09", run_id="r9")
    assert got == [al.Alert("book_prices", WEEK, "volume", "WARN", "source", "volume collapse: 20 rows, usual 50",
                            {"screenshot": "/s.png"}, "2026-11-09", "r9")]
    week = al.from_week_checks(WEEK, [
        {"check": "stale", "source": "x", "severity": "ERROR", "passed": False, "last_good_week": "2026-10-26",
         "message": "stale: no successful week since 2026-10-26 (3 weeks)"},
        {"check": "total_volume", "source": None, "severity": "WARN", "passed": True, "message": "fine",
         "last_good_week": None}])
    assert [(a.source, a.check, a.severity) for a in week] == [("x", "stale", "ERROR")]
    text = al.summary(got + week)
    assert text.splitlines() == [
        "[WARN] 2026-11-16 book_prices volume: volume collapse: 20 rows, usual 50 "
        "(category source; last good week 2026-11-09; screenshot /s.png)",
        "[ERROR] 2026-11-16 x stale: stale: no successful week since 2026-10-26 (3 weeks) (last good week 2026-10-26)"]
    assert al.summary([]) == "no alerts"


def test_logged_lists_the_alerts_of_given_runs_only(tmp_path):
    """What `fleet run` prints at its end: the alerts its own runs delivered, not every alert of the week."""
    al.deliver([make(run_id="r1"), make(source="b", run_id="r1")], tmp_path, webhook="")
    al.deliver([make(source="c", run_id="r2"), make(source="b", run_id="r2"),  # b: already sent by r1
                al.Alert(source="c", week="2026-11-23", check="volume", severity="WARN", category=None,
                         message="m", evidence={}, last_good_week=None, run_id="r2")], tmp_path, webhook="")
    with open(tmp_path / "alerts" / "alerts.jsonl", "a") as fh:
        fh.write('{"source": "d", "week": "2026-11-16", "che')  # a line cut short by a crash
    keys = lambda recs: [(r["source"], r["week"], r["run_id"]) for r in recs]  # noqa: E731
    assert keys(al.logged(tmp_path, week=WEEK, run_ids=["r2"])) == [("c", WEEK, "r2")]
    assert keys(al.logged(tmp_path, week=WEEK, run_ids=["r1"])) == [("book_prices", WEEK, "r1"), ("b", WEEK, "r1")]
    assert keys(al.logged(tmp_path, run_ids=["r2"])) == [("c", WEEK, "r2"), ("c", "2026-11-23", "r2")]
    assert len(al.logged(tmp_path, week=WEEK)) == 3 and al.logged(tmp_path, week=WEEK, run_ids=[]) == []
    assert al.logged(tmp_path / "nowhere", week=WEEK) == []
    assert all("sent_at" in r and r["message"] for r in al.logged(tmp_path))
