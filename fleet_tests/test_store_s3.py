"""The artifact store in S3 (fleet/storage/s3.py) against moto's server in a process of its own on loopback: every
interface method, whole-object visibility, the per-attempt keys that keep a late write from replacing a rerun's
rows, a rerun on another host resuming from the store, evidence the UI can open, refusal of a bad bucket or
endpoint, and a demo week whose artifacts all live in the bucket."""
import io
import os
import subprocess
import sys
import textwrap
import urllib.request
import uuid
from pathlib import Path

import polars as pl
import pytest

from fleet.errors import FleetError
from fleet.engine import outcome
from fleet.storage import store as keys
from fleet.storage.frames import encode_row
from fleet.storage.store import LocalArtifactStore
from fleet.transform import layout
from fleet.storage.open import check_store, open_store
from fleet_tests.conftest import ROOT, SOURCE, WEEK, committed_rows, run_fleet
from fleet_tests.gitremote import log
from fleet_tests.s3server import CREDENTIALS, s3_server
from fleet_tests.test_runner import scraper


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def bucket(s3_endpoint, monkeypatch):
    """A new bucket on the server; the AWS variables that reach it are set for this process."""
    import s3fs

    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(name, value)
    name = f"fleet-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=s3_endpoint, skip_instance_cache=True).mkdir(name)
    return name


@pytest.fixture
def s3_store(bucket, tmp_path):
    return open_store(f"s3://{bucket}/fleet", tmp_path / "cache")


def test_every_interface_method_round_trips(s3_store, tmp_path):
    store = s3_store
    assert store.location(WEEK, "raw/a/1.parquet") == f"{store.url}/{WEEK}/raw/a/1.parquet"
    assert not store.exists(WEEK, "x.json") and store.read_json(WEEK, "x.json", {"none": 1}) == {"none": 1}
    assert store.weeks() == [] and store.list(WEEK, "raw") == []
    with pytest.raises(FileNotFoundError):
        store.read_bytes(WEEK, "x.json")
    with pytest.raises(FileNotFoundError):
        store.local_copy(WEEK, "x.parquet")

    store.write_json(WEEK, "x.json", {"a": [1, 2]})
    assert store.exists(WEEK, "x.json") and store.read_json(WEEK, "x.json") == {"a": [1, 2]}
    assert store.write_bytes(WEEK, "b/blob.bin", b"\x00\x01") == f"{store.url}/{WEEK}/b/blob.bin"
    assert store.read_bytes(WEEK, "b/blob.bin") == b"\x00\x01"
    src = tmp_path / "src.txt"
    src.write_text("hello")
    store.put_file(WEEK, "b/hello.txt", src)
    assert store.read_bytes(WEEK, "b/hello.txt") == b"hello"

    frame = pl.DataFrame({"id": [1, 2, 3], "name": ["a", "b", "c"]})
    store.write_parquet(WEEK, "raw/a/1.parquet", frame)
    assert store.read_parquet(WEEK, "raw/a/1.parquet").equals(frame)
    assert store.scan_parquet(WEEK, "raw/a/1.parquet").select(pl.len()).collect().item() == 3
    local = store.sink_parquet(WEEK, "c.parquet", frame.lazy().filter(pl.col("id") > 1))
    assert pl.read_parquet(local)["id"].to_list() == [2, 3]
    assert store.local_copy(WEEK, "c.parquet") == local and local.is_relative_to(tmp_path / "cache")
    # an object written again (elsewhere) is downloaded again: the cache is kept by ETag
    open_store(store.url, tmp_path / "other-host").write_parquet(WEEK, "c.parquet", frame)
    assert pl.read_parquet(store.local_copy(WEEK, "c.parquet")).height == 3

    assert store.list(WEEK, "b") == ["b/blob.bin", "b/hello.txt"]
    assert store.list(WEEK, "") == ["b", "c.parquet", "raw", "x.json"]
    store.write_json("2026-11-23", "x.json", {})
    assert store.weeks() == [WEEK, "2026-11-23"]
    assert store.modified_ns(WEEK, "x.json") > 0 and store.modified_ns(WEEK, "nothing") is None
    store.delete(WEEK, "b/blob.bin")
    store.delete(WEEK, "b/blob.bin")  # nothing to delete is no error
    assert store.list(WEEK, "b") == ["b/hello.txt"]
    scratch = store.workdir(WEEK, keys.spool_key("a"))
    assert scratch.is_dir() and scratch.is_relative_to(tmp_path / "cache")
    with pytest.raises(ValueError, match="escapes"):
        store.location(WEEK, "../../other")
    check_store(store)
    assert store.list(WEEK, "") == ["b", "c.parquet", "raw", "x.json"]  # the check's probe is gone


def test_a_failed_write_leaves_no_object_under_its_key(s3_store):
    store = s3_store

    def boom(v):
        raise RuntimeError("the frame failed half way")

    failing = pl.LazyFrame({"id": list(range(1000))}).with_columns(pl.col("id").map_elements(boom, pl.Int64))
    with pytest.raises(Exception, match="half way"):
        store.sink_parquet(WEEK, "consolidated.parquet", failing)
    assert not store.exists(WEEK, "consolidated.parquet") and store.list(WEEK, "") == []
    # over an existing object, a failed write leaves the old one whole
    store.write_parquet(WEEK, "consolidated.parquet", pl.DataFrame({"id": [7]}))
    with pytest.raises(Exception, match="half way"):
        store.sink_parquet(WEEK, "consolidated.parquet", failing)
    assert store.read_parquet(WEEK, "consolidated.parquet")["id"].to_list() == [7]


def test_a_multipart_upload_shows_nothing_under_its_key_until_it_completes(s3_store, tmp_path):
    """A file larger than two parts goes up as a multipart upload: while its parts are sent, a reader (boto3 of
    its own, as another host) finds no object under the key; afterwards the whole file."""
    import boto3
    from fsspec.callbacks import Callback

    store = s3_store
    reader = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    bucket, key = store.bucket, f"{store.base.split('/', 1)[1]}/{WEEK}/big.bin"
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(12 * 2 ** 20))
    seen = []

    class Watch(Callback):
        def relative_update(self, inc=1):
            seen.append(reader.list_objects_v2(Bucket=bucket, Prefix=key)["KeyCount"])
            super().relative_update(inc)

    store.fs.put_file(str(big), f"{bucket}/{key}", callback=Watch(), chunksize=5 * 2 ** 20)
    assert len(seen) >= 2 and not any(seen), seen
    assert store.read_bytes(WEEK, "big.bin") == big.read_bytes()


@pytest.fixture
def late_source(tmp_path):
    return scraper(tmp_path, "late", 'yield {"id": 1, "v": "x"}', schema='{"id": pl.Int64, "v": pl.String}')


def _attempt(store, source, attempt: str, rows: list[dict], status: str = "ok", work=None):
    """What a worker's step does with an attempt that spooled ``rows`` and reported ``status`` (in ``work``, the
    folder it fetched from the store when it started)."""
    work = work or store.sync_down(WEEK, keys.spool_key(source.name))
    (work / f"rows-{attempt}.jsonl").write_text("".join(encode_row(r) + "\n" for r in rows))
    result = {"status": status, "category": None if status == "ok" else "source",
              "error": None if status == "ok" else f"source {source.name}: {status}"}
    return outcome.finish(source, WEEK, store, "run", attempt, False, work, result, 1.0)


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_late_write_of_a_cut_off_attempt_never_replaces_its_reruns_result(kind, request, tmp_path, late_source):
    """Attempt A is cut off from the rest (its worker looked dead); its rerun B, on another host, stores its rows.
    Then A finishes after all and writes: under its own keys. B's outcome still counts, consolidation and the
    week's checks take B's rows, and a rerun of the week reuses B's."""
    from fleet.quality.checks import week_checks
    from fleet.transform.consolidate import consolidate

    if kind == "s3":
        url = request.getfixturevalue("s3_store").url
        host_a, host_b = open_store(url, tmp_path / "host-a"), open_store(url, tmp_path / "host-b")
    else:  # one folder, as a shared file system would be; each host's scratch is still its own
        host_a = host_b = LocalArtifactStore(tmp_path / "artifacts")
    a = keys.new_attempt_id()
    work_a = host_a.sync_down(WEEK, keys.spool_key("late"))  # A starts
    b = keys.new_attempt_id()
    assert a < b
    rerun = _attempt(host_b, late_source, b, [{"id": 1, "v": "rerun"}, {"id": 2, "v": "rerun"}])
    if kind == "local":  # a shared folder: keep B's spool out of the folder A merges from, as on a host of its own
        (host_a.root / WEEK / "work" / "late" / f"rows-{b}.jsonl").rename(tmp_path / "b.jsonl")
    late = _attempt(host_a, late_source, a, [{"id": 1, "v": "late"}], work=work_a)
    assert (rerun.rows, late.rows) == (2, 1)

    for store in (host_a, host_b):
        assert keys.read_outcome(store, WEEK, "late")["attempt"] == b
        assert keys.stored_complete(store, WEEK, "late")["attempt"] == b
        assert store.read_parquet(WEEK, keys.raw_key("late", b))["v"].to_list() == ["rerun", "rerun"]
        assert store.read_parquet(WEEK, keys.raw_key("late", a))["v"].to_list() == ["late"]  # kept, not counted
    summary = consolidate(host_a, WEEK, ["late"])
    assert summary["included"] == {"late": 2} and summary["kept"] == {}, summary
    assert host_a.read_parquet(WEEK, layout.store_key("raw", "late"))["v"].to_list() == ["rerun", "rerun"]
    present = next(c for c in week_checks(host_a, WEEK, ["late"]) if c["check"] == "missing")
    assert present["message"] == "present: 2 rows", present


def test_a_rerun_on_another_host_resumes_from_what_the_first_host_stored(s3_store, tmp_path, late_source):
    """Host A's attempt timed out with one row spooled and a checkpoint; host B, which shares no folder with A,
    starts the rerun from the store: A's rows, the newest checkpoint and the URLs A saw."""
    host_a, host_b = open_store(s3_store.url, tmp_path / "host-a"), open_store(s3_store.url, tmp_path / "host-b")
    a = keys.new_attempt_id()
    work_a = host_a.sync_down(WEEK, keys.spool_key("late"))
    (work_a / "checkpoint.json").write_text('{"page": 3}')
    (work_a / "seen.txt").write_text("http://a/1\n")
    partial = _attempt(host_a, late_source, a, [{"id": 1, "v": "a"}], status="timeout")
    assert (partial.status, partial.rows) == ("partial", 1)

    work_b = host_b.sync_down(WEEK, keys.spool_key("late"))
    assert work_b != work_a and (work_b / f"rows-{a}.jsonl").exists()
    assert (work_b / "checkpoint.json").read_text() == '{"page": 3}'
    assert (work_b / "seen.txt").read_text() == "http://a/1\n"
    done = _attempt(host_b, late_source, keys.new_attempt_id(), [{"id": 2, "v": "b"}])
    assert (done.status, done.rows) == ("ok", 2)
    assert host_a.read_parquet(WEEK, keys.rows_key(keys.read_outcome(host_a, WEEK, "late")))["v"].to_list() == ["a", "b"]


def test_a_bad_bucket_or_endpoint_is_refused_in_one_line_naming_the_setting(bucket, tmp_path, monkeypatch):
    with pytest.raises(FleetError) as missing:
        check_store(open_store("s3://no-such-bucket-here/fleet", tmp_path))
    assert str(missing.value) == (f"FLEET_ARTIFACTS=s3://no-such-bucket-here/fleet: bucket 'no-such-bucket-here' "
                                  f"does not exist at {os.environ['AWS_ENDPOINT_URL']} (AWS_ENDPOINT_URL)")
    from fleet_tests.conftest import free_port
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(FleetError) as unreachable:
        check_store(open_store(f"s3://{bucket}/fleet", tmp_path))
    text = str(unreachable.value)
    assert text.startswith(f"FLEET_ARTIFACTS=s3://{bucket}/fleet: cannot list bucket") and "\n" not in text
    assert "Could not connect to the endpoint URL" in text
    for bad in ("gs://bucket/x", "s3://"):
        with pytest.raises(FleetError, match="FLEET_ARTIFACTS"):
            open_store(bad, tmp_path)


def test_an_s3_url_without_s3fs_says_to_install_the_extra(tmp_path):
    code = textwrap.dedent("""
        import sys
        sys.modules["s3fs"] = None  # as if fleet[distributed] were not installed
        from fleet.storage.open import open_store
        open_store(sys.argv[1], sys.argv[1])  # a local folder still works
        try:
            open_store("s3://bucket/fleet", sys.argv[1])
        except Exception as exc:
            print(exc)
    """)
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("FLEET_ARTIFACTS=s3://bucket/fleet needs s3fs: install fleet[distributed]"), res.stdout


def _fetch(url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.headers.get("Content-Type"), resp.read()


def test_a_failures_evidence_is_stored_and_linked_for_the_ui(s3_store, scrape_home, tmp_path, monkeypatch):
    """A source fails in real Chromium on this host; its screenshot and page reach the bucket under the
    attempt's own keys, and the raw asset's metadata links them by presigned URLs another machine's browser can
    open: the screenshot as a PNG, the page's HTML as text/plain (never rendered as a page)."""
    from fleet.defs.evidence import evidence_metadata
    from fleet.engine.runner import EngineSettings, run_source

    source = scraper(tmp_path, "breaks", """
        await page.set_content("<h1>the page as it broke</h1><script>document.title='x'</script>")
        raise RuntimeError("selector rot")
        yield
    """)
    # its cache under this host's FLEET_HOME, as open_store's callers keep it: the sandboxed attempt writes there
    s3_store = open_store(s3_store.url, scrape_home / "s3-cache")
    out = run_source(source, WEEK, store=s3_store, run_id="test", settings=EngineSettings.from_env())
    assert (out.status, out.category) == ("failed", "source"), out
    prefix = f"{s3_store.url}/{WEEK}/evidence/breaks/{out.attempt}/"
    assert {k: v for k, v in out.evidence.items() if k != "page_url"} == {
        "screenshot": prefix + "screenshot.png", "html": prefix + "page.html", "error": prefix + "error.txt",
        "trace": prefix + "trace.zip"}
    assert keys.read_outcome(s3_store, WEEK, "breaks")["evidence"] == out.evidence

    md = evidence_metadata(s3_store, WEEK, "breaks", out.evidence)
    kind, png = _fetch(md["screenshot_url"].value)
    assert kind == "image/png" and png.startswith(b"\x89PNG")
    kind, html = _fetch(md["html_url"].value)
    assert kind.startswith("text/plain") and b"the page as it broke" in html
    assert "the page as it broke" in md["page_html"].value and "data:image/png;base64," in md["screenshot"].value
    kind, error = _fetch(md["error_url"].value)
    assert b"selector rot" in error
    assert md["screenshot_object"].value == prefix + "screenshot.png"
    kind, trace = _fetch(md["trace_url"].value)  # the Playwright trace, beside the rest
    assert kind == "application/zip" and trace.startswith(b"PK")
    assert md["debug"].value == f"fleet debug breaks --week {WEEK}"

    # `fleet debug` fetches it from the bucket to a local file first, for the trace viewer to open
    from fleet import upkeep

    monkeypatch.setenv("FLEET_ARTIFACTS", s3_store.url)
    lines = []
    assert upkeep.debug("breaks", WEEK, echo=lines.append) == 0, lines
    local = scrape_home / "debug" / WEEK / "breaks" / f"trace-{out.attempt}.zip"
    assert local.read_bytes() == trace and any(line.endswith(f"show-trace {local}") for line in lines), lines
    # and the rest of the attempt's evidence beside it, each listed with the object it came from
    for what, name in (("screenshot", "screenshot.png"), ("html", "page.html"), ("error", "error.txt")):
        fetched = local.with_name(f"{Path(name).stem}-{out.attempt}{Path(name).suffix}")
        assert f"  {what:<10} {fetched} (from {prefix}{name})" in lines, lines
        assert fetched.read_bytes() == s3_store.read_location(prefix + name)


def test_a_demo_week_with_its_artifacts_in_s3(fleet_env, bucket, s3_endpoint):
    """`fleet demo` with FLEET_ARTIFACTS in the bucket: the week scrapes, commits raw then processed from the
    bucket's objects, `fleet status` reads them back, and nothing is written under FLEET_HOME/artifacts."""
    import s3fs

    env = {**fleet_env.env, **CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint, "FLEET_ARTIFACTS": f"s3://{bucket}/fleet",
           "FLEET_BROWSER_HOST_IDLE_S": "3"}
    before = log(fleet_env.remote)
    res = run_fleet(env, "demo", "--week", "2026-W47", "--force")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    new = log(fleet_env.remote)[: -len(before)]
    assert [c["subject"] for c in new] == [f"fleet: processed rows for week {WEEK}", f"fleet: raw rows for week {WEEK}"]
    from fleet_tests.test_pipeline import DEMO_ROWS
    frame = committed_rows(fleet_env.remote, WEEK)
    assert dict(frame.group_by(SOURCE).len().iter_rows()) == DEMO_ROWS
    assert not (fleet_env.home / "artifacts").exists()

    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint, skip_instance_cache=True, use_listings_cache=False)
    stored = [p[len(f"{bucket}/fleet/{WEEK}/"):] for p in fs.find(f"{bucket}/fleet/{WEEK}")]
    for name in DEMO_ROWS:
        assert any(p.startswith(f"raw/{name}/") and p.endswith(".parquet") for p in stored), stored
        assert any(p.startswith(f"work/{name}/rows-") for p in stored), stored
    assert {keys.CONSOLIDATED_META_KEY, keys.PROCESSED_META_KEY, keys.commit_key("raw"),
            keys.commit_key("processed")} <= set(stored)
    for name in DEMO_ROWS:
        assert layout.store_key("raw", name) in stored and layout.store_key("processed", name) in stored, stored
    committed = pl.concat([pl.read_parquet(io.BytesIO(fs.cat_file(f"{bucket}/fleet/{WEEK}/{layout.store_key('raw', n)}")))
                           for n in DEMO_ROWS], how="diagonal_relaxed")
    assert committed.height == frame.height

    status = run_fleet(env, "status", "--week", WEEK)
    assert status.returncode == 0 and all(f"{n:<20} ok" in status.stdout for n in DEMO_ROWS), status.stdout


def test_fleet_run_refuses_a_bucket_that_does_not_exist_before_anything_runs(fleet_env, s3_endpoint):
    env = {**fleet_env.env, **CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint,
           "FLEET_ARTIFACTS": "s3://no-such-bucket-here/fleet", "FLEET_DEMO_URL": "http://127.0.0.1:9"}
    res = run_fleet(env, "run", "--week", "2026-W47", "--force")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip() == (f"fleet: error: FLEET_ARTIFACTS=s3://no-such-bucket-here/fleet: bucket "
                                  f"'no-such-bucket-here' does not exist at {s3_endpoint} (AWS_ENDPOINT_URL)")
    assert not list((fleet_env.home / "browser-hosts").glob("*")) if (fleet_env.home / "browser-hosts").exists() else True
