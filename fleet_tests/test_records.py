"""One adapter for Dagster's records (fleet/records.py): no other module of fleet touches a DagsterInstance member
that Dagster does not mark ``@public``, or imports ``dagster._``; every non-public member the adapter lists exists
in this Dagster and is indeed non-public, and its tripwire fails at import, naming the member, when one is gone."""
import ast
import inspect

import pytest
from dagster import DagsterInstance
from dagster._annotations import is_public

from fleet_tests.conftest import ROOT

ADAPTER = "fleet/records.py"
# Not yet switched to the adapter: other engineers own these files; the lead moves them over at merge
# (the adapter has a function for each call). An entry that has no violation left fails below: remove it then.
PENDING: set[str] = set()  # files not yet switched over to fleet/records.py: none

PUBLIC = {n for n in dir(DagsterInstance)
          if not n.startswith("__") and is_public(inspect.getattr_static(DagsterInstance, n))}
NON_PUBLIC = {n for n in dir(DagsterInstance) if not n.startswith("__")} - PUBLIC


def _base_name(node: ast.expr) -> str:
    """``instance`` for ``instance``, ``context.instance``, ``self._instance``; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def violations(source: str) -> list[str]:
    """Each use in ``source`` of a non-public DagsterInstance member, on a name that holds an instance
    (``instance``, ``x.instance``, ``x._instance``, ``dagster_instance``) or on the class itself, and each import of
    ``dagster._``."""
    found = []
    for node in sorted(ast.walk(ast.parse(source)), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if isinstance(node, ast.Attribute) and node.attr in NON_PUBLIC:
            base = _base_name(node.value)
            if base == "DagsterInstance" or base.lstrip("_").endswith("instance"):
                found.append(f"line {node.lineno}: {base}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dagster._"):
            found.append(f"line {node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.startswith("dagster._")]
    return found


def test_the_checker_catches_what_it_guards():
    planted = ("def f(instance, context, self):\n"
               "    instance.all_logs('r')\n"
               "    context.instance.add_run_tags('r', {})\n"
               "    self._instance.event_log_storage.free_concurrency_slots_for_run('r')\n"
               "    DagsterInstance.from_ref(ref)\n"
               "    from dagster._core.launcher.base import WorkerStatus\n"
               "    import dagster._core.events\n")
    assert [v.split(": ", 1)[1] for v in violations(planted)] == [
        "instance.all_logs", "instance.add_run_tags", "_instance.event_log_storage", "DagsterInstance.from_ref",
        "from dagster._core.launcher.base import", "import dagster._core.events"]
    public = ("def f(instance, context):\n"
              "    instance.get_run_records()\n"
              "    context.instance.get_run_by_id('r')\n"
              "    DagsterInstance.get()\n"
              "    run.tags.get('x')\n")
    assert violations(public) == []


def test_only_the_adapter_reaches_dagster_s_non_public_members():
    found, pending = {}, set()
    for path in sorted((ROOT / "fleet").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == ADAPTER:
            continue
        bad = violations(path.read_text())
        if rel in PENDING:
            pending |= {rel} if bad else set()
        elif bad:
            found[rel] = bad
    assert found == {}
    assert pending == PENDING  # a file switched over no longer needs its exemption


def test_the_adapter_lists_only_members_that_exist_and_are_not_public():
    from fleet import records

    on_instance = [e.split(".", 1)[1] for e in records.NON_PUBLIC if e.startswith("DagsterInstance.")]
    names = [n for e in on_instance for n in e.split(", ")]
    assert names and all(hasattr(DagsterInstance, n) for n in names)
    assert [n for n in names if n in PUBLIC] == []
    # and every non-public instance member the adapter's own code uses is in its list
    used = {v.split(": ", 1)[1].split(".", 1)[1] for v in violations((ROOT / ADAPTER).read_text())
            if "import" not in v}
    assert used - set(names) == set()


def test_the_tripwire_names_a_member_this_dagster_lacks():
    from fleet import records

    records.tripwire(records.NON_PUBLIC)  # this Dagster has every one
    with pytest.raises(ImportError, match=r"fleet\.records: DagsterInstance\.get_events_the_old_way is gone"):
        records.tripwire({"DagsterInstance.get_events_the_old_way": "what it stood in for"})
    with pytest.raises(ImportError, match=r"fleet\.records: module dagster\._core\.no_such_module is gone"):
        records.tripwire({"module dagster._core.no_such_module": "a module dagster.yaml names"})
