"""`fleet worker`: a Celery worker serving the scrape steps of FLEET_EXECUTOR=celery runs (fleet/defs/celery.py),
started once this host's settings, Chromium, store, broker and instance are known good."""
from __future__ import annotations


import click

from fleet import config
from fleet.config import chromium_path, scraper_dirs, settings
from fleet.storage.open import host_store
from fleet.defs.week import say_sandbox
from fleet.errors import FleetError, without_credentials


def start_worker(concurrency: int | None, name: str | None, echo=click.echo) -> int:
    """Run a Celery worker named ``name`` (default: fleet-<pid>@<host>) scraping ``concurrency`` sources at once
    (default: FLEET_WORKER_CONCURRENCY) until it stops; its exit code."""
    from fleet.defs import celery
    from fleet.defs.instance import get_instance
    from fleet.storage.open import check_store

    s = settings()
    if s.executor != "celery":
        raise FleetError("fleet worker serves FLEET_EXECUTOR=celery runs: set FLEET_EXECUTOR=celery and "
                         "FLEET_CELERY_BROKER on this host and on the one that runs the weeks")
    chromium_path()
    scraper_dirs()
    check_store(host_store())  # the steps' rows, checkpoints and evidence go there
    celery.check_broker(s)
    # the instance the steps report to: refused now if Postgres cannot be reached. Its run settings (the pool
    # limit, the run queue) are the business of the host that runs the weeks, not of a worker
    get_instance(s, check=False)
    say_sandbox(s.home)  # this host's browsers: sandboxed, or the one line that says why not
    node = celery.worker_name(name)
    config.export(FLEET_WORKER_NAME=node)  # each step's metadata names the host and worker that ran it
    import fleet.defs.definitions  # noqa: F401  the pool's processes fork with the definitions in memory

    at_once = concurrency or s.worker_concurrency
    echo(f"fleet: worker {node} on {without_credentials(s.celery_broker)}, {at_once} at once")
    return celery.supervise(lambda: celery.worker_main(s, at_once, node), f"the celery worker {node}",
                            lambda line: echo(line, err=True))
