"""``python -m fleet.demo [--port N] [--latency-ms MS] [--state-dir DIR]``: serve the demo sites until Ctrl-C."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from fleet.demo.sites import SITES, DemoSites


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m fleet.demo", description=__doc__)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--latency-ms", type=float, default=None)
    ap.add_argument("--state-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    with DemoSites(port=args.port, latency_ms=args.latency_ms, state_dir=args.state_dir) as sites:
        print(f"demo sites at {sites.url} ({', '.join(SITES)}); export FLEET_DEMO_URL={sites.url}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
