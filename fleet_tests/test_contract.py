"""Unit tests of the scraper contract: weeks, row validation, dedup, discovery, retry classification."""
import asyncio
import datetime as dt
import re
import textwrap

import polars as pl
import pytest

from fleet import BadRowError, NavigationError, RetryPolicy, retry_async, retry_sync
from fleet.scraping.discovery import discover
from fleet.scraping import retry as retry_module
from fleet.scraping.contract import check_seconds
from fleet.scraping.retry import is_transient
from fleet.storage.frames import build_frame, validate_row
from fleet.weeks import iso_label, last_complete_week, parse_week, week_key


def test_weeks_accept_monday_and_iso_week():
    assert week_key("2026-11-16") == "2026-11-16"
    assert week_key("2026-W47") == "2026-11-16"
    assert iso_label("2026-11-16") == "2026-W47"
    assert last_complete_week(dt.date(2026, 11, 30)) == dt.date(2026, 11, 23)
    with pytest.raises(ValueError, match="Tuesday"):
        parse_week("2026-11-17")
    with pytest.raises(ValueError, match="not a week"):
        parse_week("last week")


SCHEMA = {"isbn": pl.String, "price": pl.Float64, "n": pl.Int64}


def test_bad_row_names_source_column_and_value():
    with pytest.raises(BadRowError, match=r"source books: column 'price' expects Float64, got 'n/a'"):
        validate_row("books", SCHEMA, ("isbn",), {"isbn": "1", "price": "n/a"}, 0)
    with pytest.raises(BadRowError, match=r"source books: key column 'isbn' is missing"):
        validate_row("books", SCHEMA, ("isbn",), {"price": 1.0}, 3)
    with pytest.raises(BadRowError, match=r"column 'colour', which is not in the schema"):
        validate_row("books", SCHEMA, ("isbn",), {"isbn": "1", "colour": "red"}, 0)
    with pytest.raises(BadRowError, match="expects Int64, got True"):
        validate_row("books", SCHEMA, ("isbn",), {"isbn": "1", "n": True}, 0)


def test_frame_is_unique_by_key_and_conflicts_are_errors():
    rows = [{"isbn": "2", "price": 1.0, "n": 1}, {"isbn": "1", "price": 2, "n": None}, {"isbn": "2", "price": 1.0, "n": 1}]
    frame = build_frame("books", SCHEMA, ("isbn",), rows)
    assert frame["isbn"].to_list() == ["1", "2"]
    assert frame.schema == pl.Schema(SCHEMA)
    with pytest.raises(BadRowError, match=r"duplicate key \{'isbn': '2'\} with different values in column 'price'"):
        build_frame("books", SCHEMA, ("isbn",), rows + [{"isbn": "2", "price": 9.0, "n": 1}])
    empty = build_frame("books", SCHEMA, ("isbn",), [])
    assert empty.height == 0 and empty.schema == pl.Schema(SCHEMA)


GOOD = '''
import polars as pl
from fleet import Scraper

class Good(Scraper):
    """Good rows."""
    name = "{name}"
    schema = {{"id": pl.Int64}}
    key = ("id",)
    async def scrape(self, page, ctx):
        yield {{"id": 1}}
'''


def test_discovery_isolates_broken_modules_and_ignores_imported_bases(tmp_path):
    (tmp_path / "good.py").write_text(GOOD.format(name="good"))
    # imports Good from elsewhere: the imported class is not a source of this module
    (tmp_path / "reexport.py").write_text("from fleet import Scraper\n")
    (tmp_path / "syntax.py").write_text("def broken(:\n")
    (tmp_path / "noname.py").write_text(textwrap.dedent('''
        import polars as pl
        from fleet import Scraper
        class NoName(Scraper):
            schema = {"id": pl.Int64}
            key = ("id",)
            async def scrape(self, page, ctx):
                yield {}
    '''))
    (tmp_path / "dup.py").write_text(GOOD.format(name="good"))
    (tmp_path / "Bad-Name!.py").write_text(GOOD.format(name="Bad Name"))
    tmp_path.chmod(0o755)  # as root, the sandbox's user imports the modules (fleet/scraping/sandboxed.py)
    sources = {s.name: s for s in discover([tmp_path])}
    assert set(sources) == {"good", "syntax", "noname", "dup", "bad_name_"}
    assert sources["good"].broken  # "good" is defined twice: neither silently wins
    assert "SyntaxError" in sources["syntax"].error
    assert "name must be a slug" in sources["noname"].error
    assert "defined more than once" in sources["dup"].error and "good.py" in sources["dup"].error
    assert "defined more than once" in sources["good"].error
    assert "got 'Bad Name'" in sources["bad_name_"].error


class _Sleeps:
    """Stands for asyncio.sleep / time.sleep in fleet.scraping.retry: records each wait, waits for nothing."""

    def __init__(self):
        self.waits = []

    def sync(self, seconds):
        self.waits.append(seconds)

    async def async_(self, seconds):
        self.waits.append(seconds)


@pytest.fixture
def sleeps(monkeypatch):
    rec = _Sleeps()
    monkeypatch.setattr(retry_module.asyncio, "sleep", rec.async_)
    monkeypatch.setattr(retry_module.time, "sleep", rec.sync)
    return rec


def _always(error, calls: list, limit: int = 20):
    """A call that always raises ``error``, for sync and async retry. Past ``limit`` calls it raises something
    else, so that unbounded retrying ends, and fails the test, instead of hanging it."""
    def once():
        calls.append(1)
        if len(calls) > limit:
            raise RuntimeError(f"retried {len(calls)} times: the retry is unbounded")
        raise error()

    async def once_async():
        return once()
    return once, once_async


def _run(kind, fn, policy):
    sync, async_ = fn
    return retry_sync(sync, policy=policy) if kind == "sync" else asyncio.run(retry_async(async_, policy=policy))


def _transient():
    return NavigationError("503", url="u", status=503, transient=True)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("attempts", [1, 2, 5])
def test_an_always_transient_error_is_raised_after_exactly_attempts_calls_with_growing_waits(kind, attempts, sleeps):
    calls = []
    policy = RetryPolicy(attempts=attempts, base_wait_s=0.5, max_wait_s=100, jitter=0)
    with pytest.raises(NavigationError, match="503"):
        _run(kind, _always(_transient, calls), policy)
    assert len(calls) == attempts
    assert sleeps.waits == [0.5, 1.0, 2.0, 4.0][:attempts - 1]  # a wait between calls, none after the last


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_retry_waits_are_capped_and_jittered_upwards_only(kind, sleeps):
    calls = []
    with pytest.raises(NavigationError):
        _run(kind, _always(_transient, calls), RetryPolicy(attempts=4, base_wait_s=1, max_wait_s=3, jitter=0))
    assert sleeps.waits == [1, 2, 3]
    sleeps.waits.clear()
    calls.clear()
    with pytest.raises(NavigationError):
        _run(kind, _always(_transient, calls), RetryPolicy(attempts=4, base_wait_s=1, max_wait_s=100, jitter=0.25))
    assert len(sleeps.waits) == 3
    for wait, base in zip(sleeps.waits, (1, 2, 4)):
        assert base <= wait <= base * 1.25
    assert sleeps.waits == sorted(sleeps.waits)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_non_transient_error_is_raised_at_once_and_a_recovery_is_returned(kind, sleeps):
    calls = []
    policy = RetryPolicy(attempts=5, base_wait_s=0.5, jitter=0)
    for error in (lambda: NavigationError("404", url="u", status=404), lambda: ValueError("bug")):
        calls.clear()
        with pytest.raises((NavigationError, ValueError)):
            _run(kind, _always(error, calls), policy)
        assert len(calls) == 1 and sleeps.waits == []  # never retried, never waited

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise _transient()
        return "ok"

    async def flaky_async():
        return flaky()
    calls.clear()
    assert _run(kind, (flaky, flaky_async), policy) == "ok"
    assert len(calls) == 3 and sleeps.waits == [0.5, 1.0]
    assert is_transient(ConnectionRefusedError()) and not is_transient(ValueError("bug"))


@pytest.mark.parametrize("setting, value", [
    ("attempts", 0), ("attempts", -1), ("attempts", 2.5), ("attempts", True), ("attempts", "3"),
    ("base_wait_s", -0.5), ("max_wait_s", -1), ("jitter", -0.1), ("base_wait_s", float("nan")),
    ("max_wait_s", float("inf")), ("jitter", "0.2"),
])
def test_a_bad_retry_setting_is_an_error_naming_it(setting, value):
    with pytest.raises(ValueError, match=rf"retry policy: {setting}\b.* got {re.escape(repr(value))}"):
        RetryPolicy(**{setting: value})


def test_a_wait_far_down_a_long_retry_is_the_cap():
    assert RetryPolicy(attempts=2000, base_wait_s=0.5, max_wait_s=10, jitter=0).wait(1500) == 10  # was OverflowError


def test_a_bad_retry_attempts_reaching_the_worker_fails_before_the_browser_is_used(tmp_path):
    """RawConfig.retry_attempts reaches the worker as spec["retry"]; 0 used to end in AssertionError('unreachable')
    at the first transient error of ctx.goto. The runner refuses it before a worker is taken (test_runner's
    test_a_bad_run_config_fails_its_source_before_a_worker_is_taken); the worker still refuses it by itself."""
    from fleet.engine import attempt as worker

    (tmp_path / "one.py").write_text(GOOD.format(name="one"))
    spec = {"source": "one", "module_path": str(tmp_path / "one.py"), "class_name": "Good", "timeout_s": 30,
            "work_dir": str(tmp_path), "evidence_dir": str(tmp_path / "evidence"), "spool_path": str(tmp_path / "rows"),
            "ready_path": str(tmp_path / "ready"), "result_path": str(tmp_path / "result.json"), "week": "2026-11-16", "run_id": "r", "deep": False,
            "retry": {"attempts": 0}}
    with pytest.raises(ValueError) as raised:
        asyncio.run(worker.scrape(None, spec))  # fails before it asks the browser for anything
    assert str(raised.value) == "retry policy: attempts (retry_attempts) must be a whole number >= 1, got 0"


@pytest.mark.parametrize("timeout", [0, -5, float("nan"), float("inf"), True, "60", None])
def test_a_bad_timeout_s_is_a_broken_source_naming_it(tmp_path, timeout):
    (tmp_path / "slow.py").write_text(GOOD.format(name="slow") + f"    timeout_s = {timeout!r}\n"
                                      .replace("nan", 'float("nan")').replace("inf", 'float("inf")'))
    tmp_path.chmod(0o755)  # as root, the sandbox's user imports the modules (fleet/scraping/sandboxed.py)
    (source,) = discover([tmp_path])
    assert source.broken
    assert (f"scraper 'slow': timeout_s must be a positive, finite number of seconds, got {timeout!r}"
            in source.error)
    assert check_seconds("slow", "timeout_s", 2) == 2.0
