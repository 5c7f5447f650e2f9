"""What a scraper's life-cycle commands do (`fleet new`, `test`, `record`, `smoke`, `canary`, `unquarantine`, `doctor`):
each takes the parsed options, prints its lines and returns the exit code (0: all pass, 1: some failed)."""
from __future__ import annotations

import os

import click

from fleet import config
from fleet.config import chromium_path, scraper_dirs, settings
from fleet.errors import FleetError
from fleet.storage.open import host_store

EXIT_OK, EXIT_PARTIAL = 0, 1


def _start() -> None:
    """What every command that opens a page checks first: a Chromium, and the browser sandbox (refused where it
    cannot be had; one line when the operator turned it off)."""
    from fleet.engine import sandbox

    sandbox.announce(settings().home, scraper_dirs(), chromium_path(), lambda line: click.echo(line, err=True))


def _table(rows, echo) -> int:
    from fleet.lifecycle.replay import print_table

    print_table(rows, echo)
    return EXIT_PARTIAL if any(r.result == "fail" for r in rows) else EXIT_OK


def new_source(name: str, url: str, echo=click.echo) -> int:
    """Writes into the first folder `fleet run` reads; refused where that is fleet's bundled demo folder, which
    `fleet run` reads only with the demo sites."""
    from fleet.lifecycle.scaffold import new

    if not config.scrapers_dir_set() and not config.demo_url():
        raise FleetError("no FLEET_SCRAPERS_DIR is set: `fleet new` writes where `fleet run` reads, and without it "
                         "that is fleet's bundled demo scrapers; make your folder and point it there "
                         "(mkdir scrapers && export FLEET_SCRAPERS_DIR=$PWD/scrapers)")
    _start()
    dirs = scraper_dirs()
    module, har, expect = new(name, url, dirs)
    where = (f"FLEET_SCRAPERS_DIR ({dirs[0]}{', its first folder' if len(dirs) > 1 else ''})"
             if config.scrapers_dir_set() else f"the bundled scrapers ({dirs[0]})")
    echo(f"fleet: wrote {module} and {har} ({expect['rows']} row(s)); `fleet run` reads it from {where}; edit the "
         f"scraper, then `fleet record {name}` and `fleet test {name}`")
    return EXIT_OK


def test(names: tuple[str, ...], allow_untested: bool = False, echo=click.echo) -> int:
    """A gate: exit 1 when a source fails its replay, is broken (its module does not import or its class does not
    validate), or has no fixture (unless ``allow_untested``)."""
    from fleet.lifecycle.replay import test_sources

    _start()
    rows = test_sources(scraper_dirs(), names)
    if not rows:
        echo(f"fleet: no source in {os.pathsep.join(map(str, scraper_dirs()))}; nothing was tested")
        return EXIT_OK
    code = _table(rows, echo)
    untested = [r.source for r in rows if r.result == "untested"]
    if untested and allow_untested:
        echo(f"fleet: untested (no fixture), allowed by --allow-untested: {', '.join(untested)}")
    elif untested:
        echo(f"fleet: untested (no fixture): {', '.join(untested)}; record each with `fleet record NAME`, or pass "
             "--allow-untested")
        code = EXIT_PARTIAL
    return code


def record(name: str, echo=click.echo) -> int:
    from fleet.lifecycle.fixtures import compare
    from fleet.lifecycle.replay import demo_sites_if_bundled, record as record_fixture, select

    _start()
    (source,), _ = select(scraper_dirs(), (name,))
    with demo_sites_if_bundled():
        old, new = record_fixture(source)
    if old is None:
        echo(f"fleet: recorded {name}: {new['rows']} rows (no earlier fixture)")
    else:
        diff = compare(old, new)
        echo(f"fleet: recorded {name}: " + ("; ".join(diff) if diff else f"no change ({new['rows']} rows)"))
    return EXIT_OK


def smoke(ref: str, echo=click.echo) -> int:
    from fleet.lifecycle import smoke as smoking
    from fleet.lifecycle.replay import demo_sites_if_bundled
    from fleet.scraping.discovery import discover

    _start()
    dirs = scraper_dirs()
    with demo_sites_if_bundled():
        rows = smoking.smoke(discover(dirs), ref, dirs, host_store(), echo)
    return EXIT_OK if rows is None else _table(rows, echo)


def canary(names: tuple[str, ...], echo=click.echo) -> int:
    from fleet.lifecycle.canary import check
    from fleet.lifecycle.replay import demo_sites_if_bundled, select

    _start()
    sources, _ = select(scraper_dirs(), names)
    with demo_sites_if_bundled():
        rows = check(sources, host_store(), settings().home)  # the webhook: FLEET_ALERT_WEBHOOK, as for every alert
    return _table(rows, echo)


def unquarantine(name: str, echo=click.echo) -> int:
    from fleet.lifecycle import quarantine
    from fleet.lifecycle.replay import select

    (source,), _ = select(scraper_dirs(), (name,))
    store = host_store()
    q = quarantine.state(store, name, source.quarantine_after)
    if q is None:
        echo(f"fleet: source {name} is not quarantined")
        return EXIT_OK
    quarantine.lift(store, name, by="fleet unquarantine")
    echo(f"fleet: lifted the quarantine of {name} (failed weeks {', '.join(q.weeks)}); the next run scrapes it")
    return EXIT_OK


def doctor(name: str, apply: bool, echo=click.echo) -> int:
    from fleet.lifecycle.doctor import doctor as examine
    from fleet.lifecycle.replay import demo_sites_if_bundled, select

    chromium_path()
    (source,), _ = select(scraper_dirs(), (name,))
    with demo_sites_if_bundled():
        return examine(source, apply, echo)
