"""The LFS-safe commit loop against a real bare remote with real git and git-lfs and a GitHub-like hook."""
from __future__ import annotations

import base64
import hashlib
import http.server
import json
import logging
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fleet.errors import CommitError
from fleet.publish import commit as commit_mod
from fleet.publish import lfs as lfs_mod
from fleet.publish import remote as remote_mod
from fleet.publish import snapshot as snapshot_mod
from fleet.publish import CommitResult, DataRepo, commit_files, create_remote, ensure_remote, redact
from fleet_tests import gitremote as gr

ROOT = Path(__file__).resolve().parent.parent
WEEK = "2026-11-16"
REL = f"{WEEK}/raw.parquet"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def artifact(tmp_path: Path, name: str, size: int = 50_000, seed: int | None = None) -> Path:
    p = tmp_path / "artifacts" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(random.Random(seed).randbytes(size) if seed is not None else os.urandom(size))
    return p


def data_repo(bare: Path, tmp_path: Path, name: str = "clone", **kw) -> DataRepo:
    kw.setdefault("base_wait_s", 0.02)
    return DataRepo(remote=str(bare), clone_dir=tmp_path / name, **kw)


def assert_lfs_content(bare: Path, path: str, art: Path, ref: str = "main") -> None:
    """On the remote, ``path`` is a pointer to an object in the LFS store whose bytes are the artifact's."""
    ptr = gr.pointer_oid(gr.read_blob(bare, f"{ref}:{path}"))
    assert ptr is not None, f"{path} is not an LFS pointer on the remote"
    oid, size = ptr
    obj = gr.lfs_object(bare, oid)
    assert obj.is_file(), f"LFS object {oid} missing from the remote store"
    assert (oid, size) == (sha256(art), art.stat().st_size)
    assert sha256(obj) == oid


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    return gr.make_remote(tmp_path)


def test_first_commit_lands_only_the_prefix_as_lfs(bare, tmp_path, caplog):
    art = artifact(tmp_path, "raw.parquet")
    before = gr.ls_tree(bare)
    caplog.set_level(logging.INFO)
    children_before = set(_children())
    res = commit_files(data_repo(bare, tmp_path), {REL: art}, subject=f"raw {WEEK}", body="3 sources",
                       idempotency_key=f"raw:{WEEK}", log=logging.getLogger("fleet.test"))

    assert res == CommitResult(status="committed", sha=res.sha, attempts=1, paths=[f"data/{REL}"],
                               lfs_bytes=art.stat().st_size)  # its one new LFS object
    head = gr.log(bare)[0]
    assert head["sha"] == res.sha
    assert head["files"] == ["data/.gitattributes", f"data/{REL}"]
    assert head["message"] == f"raw {WEEK}\n\n3 sources\n\nFleet-Idempotency-Key: raw:{WEEK}\n"
    after = gr.ls_tree(bare)
    assert {p: s for p, s in after.items() if not p.startswith("data/")} == before  # README, src, .github
    assert gr.read_blob(bare, "main:data/.gitattributes").decode().splitlines() == [
        "*.parquet filter=lfs diff=lfs merge=lfs -text"]
    assert_lfs_content(bare, f"data/{REL}", art)
    assert gr.hook_rejections(bare) == []
    assert "committed" in caplog.text
    # GitPython's Repo is closed after the commit: no git process (a cat-file batch, say) outlives it
    assert [c for c in _children() if c not in children_before and "git" in _cmdline(c)] == []


def _children() -> list[str]:
    """This process's children (other tests of the session may have left some of their own)."""
    return [c for t in Path("/proc/self/task").iterdir() for c in (t / "children").read_text().split()]


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_same_files_again_is_up_to_date(bare, tmp_path):
    art = artifact(tmp_path, "raw.parquet")
    repo = data_repo(bare, tmp_path)
    first = commit_files(repo, {REL: art}, subject="raw", idempotency_key="k1")
    n = len(gr.log(bare))
    again = commit_files(repo, {REL: art}, subject="raw", idempotency_key="k1")
    fresh = commit_files(data_repo(bare, tmp_path, "other-clone"), {REL: art}, subject="raw",
                         idempotency_key="k1")
    assert again.status == fresh.status == "up_to_date"
    assert again.sha == fresh.sha == first.sha
    assert len(gr.log(bare)) == n

    art.write_bytes(os.urandom(1000))  # new content for the same week: a new commit
    changed = commit_files(repo, {REL: art}, subject="raw v2", idempotency_key="k2")
    assert changed.status == "committed" and gr.log(bare)[0]["files"] == [f"data/{REL}"]
    assert_lfs_content(bare, f"data/{REL}", art)


def test_same_key_and_prefix_tree_already_in_history_is_up_to_date(bare, tmp_path):
    art = artifact(tmp_path, "raw.parquet")
    repo = data_repo(bare, tmp_path)
    first = commit_files(repo, {REL: art}, subject="raw", idempotency_key="raw:k")
    gr.clone_and_push(bare, {f"data/{REL}": b"someone else's bytes"}, "overwrite")
    head = gr.log(bare)[0]["sha"]
    again = commit_files(repo, {REL: art}, subject="raw", idempotency_key="raw:k")
    assert (again.status, again.sha) == ("up_to_date", head) and first.sha != head
    other_key = commit_files(repo, {REL: art}, subject="raw", idempotency_key="raw:other")
    assert other_key.status == "committed"
    assert_lfs_content(bare, f"data/{REL}", art)


def test_main_moves_mid_run_our_commit_lands_on_top(bare, tmp_path, monkeypatch):
    art = artifact(tmp_path, "raw.parquet")
    theirs = artifact(tmp_path, "theirs.parquet")
    calls = []

    def another_writer(repo, attempt):
        calls.append(attempt)
        if attempt == 1:
            gr.clone_and_push(bare, {"src/new.py": "x = 1\n", "data/2026-11-09/other.parquet": theirs.read_bytes()},
                              "their code and data")

    monkeypatch.setattr(commit_mod, "_before_push", another_writer)
    res = commit_files(data_repo(bare, tmp_path), {REL: art}, subject="ours", idempotency_key="ours")

    assert res.status == "committed" and res.attempts == 2 and calls == [1, 2]
    log = gr.log(bare)
    assert [c["subject"] for c in log[:3]] == ["ours", "their code and data", "Initial commit"]
    assert all(p.startswith("data/") for p in log[0]["files"])
    tree = gr.ls_tree(bare)
    assert "src/new.py" in tree and "README.md" in tree
    assert_lfs_content(bare, "data/2026-11-09/other.parquet", theirs)
    assert_lfs_content(bare, f"data/{REL}", art)
    assert gr.hook_rejections(bare) == []


def test_snapshot_is_a_hard_link_and_git_never_writes_through_it(bare, tmp_path, monkeypatch):
    """The snapshot of an artifact on the clone's file system is a hard link (no 1 GB copy). The clone's working
    file then shares the artifact's inode, so a checkout that replaces that path (another writer changed it)
    must replace the file, never write into it: the artifact keeps its bytes."""
    art = artifact(tmp_path, "raw.parquet")
    want = sha256(art)
    snaps = []
    monkeypatch.setattr(snapshot_mod, "_after_snapshot", lambda arts: snaps.extend(arts))
    repo = data_repo(bare, tmp_path)
    assert commit_files(repo, {REL: art}, subject="ours", idempotency_key="ours").status == "committed"
    assert snaps[0].linked is not None and snaps[0].linked[0] == art.stat().st_ino
    assert (tmp_path / "clone" / "data" / REL).stat().st_ino == art.stat().st_ino  # clone, snapshot, artifact

    theirs = artifact(tmp_path, "theirs.parquet", 70_000)
    gr.clone_and_push(bare, {f"data/{REL}": theirs.read_bytes()}, "they rewrote our week")
    other = artifact(tmp_path, "other.parquet")
    res = commit_files(repo, {"2026-11-23/raw.parquet": other}, subject="next week", idempotency_key="next")
    assert res.status == "committed"  # its reset checked their version out over our linked file
    assert sha256(art) == want and art.stat().st_size == 50_000
    assert_lfs_content(bare, f"data/{REL}", theirs)
    assert_lfs_content(bare, "data/2026-11-23/raw.parquet", other)


@pytest.mark.parametrize("size", [60_000, 50_000], ids=["grown", "same-size"])
def test_artifact_rewritten_in_place_is_committed_from_a_private_copy(bare, tmp_path, monkeypatch, caplog, size):
    """A caller that rewrites an artifact in place while the loop holds a link to it: the attempt notices after
    staging (inode, size or mtime changed; a same-size rewrite shows only in mtime), takes a private copy and
    starts over; what lands is whole."""
    art = artifact(tmp_path, "raw.parquet")
    rewritten = os.urandom(size)

    def rewrite(arts):
        assert arts[0].linked is not None
        time.sleep(0.05)  # file times tick coarsely (a jiffy on ext4); the rewrite comes a moment later
        with open(art, "r+b") as fh:  # in place: same inode
            fh.write(rewritten)

    monkeypatch.setattr(snapshot_mod, "_after_snapshot", rewrite)
    caplog.set_level(logging.WARNING)
    res = commit_files(data_repo(bare, tmp_path), {REL: art}, subject="ours", idempotency_key="ours",
                       log=logging.getLogger("fleet.test"))
    assert res.status == "committed" and res.attempts == 2
    assert "rewritten in place" in caplog.text and str(art) in caplog.text
    assert art.read_bytes() == rewritten
    assert_lfs_content(bare, f"data/{REL}", art)


def test_persistent_race_fails_after_attempts_then_recovers(bare, tmp_path, monkeypatch):
    art = artifact(tmp_path, "raw.parquet")
    content = art.read_bytes()
    wins = []

    def always_first(repo, attempt):
        wins.append(attempt)
        gr.clone_and_push(bare, {f"src/race{attempt}.py": f"n = {attempt}\n"}, f"race {attempt}")

    monkeypatch.setattr(commit_mod, "_before_push", always_first)
    repo = data_repo(bare, tmp_path)
    with pytest.raises(CommitError) as err:
        commit_files(repo, {REL: art}, subject="ours", idempotency_key="ours")
    msg = str(err.value)
    assert wins == [1, 2, 3]
    assert str(bare) in msg and "branch main" in msg and "3 attempts" in msg
    assert "last rejection" in msg and ("fetch first" in msg or "non-fast-forward" in msg)
    assert art.read_bytes() == content
    assert f"data/{REL}" not in gr.ls_tree(bare)

    monkeypatch.setattr(commit_mod, "_before_push", lambda repo, attempt: None)
    res = commit_files(repo, {REL: art}, subject="ours", idempotency_key="ours")
    assert res.status == "committed" and res.attempts == 1
    assert {"src/race1.py", "src/race2.py", "src/race3.py"} <= set(gr.ls_tree(bare))
    assert_lfs_content(bare, f"data/{REL}", art)


def test_hook_rejects_pointer_without_object_and_workflow_changes(bare, tmp_path):
    art = artifact(tmp_path, "raw.parquet")
    skip = gr.clone_and_push(bare, {"data/2026-01-05/x.parquet": art.read_bytes()}, "lfs objects not pushed",
                             env={"GIT_LFS_SKIP_PUSH": "1"}, check=False)
    assert skip.returncode != 0 and b"GH008" in skip.stderr
    wf = gr.clone_and_push(bare, {".github/workflows/ci.yml": "on: pull_request\n"}, "edit workflow",
                           check=False)
    assert wf.returncode != 0 and b"refusing to allow" in wf.stderr and b"workflow" in wf.stderr
    ok = gr.clone_and_push(bare, {"data/2026-01-05/x.parquet": art.read_bytes()}, "plain push uploads objects")
    assert ok.returncode == 0
    assert len(gr.hook_rejections(bare)) == 2
    assert_lfs_content(bare, "data/2026-01-05/x.parquet", art)


def test_refusal_for_another_reason_is_not_retried(bare, tmp_path):
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'GH006: Protected branch update failed for refs/heads/main.' >&2\nexit 1\n")
    art = artifact(tmp_path, "raw.parquet")
    with pytest.raises(CommitError) as err:
        commit_files(data_repo(bare, tmp_path, base_wait_s=5), {REL: art}, subject="s", idempotency_key="k")
    assert "GH006" in str(err.value) and "retrying will not help" in str(err.value)


def test_hook_rejects_deleting_the_workflows(bare, tmp_path):
    gone = gr.clone_and_change(bare, lambda work: subprocess.run(["rm", "-r", str(work / ".github")], check=True),
                               "drop the workflows", check=False)
    assert gone.returncode != 0 and b"delete workflow `.github/workflows/ci.yml`" in gone.stderr
    assert ".github/workflows/ci.yml" in gr.ls_tree(bare)


def test_lfs_objects_are_in_the_remote_store_before_the_push_because_fleet_uploaded_them(bare, tmp_path,
                                                                                           monkeypatch):
    """git-lfs's own pre-push hook (installed in every clone) would upload the objects during ``git push`` too, so
    the hook is removed here: the object must already be in the remote's store when ``git push`` starts. Without
    fleet's own upload the remote refuses the push with GH008."""
    art = artifact(tmp_path, "raw.parquet")
    seen = []

    def before_push(repo, attempt):
        (repo.clone_dir / ".git" / "hooks" / "pre-push").unlink(missing_ok=True)
        seen.append(gr.lfs_object(bare, sha256(art)).is_file())

    monkeypatch.setattr(commit_mod, "_before_push", before_push)
    res = commit_files(data_repo(bare, tmp_path), {REL: art}, subject="raw", idempotency_key="k")
    assert res.status == "committed" and seen == [True]
    assert_lfs_content(bare, f"data/{REL}", art)
    assert gr.hook_rejections(bare) == []

    monkeypatch.setattr(lfs_mod, "push_objects", lambda repo, remote, objects: None)
    other = artifact(tmp_path, "other.parquet")
    with pytest.raises(CommitError, match="GH008"):
        commit_files(data_repo(bare, tmp_path, attempts=1), {"2026-11-23/raw.parquet": other}, subject="raw",
                     idempotency_key="k2")
    assert len(gr.hook_rejections(bare)) == 1


def test_a_rerun_after_others_moved_the_prefix_is_up_to_date_and_keeps_their_fix(bare, tmp_path):
    """Others push other weeks under the same prefix all the time, and may fix our file after our commit; a rerun
    with the same key and the same bytes must not commit again (it would revert their fix)."""
    art = artifact(tmp_path, "raw.parquet")
    repo = data_repo(bare, tmp_path)
    first = commit_files(repo, {REL: art}, subject="raw", idempotency_key="raw:k")
    gr.clone_and_push(bare, {"data/2026-11-09/raw.parquet": os.urandom(500)}, "another week, by someone else")
    gr.clone_and_push(bare, {f"data/{REL}": b"their fix of our week"}, "they fix our week")
    head = gr.log(bare)[0]["sha"]
    again = commit_files(repo, {REL: art}, subject="raw", idempotency_key="raw:k")
    assert (again.status, again.sha) == ("up_to_date", head) and first.sha != head
    assert gr.log(bare)[0]["sha"] == head
    assert gr.read_blob(bare, f"main:data/{REL}").startswith(gr.POINTER_HEADER)  # theirs, still there
    assert gr.pointer_oid(gr.read_blob(bare, f"main:data/{REL}"))[0] != sha256(art)


@pytest.mark.parametrize("link", ["attributes", "week folder", "prefix"])
def test_links_pushed_by_others_are_never_written_through(bare, tmp_path, link):
    """The clone holds what others pushed; a symbolic link on one of fleet's paths would make it write outside
    the clone. Refused at once (one attempt), naming the link, and nothing outside changes."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config").write_text("precious\n")

    def change(work):
        if link == "attributes":
            (work / "data").mkdir()
            os.symlink(outside / "config", work / "data" / ".gitattributes")
        elif link == "week folder":
            (work / "data").mkdir()
            os.symlink(outside, work / "data" / WEEK)
        else:
            os.symlink(outside, work / "data")

    gr.clone_and_change(bare, change, f"a link at the {link}")
    before = gr.log(bare)
    started = time.monotonic()
    with pytest.raises(CommitError, match=r"is a symbolic link to .*outside.*refusing to write") as err:
        commit_files(data_repo(bare, tmp_path, base_wait_s=5), {REL: artifact(tmp_path, "raw.parquet")},
                     subject="raw", idempotency_key="k")
    assert time.monotonic() - started < 5, "a permanent refusal was retried"
    assert "data" in str(err.value)
    assert gr.log(bare) == before
    assert sorted(p.name for p in outside.iterdir()) == ["config"]
    assert (outside / "config").read_text() == "precious\n"


def test_permanence_is_read_from_gits_words_not_from_urls_or_paths(tmp_path):
    assert remote_mod.permanent("remote: error: GH006: Protected branch update failed for refs/heads/main.")
    assert remote_mod.permanent("remote: error: GH001: Large files detected.")
    assert remote_mod.permanent("! [remote rejected] main -> main (refusing to update checked out branch: ...)")
    assert remote_mod.permanent("fatal: could not read Password for 'https://x.test': terminal prompts disabled")
    refused = ("`git ls-remote http://127.0.0.1:1/org/workflow-permission-denied.git refs/heads/main` exited 128: "
               "fatal: unable to access 'http://127.0.0.1:1/org/workflow-permission-denied.git/': Failed to "
               "connect to 127.0.0.1 port 1: Connection refused")
    assert not remote_mod.permanent(refused)
    assert not remote_mod.permanent("fatal: '/srv/repository not found/data.git' does not exist")
    # through the loop: a refused connection to such a URL is retried to the end, not given up at once
    repo = DataRepo(remote="http://127.0.0.1:1/org/workflow-data.git", clone_dir=tmp_path / "clone", attempts=2,
                    base_wait_s=0.01)
    with pytest.raises(CommitError, match="after 2 attempts"):
        commit_files(repo, {REL: artifact(tmp_path, "raw.parquet")}, subject="s", idempotency_key="k")


def test_a_remote_that_cannot_take_the_push_is_refused_at_once(tmp_path):
    """A non-bare repository refuses a push to its checked-out branch: that is permanent, not a lost race."""
    work = tmp_path / "checkout"
    gr.git("init", "-q", "--initial-branch=main", str(work))
    (work / "README.md").write_text("hi\n")
    gr.git("add", "-A", cwd=work)
    gr.git("commit", "-q", "-m", "init", cwd=work)
    with pytest.raises(CommitError, match="refusing to update checked out branch.*|retrying will not help") as err:
        commit_files(DataRepo(remote=str(work), clone_dir=tmp_path / "clone", base_wait_s=5),
                     {REL: artifact(tmp_path, "raw.parquet")}, subject="s", idempotency_key="k")
    assert "retrying will not help" in str(err.value) and "checked out branch" in str(err.value)


def test_a_file_outside_lfs_is_committed_beside_the_parquet(bare, tmp_path):
    art = artifact(tmp_path, "raw.parquet")
    summary = tmp_path / "artifacts" / "summary.json"
    summary.write_text('{"rows": 3}\n')
    res = commit_files(data_repo(bare, tmp_path), {REL: art, f"{WEEK}/summary.json": summary}, subject="s",
                       idempotency_key="k", key_with_content=True)
    assert res.status == "committed"
    assert gr.read_blob(bare, f"main:data/{WEEK}/summary.json") == b'{"rows": 3}\n'
    assert_lfs_content(bare, f"data/{REL}", art)


def test_remotes_and_branches_that_git_would_refuse_are_clear_errors(tmp_path, monkeypatch):
    for branch in ("a..b", "topic.lock", "x/", "@{u}", "-x", "a b"):
        with pytest.raises(CommitError, match="not a usable branch name"):
            DataRepo(remote=str(tmp_path / "r.git"), clone_dir=tmp_path / "clone", branch=branch)
    a_file = tmp_path / "remote-file"
    a_file.write_text("not a repository\n")
    with pytest.raises(CommitError, match="exists and is not a directory"):
        ensure_remote(DataRepo(remote=str(a_file), clone_dir=tmp_path / "clone"))
    # "~" is expanded for git too, not only for create_remote
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    repo = DataRepo(remote="~/data.git", clone_dir=tmp_path / "clone", base_wait_s=0.01)
    create_remote(repo)
    res = commit_files(repo, {REL: artifact(tmp_path, "raw.parquet")}, subject="s", idempotency_key="k")
    assert res.status == "committed" and (tmp_path / "home" / "data.git" / "HEAD").is_file()


def test_staged_path_outside_the_allowlist_aborts(bare, tmp_path, monkeypatch):
    def sneaky(workdir, prefix):  # a bug that writes outside the prefix and asks for it to be staged
        (workdir / "README.md").write_text("overwritten\n")
        return "README.md"

    monkeypatch.setattr(lfs_mod, "ensure_attributes", sneaky)
    before = gr.log(bare)
    with pytest.raises(CommitError, match=r"bug: staged changes outside .*README\.md"):
        commit_files(data_repo(bare, tmp_path), {REL: artifact(tmp_path, "a.parquet")}, subject="s",
                     idempotency_key="k")
    assert gr.log(bare) == before


def test_gitignore_and_gitattributes_of_the_data_repo(bare, tmp_path):
    gr.clone_and_push(bare, {".gitignore": "data/\n*.parquet\n"}, "ignore data")
    art = artifact(tmp_path, "a.parquet")
    repo = data_repo(bare, tmp_path)
    assert commit_files(repo, {REL: art}, subject="s", idempotency_key="k").status == "committed"
    assert_lfs_content(bare, f"data/{REL}", art)
    # A nested .gitattributes that turns LFS off must not let parquet into git as a plain blob.
    gr.clone_and_push(bare, {"data/2026-11-23/.gitattributes": "*.parquet -filter -diff -merge\n"}, "no lfs")
    with pytest.raises(CommitError, match="not tracked by Git LFS"):
        commit_files(repo, {"2026-11-23/raw.parquet": art}, subject="s", idempotency_key="k2")
    assert "data/2026-11-23/raw.parquet" not in gr.ls_tree(bare)


def test_commits_as_fleet_when_no_identity_is_configured(bare, tmp_path, monkeypatch):
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)
    art = artifact(tmp_path, "a.parquet")
    commit_files(data_repo(bare, tmp_path), {REL: art}, subject="s", idempotency_key="k")
    assert gr.log(bare)[0]["author"] == "fleet <fleet@localhost>"
    assert_lfs_content(bare, f"data/{REL}", art)


def test_empty_remote_and_create_remote(tmp_path):
    remote = tmp_path / "made" / "data.git"
    repo = DataRepo(remote=str(remote), clone_dir=tmp_path / "clone", branch="trunk", base_wait_s=0.02)
    # a commit never creates its remote: a mistyped path would take the week's rows where nobody looks
    with pytest.raises(CommitError, match=r"data remote \(FLEET_DATA_REMOTE\) .*made/data.git does not exist"):
        ensure_remote(repo)
    assert not remote.exists()
    create_remote(repo)  # the demo's own
    create_remote(repo)  # idempotent
    ensure_remote(repo)
    assert gr.git("symbolic-ref", "HEAD", cwd=remote).stdout.decode().strip() == "refs/heads/trunk"
    gr.install_hook(remote)
    art = artifact(tmp_path, "raw.parquet")
    res = commit_files(repo, {REL: art}, subject="first", idempotency_key="first")
    assert res.status == "committed"
    assert set(gr.ls_tree(remote, "trunk")) == {"data/.gitattributes", f"data/{REL}"}
    assert_lfs_content(remote, f"data/{REL}", art, ref="trunk")
    assert gr.hook_rejections(remote) == []


def test_bad_inputs_are_refused_before_touching_git(bare, tmp_path):
    repo = data_repo(bare, tmp_path)
    art = artifact(tmp_path, "raw.parquet")
    for rel in ("../escape.parquet", "/abs.parquet", ".git/config", ".gitattributes", "a/../../b",
                "w/.gitattributes", "w/.gitignore"):
        with pytest.raises(CommitError, match="not a file path inside the data prefix"):
            commit_files(repo, {rel: art}, subject="s", idempotency_key="k")
    pointer = tmp_path / "pointer.parquet"
    pointer.write_bytes(gr.read_blob(bare, "main:README.md").replace(b"# data repo\n",
                        b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 5\n"))
    with pytest.raises(CommitError, match="is a Git LFS pointer"):
        commit_files(repo, {REL: pointer}, subject="s", idempotency_key="k")
    with pytest.raises(CommitError, match="prefix"):
        DataRepo(remote=str(bare), clone_dir=tmp_path / "c", prefix="../data/")
    assert not (tmp_path / "clone").exists()


def test_broken_or_foreign_workdir_is_recovered(bare, tmp_path):
    repo = data_repo(bare, tmp_path)
    a1, a2 = artifact(tmp_path, "a1.parquet"), artifact(tmp_path, "a2.parquet")
    commit_files(repo, {"w1/raw.parquet": a1}, subject="w1", idempotency_key="w1")
    # What a killed run leaves behind: a stale index lock, a half-written temp file, a local commit.
    (repo.clone_dir / ".git" / "index.lock").write_text("")
    (repo.clone_dir / "data" / "w1" / ".raw.parquet.fleet-tmp-1-1").write_bytes(b"half")
    (repo.clone_dir / "src" / "app.py").write_text("local junk\n")
    res = commit_files(repo, {"w2/raw.parquet": a2}, subject="w2", idempotency_key="w2")
    assert res.status == "committed" and gr.log(bare)[0]["files"] == ["data/w2/raw.parquet"]
    # A clone of some other remote at the workdir is replaced by a fresh clone.
    gr.git("remote", "set-url", "origin", str(tmp_path / "elsewhere.git"), cwd=repo.clone_dir)
    assert commit_files(repo, {"w2/raw.parquet": a2}, subject="w2", idempotency_key="w2").status == "up_to_date"
    # A directory that is not a clone is never deleted.
    foreign = DataRepo(remote=str(bare), clone_dir=tmp_path / "precious")
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("mine")
    with pytest.raises(CommitError, match="refusing to delete"):
        commit_files(foreign, {"w2/raw.parquet": a2}, subject="w2", idempotency_key="w2")
    assert (tmp_path / "precious" / "notes.txt").read_text() == "mine"


def test_token_never_appears_in_errors_or_logs(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    art = artifact(tmp_path, "raw.parquet")
    log = logging.getLogger("fleet.test.token")
    for remote, token in (("https://x:SECRET123@127.0.0.1:9/repo.git", None),
                          ("https://127.0.0.1:9/repo.git", "SECRET123")):
        repo = DataRepo(remote=remote, clone_dir=tmp_path / "clone", token=token, attempts=2, base_wait_s=0.01)
        with pytest.raises(CommitError) as err:
            commit_files(repo, {REL: art}, subject="s", idempotency_key="k", log=log)
        text = str(err.value)
        assert "127.0.0.1" in text and "branch main" in text
        assert "SECRET123" not in text and "SECRET123" not in repr(repo)
    assert "SECRET123" not in caplog.text and caplog.text
    repo = DataRepo(remote="https://x:SECRET123@h/r.git", clone_dir=tmp_path / "c")
    assert "SECRET123" not in redact("fatal: https://x:SECRET123@h/r.git SECRET123 "
                                     "Authorization: Basic eDpTRUNSRVQxMjM=", repo)
    assert "eDpTRUNSRVQxMjM=" not in redact("header eDpTRUNSRVQxMjM=", repo)


def test_token_travels_as_a_header_and_refusal_is_not_retried(tmp_path):
    seen = []

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        for remote, token, user in ((f"http://bot:SECRET123@127.0.0.1:{port}/org/data.git", None, "bot"),
                                    (f"http://127.0.0.1:{port}/org/data.git", "SECRET123", "x-access-token")):
            seen.clear()
            repo = DataRepo(remote=remote, clone_dir=tmp_path / "clone", token=token, base_wait_s=5)
            t0 = time.monotonic()
            with pytest.raises(CommitError) as err:
                commit_files(repo, {REL: artifact(tmp_path, "a.parquet")}, subject="s", idempotency_key="k")
            assert time.monotonic() - t0 < 4  # not retried with 5 s backoff
            assert "refused access" in str(err.value) and "SECRET123" not in str(err.value)
            expected = "Basic " + base64.b64encode(f"{user}:SECRET123".encode()).decode()
            assert seen and all(auth == expected and "SECRET" not in path for path, auth in seen)
    finally:
        server.shutdown()


def test_two_fleets_commit_different_weeks_at_once(bare, tmp_path):
    arts = {w: artifact(tmp_path, f"{w}.parquet", 200_000) for w in ("2026-11-09", "2026-11-16")}
    results, errors = {}, []
    barrier = threading.Barrier(2)

    def fleet(week):
        try:
            barrier.wait()
            repo = data_repo(bare, tmp_path, f"clone-{week}", attempts=6)
            results[week] = commit_files(repo, {f"{week}/raw.parquet": arts[week]}, subject=f"raw {week}",
                                         idempotency_key=f"raw:{week}")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=fleet, args=(w,)) for w in arts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert {r.status for r in results.values()} == {"committed"}
    subjects = [c["subject"] for c in gr.log(bare)]
    assert sorted(subjects[:2]) == ["raw 2026-11-09", "raw 2026-11-16"]
    for w, art in arts.items():
        assert_lfs_content(bare, f"data/{w}/raw.parquet", art)
    assert gr.hook_rejections(bare) == []


# ---- subprocess tests: a commit_files run we can kill, or whose memory we can measure -------------

DRIVER = r'''
import json, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from fleet.publish import snapshot
from fleet.publish import DataRepo, commit_files

cfg = json.loads(sys.argv[1])
if cfg.get("slow_copy"):
    marker = Path(cfg["marker"])
    def slow(dest, copied):
        if not marker.exists():
            marker.write_text("copying")
        time.sleep(cfg["slow_copy"])
    snapshot._on_copy_chunk = slow
    snapshot.LINK = False  # the copy path: a link takes no time to be killed in
repo = DataRepo(remote=cfg["remote"], clone_dir=Path(cfg["workdir"]), base_wait_s=0.05)
res = commit_files(repo, {{k: Path(v) for k, v in cfg["files"].items()}}, subject=cfg["subject"],
                   idempotency_key=cfg["subject"])
status = Path("/proc/self/status").read_text()
hwm = int(next(l for l in status.splitlines() if l.startswith("VmHWM:")).split()[1])
print(json.dumps({{"status": res.status, "sha": res.sha, "vmhwm_kb": hwm}}))
'''


def start_driver(tmp_path: Path, cfg: dict) -> subprocess.Popen:
    script = tmp_path / "driver.py"
    if not script.exists():
        script.write_text(DRIVER.format(root=str(ROOT)))
    # Own process group: a SIGKILL takes the git children down too, as losing the node would.
    return subprocess.Popen([sys.executable, str(script), json.dumps(cfg)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def run_driver(tmp_path: Path, cfg: dict, timeout: float = 600) -> dict:
    proc = start_driver(tmp_path, cfg)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_killed_runs_never_land_a_pointer_without_content_or_a_truncated_file(bare, tmp_path):
    v1 = artifact(tmp_path, "v1.parquet", 1 << 20)
    v2 = artifact(tmp_path, "v2.parquet", 8 << 20)
    path = f"data/{REL}"
    base = {"remote": str(bare), "workdir": str(tmp_path / "clone"), "files": {REL: str(v1)}, "subject": "v1"}
    assert run_driver(tmp_path, base)["status"] == "committed"

    def remote_is_whole():
        ptr = gr.pointer_oid(gr.read_blob(bare, f"main:{path}"))
        assert ptr in {(sha256(v1), v1.stat().st_size), (sha256(v2), v2.stat().st_size)}
        assert sha256(gr.lfs_object(bare, ptr[0])) == ptr[0]
        assert not list(bare.glob("refs/heads/*.lock"))

    seed = random.randrange(1 << 30)
    print(f"kill timing seed: {seed}")  # shown by pytest if this test fails
    rng = random.Random(seed)
    cfg = {**base, "files": {REL: str(v2)}, "subject": "v2"}
    # Killed while copying the 8-chunk artifact into its snapshot (slowed to 40 ms a chunk).
    for i in range(3):
        marker = tmp_path / f"copying-{i}"
        proc = start_driver(tmp_path, {**cfg, "slow_copy": 0.04, "marker": str(marker)})
        deadline = time.monotonic() + 20
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.25))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        remote_is_whole()
    # Killed at random moments anywhere in the run (clone reuse, staging, LFS upload, push, confirm).
    for _ in range(6):
        proc = start_driver(tmp_path, cfg)
        time.sleep(rng.uniform(0.05, 0.9))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        remote_is_whole()

    final = run_driver(tmp_path, cfg)
    assert final["status"] in ("committed", "up_to_date")
    assert_lfs_content(bare, path, v2)
    assert gr.hook_rejections(bare) == []
    assert not list((tmp_path / "clone" / "data").rglob("*.fleet-tmp-*"))


def test_one_gigabyte_commits_in_bounded_memory(bare, tmp_path):
    big = tmp_path / "artifacts" / "big.parquet"
    big.parent.mkdir(parents=True)
    chunk = 1 << 20
    with open(big, "wb") as fh:
        for i in range(1024):  # 1 GiB, never all in memory; random every 4th MiB
            fh.write(os.urandom(chunk) if i % 4 == 0 else bytes([i % 251]) * chunk)
    t0 = time.monotonic()
    res = run_driver(tmp_path, {"remote": str(bare), "workdir": str(tmp_path / "clone"),
                                "files": {f"{WEEK}/big.parquet": str(big)}, "subject": "big"})
    took = time.monotonic() - t0
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"1 GiB commit: {took:.1f}s, python VmHWM {res['vmhwm_kb'] / 1024:.0f} MiB, "
          f"largest child (incl. git, git-lfs) {children_kb / 1024:.0f} MiB")
    assert res["status"] == "committed"
    assert res["vmhwm_kb"] < 300 * 1024
    assert children_kb < 300 * 1024
    assert_lfs_content(bare, f"data/{WEEK}/big.parquet", big)
