"""`fleet ui`: Dagster's webserver and daemon (`dagster dev` on workspace.yaml) as a child of this process, with the
instance, store and broker checked first, and stopped with it however this process is stopped. While it runs, its
daemon is the instance's: fleet's other commands use it and start none (fleet/defs/daemon.py)."""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys

import click

from fleet import config
from fleet.config import PROJECT_ROOT, settings
from fleet.defs import daemon
from fleet.storage.open import host_store
from fleet.defs.week import demo_data_remote, say_sandbox


def serve(port: int, demo: bool | None, echo=click.echo) -> int:
    """Run `dagster dev` on ``port`` until it stops; its exit code. ``demo``: serve the demo sites meanwhile
    (None: when no FLEET_SCRAPERS_DIR is set, that is with the bundled scrapers)."""
    from dagster import DagsterInstance

    from fleet.defs.instance import check_instance, ensure_home
    from fleet.storage.open import check_store

    s = settings()
    ensure_home(s)
    with DagsterInstance.get() as instance:  # what the webserver and daemon will load: refused now, not later
        check_instance(s, instance)
    check_store(host_store())
    if s.executor == "celery":  # the runs it launches queue their steps there; workers may start later
        from fleet.defs.celery import check_broker

        check_broker(s)
    use_demo = demo if demo is not None else not config.scrapers_dir_set()
    # The demo's runs commit to its own repository, made here as `fleet demo` makes it. Any other remote is not
    # checked: the UI is also where an operator looks while the data repository's host is down; a run's commit
    # refuses a remote that is not there (fleet/publish/datarepo.py ensure_remote).
    if use_demo:
        demo_data_remote()
    say_sandbox(s.home)  # the runs it launches scrape on this host under the multiprocess executor
    # `dagster dev` runs in the checkout; its code server and runs must use this home, as this process does
    config.export(FLEET_HOME=str(s.home))
    with contextlib.ExitStack() as stack:
        stack.enter_context(daemon.hosting(s, echo))  # after a daemon another command started has stopped
        if use_demo:
            from fleet.demo.sites import DemoSites

            sites = stack.enter_context(DemoSites())
            config.export(FLEET_DEMO_URL=sites.url)
            echo(f"fleet: demo sites at {sites.url}")
        cmd = [sys.executable, "-m", "dagster", "dev", "-w", str(PROJECT_ROOT / "workspace.yaml"), "-p", str(port)]
        dev = subprocess.Popen(cmd, cwd=PROJECT_ROOT)
        # `kill` of this process alone (not its group, as Ctrl-C is) must not leave `dagster dev`, its webserver
        # and its daemon running: it gets the signal too, and stops them as it does on Ctrl-C.
        previous = {sig: signal.signal(sig, lambda signum, _frame: dev.send_signal(signum))
                    for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            while True:
                try:
                    return dev.wait()
                except KeyboardInterrupt:  # Ctrl-C reached `dagster dev` as well; wait for it to stop
                    continue
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
