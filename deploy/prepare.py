"""Prepare fleet's Dagster instance before the code server, the webserver and the daemon start (docker-compose.yml's
`code` service runs it first; fleet_tests/test_production.py too).

It checks the browser sandbox (the code server's runs scrape in its container), writes fleet's ``dagster.yaml``
into ``$FLEET_HOME/dagster`` where there is none (Postgres storage from ``FLEET_POSTGRES_URL``, the scrapers pool,
one run per week in the run queue, run monitoring: fleet/defs/instance.py), creates Dagster's tables in Postgres,
checks the instance and the artifact store, and exits 0. Anything missing is one line on stderr, naming why and
the fix, and exit code 2: the services are not started on an instance fleet would refuse."""
from __future__ import annotations

import sys

import click


def main() -> int:
    from fleet.config import settings
    from fleet.defs.instance import get_instance
    from fleet.defs.week import say_sandbox
    from fleet.errors import FleetError
    from fleet.storage.open import check_store, host_store

    try:
        s = settings()
        if not s.postgres_url:
            raise FleetError("FLEET_POSTGRES_URL is not set: the code server, the webserver and the daemon share "
                             "the instance through Postgres (postgresql://user:password@host:5432/db)")
        say_sandbox(s.home)  # the code server's runs scrape in this container: refused here, not per source
        get_instance(s).dispose()  # writes dagster.yaml where there is none, creates the tables, checks them
        check_store(host_store())
    except FleetError as exc:
        click.echo(f"fleet: error: {exc}", err=True)
        return 2
    click.echo(f"fleet: instance ready: {s.dagster_home / 'dagster.yaml'} (Postgres), artifacts at {s.store_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
