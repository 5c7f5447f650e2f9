"""The last module a step forkserver imports (``PRELOAD`` in fleet/defs/definitions.py): it freezes what the server
has imported by then (Dagster, Playwright, polars, fleet's definitions), Python's documented use of ``gc.freeze``
before ``fork()``. Every step process forked from the server, and the server itself when it exits with the command
that started it, then leave those objects out of their garbage collections: they live as long as the process
anyway, and each collection of them took a core for a fraction of a second and touched every page the fork shared."""
import gc

gc.freeze()
