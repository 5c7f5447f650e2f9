"""Each step process takes a Dagster instance built once before the fork, instead of building its own.

A step of Dagster's multiprocess executor starts with ``DagsterInstance.from_ref(run's instance ref)``: it builds
the run storage, fleet's event log, the schedule storage and the rest from the ref, and each sqlite storage
checks its database's schema revision on the way. That was 24-28 ms of a step's ~180-240 ms of CPU in a
full-size week (process-time hooks around Dagster's calls, 40 steps; BENCHMARKS.md), and every step of a run
builds the very same instance. Taking a copy saves ~15 ms of it (a forked child that stores 5 events: 40.1
against 54.7 ms): the step still opens its own database connections, at its first event instead.

:func:`prebuild` builds it once, in the process the steps are forked from (`fleet run` before it forks its
forkserver, or Dagster's forkserver as it preloads ``fleet.defs.warm``), and :func:`install` makes
``from_ref`` hand that instance to the first call in each forked process whose ref equals the one it was built
from. Each step gets a pristine copy: the instance is never used in the process that built it, and a fork
copies it as it was. Any other call builds an instance as before: a second call in the same step, a different
ref (another ``DAGSTER_HOME``), and every call in the building process itself. A step host, a step process that
runs one step after another (fleet/defs/stephosts.py), calls :func:`keep`: each of its steps takes the same
instance, as the steps of Dagster's in-process executor share one, and none disposes it, so the event log's
connection serves the host's next step too.

What makes the copy safe to use in a forked process: Dagster's sqlite run and schedule storages open a new
connection for every operation, and fleet's event log opens its own connections in a forked process and leaves
the inherited ones untouched (fleet/defs/storage.py). The step disposes the instance when it is done, as it
disposes the one it builds (in a step host, the process's exit does). It is one more of fleet's patches of a
library's internals (the others are in fleet/defs/warm.py, executor.py, runconfig.py and stephosts.py); if
Dagster moves ``from_ref``, steps build their own instance again.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

_built: dict = {}  # "ref", "instance" (taken by the first matching call in a forked process), "pid" (the builder)


def install() -> bool:
    """Route ``DagsterInstance.from_ref`` through :func:`from_ref`; False if Dagster's layout has moved."""
    try:
        from dagster._core.instance.instance import DagsterInstance
        original = DagsterInstance.__dict__["from_ref"].__func__
    except (ImportError, KeyError, AttributeError) as exc:  # pragma: no cover - only if Dagster's layout changes
        log.warning("fleet: each step builds its own Dagster instance (%s)", exc)
        return False
    if getattr(original, "_fleet_prebuilt", False):
        return True

    def from_ref(instance_ref):
        instance = _take(instance_ref)
        return instance if instance is not None else original(instance_ref)

    from_ref._fleet_prebuilt = True
    from_ref.__wrapped__ = original
    from_ref.__doc__ = original.__doc__
    DagsterInstance.from_ref = staticmethod(from_ref)
    return True


def _take(instance_ref):
    if not _built or _built.get("pid") == os.getpid() or "instance" not in _built:
        return None
    try:
        same = instance_ref == _built["ref"]
    except Exception:  # noqa: BLE001  (a ref that does not compare is simply not this one)
        same = False
    if not same:
        return None
    if _built.get("keep"):  # a step host: every step of this process takes the same instance, left open
        instance = _built["instance"]
        instance.dispose = _kept_open  # the step's ``with`` disposes what it took; this one outlives the step
        return instance
    return _built.pop("instance")


def _kept_open() -> None:
    """``dispose`` of an instance a step host keeps for its next step: nothing until the process exits."""


def keep() -> None:
    """This forked process runs one step after another (a step host, fleet/defs/stephosts.py): each of its
    steps takes the prebuilt instance, and none disposes it, so its connections serve the next step too."""
    if _built.get("pid") != os.getpid():
        _built["keep"] = True


def prebuild() -> bool:
    """Build the instance of ``DAGSTER_HOME`` now, for the processes this one will fork. Only where that instance
    already exists (its databases are created under a lock by fleet.defs.instance.get_instance, never here).
    Never raises: a step then builds its own, and reports any real problem itself."""
    home = os.environ.get("DAGSTER_HOME")
    if not home or not os.path.isfile(os.path.join(home, "history", "runs.db")) or not install():
        return False
    try:
        from dagster._core.instance.factory import create_instance_from_ref
        from dagster._core.instance.ref import InstanceRef

        ref = InstanceRef.from_dir(home)
        instance = create_instance_from_ref(ref)
    except Exception as exc:  # noqa: BLE001
        log.warning("fleet: each step builds its own Dagster instance (%s: %s)", type(exc).__name__, exc)
        return False
    previous = _built.get("instance")
    _built.clear()
    _built.update(ref=ref, instance=instance, pid=os.getpid())
    if previous is not None:
        previous.dispose()
    return True


def preloaded_by_forkserver() -> bool:
    """Whether this import is Python's forkserver preloading its modules (``multiprocessing.forkserver.main``
    is on the stack): the process Dagster forks a UI-launched run's steps from."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(os.path.join("multiprocessing", "forkserver.py")):
            return True
        frame = frame.f_back
    return False
