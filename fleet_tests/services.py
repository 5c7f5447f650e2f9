"""Debian's PostgreSQL and Redis servers, each started by a test on a loopback port in a temp folder and stopped
after it: the servers of fleet's distributed stack, real, with nothing left running."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 60.0, proc: subprocess.Popen | None = None, what: str = "server") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before it listened on port {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def pg_bin(name: str) -> str:
    found = sorted(PG_BIN.glob(f"*/bin/{name}"))
    if not found:
        raise RuntimeError(f"Debian's postgresql is not installed (no {PG_BIN}/*/bin/{name}); run .ci/setup")
    return str(found[-1])


class Postgres:
    """A PostgreSQL cluster run as the ``postgres`` user (the server refuses root) on ``port``, in a folder of its
    own under the system temp dir: a test's tmp_path is private to root, and the server must reach its data."""

    def __init__(self, port: int | None = None):
        self.root = Path(tempfile.mkdtemp(prefix="fleet-pg-"))
        self.data = self.root / "pgdata"
        self.sock = self.root / "pgsock"
        self.port = port or free_port()
        self.url = f"postgresql://postgres:fleet@127.0.0.1:{self.port}/fleet"

    def _as_postgres(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        # output to a file, not a pipe: pg_ctl's server inherits it and would hold a pipe open for ever
        with tempfile.TemporaryFile("w+") as out:
            done = subprocess.run(["runuser", "-u", "postgres", "--", *cmd], stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=120,
                                  env={**os.environ, "PGPASSWORD": "fleet"})
            out.seek(0)
            text = out.read().strip()
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {text[-2000:]}")
        return done

    def init(self) -> "Postgres":
        self.sock.mkdir(exist_ok=True)
        shutil.chown(self.root, "postgres")
        shutil.chown(self.sock, "postgres")
        os.chmod(self.root, 0o755)
        pw = self.root / "pw"
        pw.write_text("fleet\n")
        shutil.chown(pw, "postgres")
        self._as_postgres(pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=md5",
                          f"--pwfile={pw}", "-E", "UTF8")
        self.start()
        self._as_postgres(pg_bin("createdb"), "-h", str(self.sock), "-p", str(self.port), "-U", "postgres", "fleet")
        return self

    def start(self) -> None:
        # -w waits until the server accepts connections
        self._as_postgres(pg_bin("pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "-l", str(self.root / "log"),
                          "-o", f"-h 127.0.0.1 -p {self.port} -k {self.sock} -c fsync=off "
                          "-c max_connections=200", "start")

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres(pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self):
        return self.init()

    def __exit__(self, *exc):
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class Redis:
    """Debian's redis-server on a loopback port, in ``root``. ``persist``: an append-only file, as a production
    broker keeps, so a restart keeps the queue and the results; else nothing is kept."""

    def __init__(self, root: Path, port: int | None = None, persist: bool = False):
        self.root = root
        self.persist = persist
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if not exe:
            raise RuntimeError("Debian's redis-server is not installed; run .ci/setup")
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "yes" if self.persist else "no", "--appendfsync", "always",
                                      "--dir", str(self.root), "--protected-mode", "no"],
                                     stdout=open(self.root / "redis.log", "ab"), stderr=subprocess.STDOUT)
        wait_port(self.port, proc=self.proc, what="redis-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
