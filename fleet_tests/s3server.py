"""An S3-compatible server in a process of its own on loopback (moto's standalone server, as s3fs's own tests use)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
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
    # Its request log goes to a file: a pipe nobody reads fills up, and the server then blocks on its next line.
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port), "-H", "127.0.0.1"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
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
