"""Secrets only where they are used (issue 45, item 2), through the real parts: a demo week with FLEET_GIT_TOKEN set,
every process of it sampled, and the recorded fixtures checked for secrets a site wrote into its pages."""
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from fleet.errors import FleetError
from fleet_tests.conftest import SOURCE, ROOT, WEEK, committed_rows

ATTEMPT_SIDE = (b"fleet.engine.host", b"fleet.engine.attempt", b"chrom", b"headless", b"node")


def _parent(pid: str) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])


class Sampler(threading.Thread):
    """Every process descended from ``root`` (or carrying FLEET_HOME ``home``: a browser host outlives the step
    that started it, and is reparented), its command line and which ``needles`` its environment holds."""

    def __init__(self, root: int, home: str, needles: dict[str, bytes]):
        super().__init__(daemon=True)
        self.root, self.home, self.needles = root, f"FLEET_HOME={home}".encode(), needles
        self.seen: dict[tuple[int, bytes], set[str]] = {}
        self.samples: dict[tuple[int, bytes], int] = {}  # how many samples saw each
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            parents = {}
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    parents[int(pid)] = _parent(pid)
                except (OSError, ValueError, IndexError):
                    pass
            for pid in parents:
                chain, p = [], pid
                while p > 1 and p in parents and len(chain) < 64:
                    chain.append(p)
                    p = parents[p]
                try:
                    env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")
                except OSError:
                    continue
                if pid == self.root or (self.root not in chain and self.home not in env):
                    continue
                blob = b"\0".join(env)
                self.seen.setdefault((pid, cmd), set()).update(n for n, v in self.needles.items() if v in blob)
                self.samples[(pid, cmd)] = self.samples.get((pid, cmd), 0) + 1
            time.sleep(0.05)


def test_the_token_is_in_no_process_of_a_week_and_attempts_and_git_get_no_store_credentials(fleet_env):
    token, aws = f"tok-{uuid.uuid4().hex}", f"aws-{uuid.uuid4().hex}"
    env = {**fleet_env.env, "FLEET_GIT_TOKEN": token, "AWS_SECRET_ACCESS_KEY": aws}
    args = [sys.executable, "-m", "fleet.cli", "demo", "--week", WEEK, "--force", "--source", "books"]
    proc = subprocess.Popen(args, env=env, cwd=fleet_env.home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(proc.pid, str(fleet_env.home), {"token": token.encode(), "aws": aws.encode(),
                                                      "token_file": b"FLEET_GIT_TOKEN_FILE=/"})
    sampler.start()
    out, err = proc.communicate(timeout=420)
    sampler.stop.set()
    sampler.join()
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    assert sorted(set(committed_rows(fleet_env.remote, WEEK)[SOURCE])) == ["books"]
    seen = sampler.seen
    steps = [cmd for (_, cmd), found in seen.items() if b"multiprocessing" in cmd or b"dagster" in cmd]
    attempt_side = [(cmd, found) for (_, cmd), found in seen.items() if any(m in cmd for m in ATTEMPT_SIDE)]
    assert steps and attempt_side, [cmd for _, cmd in seen]  # the sampler saw the steps and the browser's side
    # A child the command forks to run a program (git, the forkserver) is, until its exec, a copy of the command with
    # its environment as given: a sample can land in that window on a loaded machine. Such a copy then runs the
    # program (the same pid, another command line) or is gone within a sample or two; a copy that lives on is one.
    execd = {pid for (pid, cmd) in seen for (other, cmd2) in seen if other == pid and cmd2 != cmd}
    copies = {(pid, cmd) for (pid, cmd) in seen if cmd == b" ".join(map(os.fsencode, args)) + b" "}
    held = [cmd for (pid, cmd), found in seen.items() if "token" in found
            and not ((pid, cmd) in copies and (pid in execd or sampler.samples[(pid, cmd)] <= 3))]
    assert not held, ("the token is in a process's environment", held)
    # the step processes have the store's credentials (the sampler reads what it should) and the token's file
    assert all({"aws", "token_file"} <= found for (_, cmd), found in seen.items() if cmd in steps), seen
    assert not [cmd for cmd, found in attempt_side if found & {"aws", "token_file"}], attempt_side
    # git and git-lfs, run by the step that commits, get the token as a header only (an https remote) and never the
    # store's or the instance's credentials
    gits = [(cmd, found) for (_, cmd), found in seen.items() if cmd.split(b" ")[0].endswith((b"git", b"git-lfs"))]
    assert gits and not [cmd for cmd, found in gits if found & {"aws", "token_file"}], gits
    assert not list((fleet_env.home / "secrets").glob("git-token.*"))  # removed as the command ended


def test_the_step_that_commits_reads_the_token_file_and_refuses_one_others_may_read(tmp_path, monkeypatch):
    from fleet.defs.resources import DataRepository
    from fleet.publish.remote import parse_remote

    # hide_git_token writes os.environ itself: set, then delete, so monkeypatch removes what it writes at the end
    # (a delenv of a name not set records nothing, and the file's name leaked into the tests after this one)
    for name in ("FLEET_GIT_TOKEN", "FLEET_GIT_TOKEN_FILE"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("FLEET_HOME", str(tmp_path))
    monkeypatch.setenv("FLEET_GIT_TOKEN", "t0ken-value")
    from fleet.secrets import hide_git_token
    (tmp_path / "secrets").mkdir(mode=0o700)
    stale = tmp_path / "secrets" / "git-token.99999999"  # a killed command's: no such process
    stale.write_text("old")
    path = hide_git_token()
    assert not stale.exists()
    assert "FLEET_GIT_TOKEN" not in os.environ and os.environ["FLEET_GIT_TOKEN_FILE"] == str(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    res = DataRepository(remote="https://git.example/data.git", clone_dir=str(tmp_path / "c"), token_file=str(path))
    assert res.data_repo().token == "t0ken-value"
    assert parse_remote("https://git.example/data.git", res.data_repo().token).token == "t0ken-value"
    path.chmod(0o644)
    with pytest.raises(FleetError, match=r"FLEET_GIT_TOKEN_FILE .* may be read by others .*chmod 600"):
        res.data_repo()


def test_record_and_new_refuse_a_fixture_holding_a_secret_or_a_cookie_the_site_set(fleet_env):
    """`fleet record` and `fleet new` write no fixture whose pages hold a configured secret's value or a cookie's
    the site set (headers and cookies are scrubbed; a page's body is not), and name where it is."""
    from fleet.demo.newsroom import COOKIE, SCRAPER, Newsroom

    scrapers = fleet_env.tmp / "scrapers"
    scrapers.mkdir()
    (scrapers / "news.py").write_text(SCRAPER)
    slack = f"xoxb-{uuid.uuid4().hex}"
    env = {**fleet_env.env, "FLEET_SCRAPERS_DIR": str(scrapers), "FLEET_SLACK_TOKEN": slack}
    with Newsroom() as site:
        env["FLEET_DEMO_URL"] = site.url
        site.note = f"debug: {slack}"
        res = subprocess.run([sys.executable, "-m", "fleet.cli", "record", "news"], env=env, capture_output=True,
                             text=True, timeout=300, cwd=fleet_env.home)
        assert res.returncode == 2, res.stdout + res.stderr
        assert f"entry 0 ({site.url}/news?week=" in res.stderr and "response body holds the value of " \
               "FLEET_SLACK_TOKEN" in res.stderr, res.stderr
        assert slack not in res.stderr and not (scrapers / "fixtures" / "news.har.zip").exists()

        site.note = f"your session: {COOKIE.split('=')[1]}"
        res = subprocess.run([sys.executable, "-m", "fleet.cli", "new", "front", site.url + "/news?week=2026-11-16"],
                             env=env, capture_output=True, text=True, timeout=300, cwd=fleet_env.home)
        assert res.returncode == 2 and "response body holds the cookie 'session'" in res.stderr, res.stderr
        assert not (scrapers / "front.py").exists() and not (scrapers / "fixtures" / "front.har.zip").exists()

        site.note = "nothing secret"
        res = subprocess.run([sys.executable, "-m", "fleet.cli", "record", "news"], env=env, capture_output=True,
                             text=True, timeout=300, cwd=fleet_env.home)
        assert res.returncode == 0, res.stdout + res.stderr
        assert (scrapers / "fixtures" / "news.har.zip").exists()
