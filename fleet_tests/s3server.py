"""An S3-compatible server in a process of its own on loopback (moto's standalone server, as s3fs's own tests use)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from fleet_tests.conftest import free_port

# What a process needs to reach the server: the standard AWS variables (any key works with moto).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "fleet-test", "AWS_SECRET_ACCESS_KEY": "fleet-test-secret",
               "AWS_DEFAULT_REGION": "us-east-1"}


@contextlib.contextmanager
def s3_server(timeout_s: float = 60):
    """Start moto's server on a free loopback port, wait until it answers, yield its endpoint URL, stop it."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    # its log to a file: the server logs every request, and a pipe nobody reads fills and stops it
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port), "-H", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
                            env={**os.environ, **CREDENTIALS})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"moto's server exited {proc.returncode}: {log.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto's server did not answer on {endpoint} within {timeout_s:g}s") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class Outage:
    """A loopback port that forwards to the S3 server at ``target_port``, which a test can take down and bring back:
    :meth:`stop` closes the port and every connection through it (a client is refused, as by a stopped server),
    :meth:`start` opens the same port again. The server behind keeps its objects (moto's are in its memory)."""

    def __init__(self, target_port: int):
        self.target = target_port
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server: socket.socket | None = None
        self._open: list[socket.socket] = []

    def start(self) -> "Outage":
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", self.port))
        srv.listen(64)
        self._server = srv
        threading.Thread(target=self._accept, args=(srv,), daemon=True).start()
        return self

    def _accept(self, srv: socket.socket) -> None:
        while True:
            try:
                client, _ = srv.accept()
            except OSError:  # stopped
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(1 << 16):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        srv, self._server = self._server, None
        if srv is not None:
            with contextlib.suppress(OSError):
                srv.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            srv.close()
        opened, self._open = self._open, []
        for s in opened:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
