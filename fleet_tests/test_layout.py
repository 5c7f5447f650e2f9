"""The layout shows the pipeline: fleet's modules import one another without cycles (lazy imports included, type-only
imports not), and the core never imports the Dagster layer (fleet.defs, fleet.cli, fleet.demo). Dagster's records
(runs, events, tags) are the exception the core needs: the policy reads them through fleet.records, a core module
that imports no other module of fleet, so the core and the Dagster layer share one door to them without either
importing the other (fleet_tests/test_records.py holds that nothing else reaches past it)."""
import ast

from fleet_tests.conftest import ROOT


def _graph() -> dict[str, set[str]]:
    mods = {}
    for path in (ROOT / "fleet").rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    graph = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for guard in ast.walk(tree)  # `if TYPE_CHECKING:` imports never run
                       if isinstance(guard, ast.If) and getattr(guard.test, "id", None) == "TYPE_CHECKING"
                       for n in ast.walk(guard)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fleet"):
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_core_never_imports_the_dagster_layer():
    graph = _graph()
    core = [m for m in graph if not m.startswith(("fleet.defs", "fleet.cli", "fleet.demo"))]
    assert {m: sorted(t for t in graph[m] if t.startswith("fleet.defs")) for m in core
            if any(t.startswith("fleet.defs") for t in graph[m])} == {}


def test_the_records_adapter_is_a_leaf_every_layer_may_import():
    graph = _graph()
    assert graph["fleet.records"] == set()
    readers = sorted(m for m, targets in graph.items() if "fleet.records" in targets)
    assert {"fleet.policy.taxonomy", "fleet.policy.followup", "fleet.defs.daemon"} <= set(readers)
