"""Playwright locator chains in a scraper module, read with ``ast`` (never by running it): the row locator a scraper
iterates (``for row in await page.locator("tr.book").all()``, or ``rows.nth(i)`` of a bound locator) and each
field it reads from a row (``await row.locator("td.isbn").inner_text()``, ``row.get_by_test_id("price")``,
``row.locator("td").nth(2)``, ``row.locator("a").get_attribute("href")``...). A chain is kept as its steps and as
text (``locator("tr.book").nth(2)``), which a browser rebuilds through Playwright's public API (:func:`build`);
:func:`patch` puts another chain where one was written. What cannot be read is said with its line and why.
"""
from __future__ import annotations

import ast
import dataclasses
import json

# Steps a chain may hold; their arguments are literals only, so that a chain's text is the whole locator.
STEPS = frozenset({"locator", "get_by_role", "get_by_text", "get_by_test_id", "get_by_label", "get_by_placeholder",
                   "get_by_alt_text", "get_by_title", "nth", "filter"})
PROPERTIES = frozenset({"first", "last"})
# How a field's value is read from the element its chain finds (Locator methods)
READS = frozenset({"inner_text", "text_content", "get_attribute", "input_value"})
ITERATE = frozenset({"all"})


@dataclasses.dataclass
class Step:
    method: str
    args: list
    kwargs: dict

    def text(self) -> str:
        if self.method in PROPERTIES:
            return self.method
        parts = [json.dumps(a) for a in self.args] + [f"{k}={_py(v)}" for k, v in self.kwargs.items()]
        return f"{self.method}({', '.join(parts)})"


def _py(value) -> str:
    return "True" if value is True else "False" if value is False else json.dumps(value)


def text(steps: list[Step]) -> str:
    return ".".join(s.text() for s in steps)


class Unreadable(Exception):
    """A locator this reader cannot follow: its line and why."""

    def __init__(self, line: int, why: str):
        super().__init__(f"line {line}: {why}")
        self.line, self.why = line, why


def _value(node, constants: dict[str, str]):
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, bool)):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    raise Unreadable(node.lineno, f"{ast.unparse(node)} is not a literal (a string, a number or a module constant); "
                                  "fleet doctor reads locators written as literals")


def steps_of(node, constants: dict[str, str]) -> tuple[ast.AST, list[Step]] | None:
    """``(root, steps)`` when ``node`` is a chain of locator steps on a name (``page``, ``row``...); None when it
    is no chain at all; :class:`Unreadable` when it is one this reader cannot follow."""
    steps: list[Step] = []
    while True:
        if isinstance(node, ast.Attribute) and node.attr in PROPERTIES:
            steps.append(Step(node.attr, [], {}))
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STEPS:
            if node.func.attr == "filter" and any(k.arg in ("has", "has_not") for k in node.keywords):
                raise Unreadable(node.lineno, f"{ast.unparse(node)}: a filter by another locator is not followed; "
                                              "filter(has_text=...) is")
            if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
                raise Unreadable(node.lineno, f"{ast.unparse(node)}: arguments unpacked with * or **")
            steps.append(Step(node.func.attr, [_value(a, constants) for a in node.args],
                              {k.arg: _value(k.value, constants) for k in node.keywords}))
            node = node.func.value
        else:
            break
    if not steps or not isinstance(node, ast.Name):
        return None
    return node, steps[::-1]


def build(root, chain: list[Step] | str):
    """The Playwright locator of ``chain`` on ``root`` (a page or a locator), through its public methods."""
    loc = root
    for step in parse_text(chain) if isinstance(chain, str) else chain:
        loc = getattr(loc, step.method) if step.method in PROPERTIES else \
            getattr(loc, step.method)(*step.args, **step.kwargs)
    return loc


def parse_text(chain: str) -> list[Step]:
    """The steps of a chain's text (:func:`text`), e.g. ``get_by_role("row").nth(1)``."""
    found = steps_of(ast.parse("_." + chain, mode="eval").body, {})
    if found is None:
        raise ValueError(f"not a locator chain: {chain}")
    return found[1]


@dataclasses.dataclass
class Field:
    name: str
    chain: str                      # relative to the row, e.g. 'locator("td.isbn")'
    read: str                       # inner_text | text_content | input_value | get_attribute
    attribute: str | None           # get_attribute's name
    spans: list                     # [(start, end)] of the chain's text after the row's name, in the module


@dataclasses.dataclass
class Row:
    chain: str                      # relative to the page, e.g. 'locator("table#books tr.book")'
    root: str                       # the name it is called on in the module (page)
    line: int
    spans: list
    fields: list[Field]
    calls: set = dataclasses.field(default_factory=set)  # (line, column) of each call its chains are made of


def _calls(node: ast.AST) -> set:
    return {(n.lineno, n.col_offset) for n in ast.walk(node) if isinstance(n, ast.Call)}


def _offsets(source: str):
    starts, n = [], 0
    for line in source.splitlines(keepends=True):
        starts.append(n)
        n += len(line.encode("utf-8"))
    return lambda line, col: starts[line - 1] + col  # ast's columns are of UTF-8 bytes


def _span(at, root: ast.AST, node: ast.AST) -> tuple[int, int]:
    """Where a chain's steps are written: after its root's name (``page``), to its end."""
    return at(root.end_lineno, root.end_col_offset), at(node.end_lineno, node.end_col_offset)


def _field_name(call: ast.AST, parents: dict, assigned_to: dict[str, str]) -> str | None:
    """The column a read value goes to: the key of the dict it is the value of, or of the dict whose value uses
    the variable it is assigned to (``price = await row...; yield {"price": parse(price)}``)."""
    node = call
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.Dict):
            i = parent.values.index(node) if node in parent.values else -1
            key = parent.keys[i] if i >= 0 else None
            return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        if isinstance(parent, (ast.Assign, ast.AnnAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                return assigned_to.get(targets[0].id, targets[0].id)
            return None
        if isinstance(parent, ast.stmt):
            return None
        node = parent
    return None


def rows(tree: ast.Module, source: str, constants: dict[str, str]) -> tuple[list[Row], list[str]]:
    """The row chains of a module and their fields; and, for each chain this reader met but cannot follow (a row
    locator's or a field's), ``line N: why``."""
    at = _offsets(source)
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    problems: list[str] = []

    def chain(node):
        try:
            return steps_of(node, constants)
        except Unreadable as exc:
            problems.append(str(exc))
            return None

    # name -> (root, steps, node) of `rows = page.locator(...)`, or why it cannot be read: said only if a row is
    # taken from it (a polars frame's .filter(...) is no locator)
    bound: dict[str, tuple | Unreadable] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found = steps_of(node.value, constants)
            except Unreadable as exc:
                found = exc
            if isinstance(found, Unreadable) or found and found[0].id != node.targets[0].id:
                bound[node.targets[0].id] = found if isinstance(found, Unreadable) else (*found, node.value)
    row_of: dict[str, tuple] = {}                       # row variable -> (root, steps, node)
    lists: dict[str, tuple] = {}                        # `rows = await page.locator(...).all()` -> the chain

    def row_source(node, nth=True):
        """A chain a row comes from: ``X.all()`` of a chain or of a bound name, ``X.nth(i)`` of a bound name, a
        list of ``X.all()``."""
        if isinstance(node, ast.Name) and node.id in lists:
            return lists[node.id]
        if isinstance(node, ast.Await):
            node = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Name) and target.id in bound and node.func.attr in (*ITERATE, "nth")[:1 + nth]:
                if isinstance(bound[target.id], Unreadable):
                    problems.append(str(bound[target.id]))
                    return None
                return bound[target.id]
            if node.func.attr in ITERATE and (found := chain(target)):
                return (*found, target)
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Await) and (got := row_source(node.value, nth=False)):
            lists[node.targets[0].id] = got
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(node.target, ast.Name):
            if got := row_source(node.iter):
                row_of[node.target.id] = got
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "nth" \
                    and (got := row_source(value)):
                row_of[node.targets[0].id] = got
    assigned_to: dict[str, str] = {}
    for node in ast.walk(tree):  # {"price": parse(price)}: the variable price feeds the column price
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    assigned_to.update({n.id: k.value for n in ast.walk(v) if isinstance(n, ast.Name)
                                        and n.id not in assigned_to})
    out: dict[tuple, Row] = {}
    for name, (root, steps, node) in row_of.items():
        row = out.setdefault(("rows", text(steps)), Row(text(steps), root.id, node.lineno, [], []))
        span = _span(at, root, node)
        row.calls |= _calls(node)
        if span not in row.spans:
            row.spans.append(span)
    for node in sorted(ast.walk(tree), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in READS):
            continue
        target = node.func.value
        found = chain(target) if not isinstance(target, ast.Name) else (target, [])
        if not found or found[0].id not in row_of:
            continue
        root, steps = found
        row = out[("rows", text(row_of[root.id][1]))]
        column = _field_name(node, parents, assigned_to)
        if column is None:
            problems.append(f"line {node.lineno}: {ast.unparse(node)}: the value it reads goes to no column "
                            "(a dict's key, or a variable a dict's value uses)")
            continue
        attribute = None
        if node.func.attr == "get_attribute":
            try:
                attribute = _value(node.args[0], constants) if node.args else None
            except Unreadable as exc:
                problems.append(str(exc))
                continue
        if not steps:
            problems.append(f"line {node.lineno}: {ast.unparse(node)}: the row element's own value; fleet doctor "
                            "repairs locators of a row's parts")
            continue
        span = _span(at, root, target)
        row.calls |= _calls(node)
        same = next((f for f in row.fields if f.name == column and f.chain == text(steps)), None)
        if same:
            same.spans.append(span)
        else:
            row.fields.append(Field(column, text(steps), node.func.attr, attribute, [span]))
    return [r for r in out.values() if r.fields], problems


def patch(source: str, replace: list[tuple[list, str]]) -> str:
    """``source`` with each span of ``replace`` (``[(spans, new chain text)]``) holding ``.`` + the new chain."""
    raw = source.encode("utf-8")
    edits = sorted(((s, e, new) for spans, new in replace for s, e in spans), reverse=True)
    for start, end, new in edits:
        raw = raw[:start] + ("." + new).encode("utf-8") + raw[end:]
    text_ = raw.decode("utf-8")
    ast.parse(text_)  # a proposal is valid Python, or it is a bug here
    return text_
