"""Test helpers: a GitHub-like bare remote on disk (LFS store + pre-receive hook) and "another writer".

The pre-receive hook rejects, like GitHub, pushes whose new commits reference LFS objects the store does
not hold (GH008) and pushes that create, change or delete anything under ``.github/workflows/``. Every rejection is appended to
``<bare>/hook-rejections.log`` so tests can assert that none of their own pushes was ever refused.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

OTHER = {"GIT_AUTHOR_NAME": "other writer", "GIT_AUTHOR_EMAIL": "other@example.test",
         "GIT_COMMITTER_NAME": "other writer", "GIT_COMMITTER_EMAIL": "other@example.test"}
LFS_ATTRS = "*.parquet filter=lfs diff=lfs merge=lfs -text\n"
POINTER_HEADER = b"version https://git-lfs.github.com/spec/v1"

_HOOK = r'''#!{python}
"""pre-receive: GitHub-like GH008 (unknown LFS object) and workflow-file rejections (a deletion too)."""
import os, re, subprocess, sys

ZERO = "0" * 40
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
HEADER = b"version https://git-lfs.github.com/spec/v1"

def git(*args, input=None):
    return subprocess.run(["git", *args], input=input, capture_output=True, check=True).stdout

def reject(msg):
    with open("hook-rejections.log", "a") as fh:
        fh.write(msg.replace("\n", " ") + "\n")
    print(msg, file=sys.stderr)
    sys.exit(1)

for line in sys.stdin.read().splitlines():
    old, new, ref = line.split()
    if new == ZERO:
        continue
    # what the update changes, deletions included (from the empty tree for a new branch)
    changed = git("diff", "--name-only", "--no-renames", "-z", old if old != ZERO else EMPTY_TREE, new)
    for path in filter(None, changed.decode().split("\0")):
        if path.startswith(".github/workflows/"):
            reject(f"! [remote rejected] refusing to allow a push to create, update or delete workflow `{{path}}`")
    listing = git("rev-list", "--objects", new, "--not", "--all").decode().splitlines()
    objs = [(l.split(" ", 1)[0], l.split(" ", 1)[1] if " " in l else "") for l in listing]
    if not objs:
        continue
    checks = git("cat-file", "--batch-check", input="".join(s + "\n" for s, _ in objs).encode()).decode()
    missing = []
    for (sha, path), row in zip(objs, checks.splitlines()):
        _, kind, size = row.split()
        if kind != "blob" or int(size) > 1024:
            continue
        data = git("cat-file", "blob", sha)
        if not data.startswith(HEADER):
            continue
        m = re.search(rb"^oid sha256:([0-9a-f]{{64}})$", data, re.M)
        oid = m.group(1).decode() if m else ""
        if not oid or not os.path.isfile(os.path.join("lfs", "objects", oid[:2], oid[2:4], oid)):
            missing.append(f"{{path}} ({{oid or 'bad pointer'}})")
    if missing:
        reject("GH008: Your push referenced at least %d unknown Git LFS object(s): %s"
               % (len(missing), ", ".join(missing)))
'''


def git(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None,
        check: bool = True, input: bytes | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **OTHER, **(env or {})}
    proc = subprocess.run(["git", *args], cwd=cwd, env=full, capture_output=True, input=input)
    if check and proc.returncode:
        raise AssertionError(f"git {' '.join(args)} failed ({proc.returncode}): "
                             f"{proc.stderr.decode(errors='replace')}")
    return proc


def make_remote(tmp_path: Path, *, with_history: bool = True, hooks: bool = True) -> Path:
    """A bare repo at ``tmp_path/"remote.git"`` with branch ``main``; history is seeded before the hook
    exists, so the seed may contain a workflow file."""
    bare = Path(tmp_path) / "remote.git"
    git("init", "-q", "--bare", "--initial-branch=main", str(bare))
    if with_history:
        with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
            work = Path(scratch) / "seed"
            git("init", "-q", "--initial-branch=main", str(work))
            _write(work, {"README.md": "# data repo\n", "src/app.py": "print('hello')\n",
                          ".github/workflows/ci.yml": "on: push\njobs: {}\n"})
            git("add", "-A", cwd=work)
            git("commit", "-q", "-m", "Initial commit", cwd=work)
            git("push", "-q", str(bare), "main", cwd=work)
    if hooks:
        install_hook(bare)
    return bare


def install_hook(bare: Path) -> None:
    hook = Path(bare) / "hooks" / "pre-receive"
    hook.write_text(_HOOK.format(python=sys.executable))
    hook.chmod(0o755)


def hook_rejections(bare: Path) -> list[str]:
    log = Path(bare) / "hook-rejections.log"
    return log.read_text().splitlines() if log.exists() else []


def scratch_clone(remote: Path, where: Path) -> Path:
    """A clone that skips LFS downloads, with LFS hooks installed (so a plain push uploads objects)."""
    git("clone", "-q", str(remote), str(where), env={"GIT_LFS_SKIP_SMUDGE": "1"})
    git("lfs", "install", "--local", cwd=where)
    return where


def clone_and_push(remote: Path, files: dict[str, bytes | str], message: str, *,
                   env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Another writer: clone, write ``files`` (``data/**.parquet`` through LFS), commit, plain push.
    Returns the push's CompletedProcess (``check=False`` lets a test inspect a rejection)."""
    with tempfile.TemporaryDirectory(dir=Path(remote).parent) as scratch:
        work = scratch_clone(remote, Path(scratch) / "other")
        paths = list(files)
        if any(p.startswith("data/") for p in files):
            attrs = work / "data" / ".gitattributes"
            attrs.parent.mkdir(parents=True, exist_ok=True)
            if LFS_ATTRS.strip() not in (attrs.read_text() if attrs.exists() else ""):
                with open(attrs, "a") as fh:
                    fh.write(LFS_ATTRS)
            paths.append("data/.gitattributes")
        _write(work, files)
        git("add", "-f", "--", *paths, cwd=work, env={"GIT_LFS_SKIP_SMUDGE": "1"})
        git("commit", "-q", "-m", message, cwd=work)
        return git("push", "-q", "origin", "HEAD:main", cwd=work, env=env, check=check)


def clone_and_change(remote: Path, change, message: str, *, check: bool = True) -> subprocess.CompletedProcess:
    """Another writer who does what ``change(work)`` does to a clone (links, deletions: anything), then
    ``git add -A``, commit and a plain push. Returns the push's CompletedProcess."""
    with tempfile.TemporaryDirectory(dir=Path(remote).parent) as scratch:
        work = scratch_clone(remote, Path(scratch) / "other")
        change(work)
        git("add", "-A", cwd=work, env={"GIT_LFS_SKIP_SMUDGE": "1"})
        git("commit", "-q", "-m", message, cwd=work)
        return git("push", "-q", "origin", "HEAD:main", cwd=work, check=check)


def ls_tree(remote: Path, ref: str = "main") -> dict[str, str]:
    """{path: blob sha} of every file at ``ref``."""
    out = git("ls-tree", "-r", "-z", ref, cwd=remote).stdout.decode()
    rows = {}
    for rec in filter(None, out.split("\0")):
        meta, path = rec.split("\t", 1)
        rows[path] = meta.split()[2]
    return rows


def read_blob(remote: Path, spec: str) -> bytes:
    """Content of a blob, by sha or ``ref:path``."""
    return git("cat-file", "blob", spec, cwd=remote).stdout


def log(remote: Path, ref: str = "main") -> list[dict[str, object]]:
    """Commits on ``ref``, newest first: sha, subject, message, author, files changed (vs first parent)."""
    out = git("log", "-z", "--first-parent", "--format=%H%x1f%s%x1f%B%x1f%an <%ae>", ref, cwd=remote).stdout.decode()
    rows = []
    for rec in filter(None, out.split("\0")):
        sha, subject, message, author = rec.split("\x1f")
        files = git("diff-tree", "-r", "--root", "--no-commit-id", "--name-only", "-z", sha,
                    cwd=remote).stdout.decode()
        rows.append({"sha": sha, "subject": subject, "message": message, "author": author,
                     "files": sorted(filter(None, files.split("\0")))})
    return rows


def lfs_object(remote: Path, oid: str) -> Path:
    return Path(remote) / "lfs" / "objects" / oid[:2] / oid[2:4] / oid


def pointer_oid(data: bytes) -> tuple[str, int] | None:
    """``(oid, size)`` when ``data`` is an LFS pointer."""
    if len(data) > 1024 or not data.startswith(POINTER_HEADER):
        return None
    fields = dict(line.split(" ", 1) for line in data.decode().splitlines() if " " in line)
    return fields["oid"].removeprefix("sha256:"), int(fields["size"])


def _write(root: Path, files: dict[str, bytes | str]) -> None:
    for rel, content in files.items():
        p = Path(root) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)
