"""The locators a scraper module uses, read from its source (``ast``, never by running it), and the same module with
some of them replaced (for ``fleet doctor``'s proposal, as a unified diff).

A scraper is short Playwright code; its locators are string literals:
  * the first argument of a page method that takes a selector (``page.locator("table#books tr.book")``,
    ``page.fill("#q", ...)``, ``page.click(...)``, ``page.wait_for_selector(...)``, ...);
  * ``document.querySelector('...')`` / ``querySelectorAll`` inside a JavaScript string of the module;
  * a *row locator*: a ``locator(...)`` whose ``evaluate_all(JS)`` maps each element to a row, with ``JS`` a string
    (or a module constant) of fields ``name: r.querySelector('.sub')?.textContent``: the field's sub-selector,
    relative to the row element. These are what ``fleet doctor`` can repair: their elements hold the rows' values.
  * a row locator written as a Playwright locator chain, iterated (``.all()``, ``.nth(i)``), whose fields are read
    per row (``row.locator("td.isbn").inner_text()``, ``row.get_by_test_id(...)``...): fleet/scraping/chains.py.
Reading the source rather than recording selectors at run time works for a scraper that failed before reaching a
locator, and says where each literal is, which a proposal needs to replace it.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import json
import re
from pathlib import Path

from fleet.scraping import chains

SELECTOR_METHODS = frozenset({
    "locator", "fill", "click", "dblclick", "check", "uncheck", "hover", "type", "press", "select_option", "tap",
    "focus", "wait_for_selector", "query_selector", "query_selector_all", "eval_on_selector", "eval_on_selector_all",
    "inner_text", "inner_html", "text_content", "get_attribute", "is_visible", "is_hidden", "set_input_files"})
DOC_SELECTOR_RE = re.compile(r"document\.querySelector(?:All)?\(\s*(['\"])(.+?)\1\s*\)")
# name: r.querySelector('.sub')?.textContent  (a value field; one read through another property is not matched)
FIELD_RE = re.compile(r"\b(\w+)\s*:\s*\w+\.querySelector\(\s*(['\"])(.+?)\2\s*\)(\?\.textContent)?")


@dataclasses.dataclass
class RowLocator:
    selector: str
    fields: dict[str, str]          # value fields (textContent): name -> sub-selector relative to the row
    other_fields: dict[str, str]    # read through another property (href, ...): name -> sub-selector


@dataclasses.dataclass
class Used:
    selectors: list[str]            # every selector the module names, in order of appearance, once each
    rows: list[RowLocator]
    chains: list[chains.Row] = dataclasses.field(default_factory=list)  # rows read through locator chains
    unread: list[str] = dataclasses.field(default_factory=list)  # "line N: why" of each chain not followed
    outside: set[str] = dataclasses.field(default_factory=set)  # selectors named outside the rows' chains too

    def sub_selectors(self) -> list[str]:
        return list(dict.fromkeys(s for r in self.rows for s in (*r.fields.values(), *r.other_fields.values())))


def _constants(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _literal(node, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _located_names(tree: ast.Module) -> dict[str, str]:
    """Variables bound to ``X.locator("literal")``: ``rows = page.locator("#jobs tr.job")``, also in a tuple."""
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) and
                     isinstance(node.value, ast.Tuple) else [(target, node.value)])
            for name, value in pairs:
                if isinstance(name, ast.Name) and (sel := _locator_literal(value)):
                    out[name.id] = sel
    return out


def _locator_literal(node) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "locator"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return node.args[0].value
    return None


def parse(path: Path) -> Used:
    """The locators of the scraper module at ``path`` (a SyntaxError propagates: the module is broken)."""
    source = Path(path).read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    constants, named = _constants(tree), _located_names(tree)
    selectors: list[str] = []
    rows: dict[str, RowLocator] = {}
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)),
                   key=lambda n: (n.lineno, n.col_offset))
    chained, unread = chains.rows(tree, source, constants)
    in_chains = set().union(*(r.calls for r in chained))
    outside = set()
    for call in calls:
        attr = call.func.attr
        if attr in SELECTOR_METHODS and call.args and isinstance(call.args[0], ast.Constant) \
                and isinstance(call.args[0].value, str):
            selectors.append(call.args[0].value)
            if (call.lineno, call.col_offset) not in in_chains:
                outside.add(call.args[0].value)
        if attr == "evaluate_all" and call.args:
            target = call.func.value
            row_sel = _locator_literal(target) or (named.get(target.id) if isinstance(target, ast.Name) else None)
            js = _literal(call.args[0], constants)
            if row_sel and js:
                row = rows.setdefault(row_sel, RowLocator(row_sel, {}, {}))
                for m in FIELD_RE.finditer(js):
                    (row.fields if m.group(4) else row.other_fields)[m.group(1)] = m.group(3)
    for text in constants.values():
        found = [m.group(2) for m in DOC_SELECTOR_RE.finditer(text)]
        selectors += found
        outside.update(found)
    return Used(list(dict.fromkeys(selectors)), list(rows.values()), chained, unread, outside)


def patch(path: Path, rows: dict[str, str], fields: dict[tuple[str, str], str], source: str | None = None) -> str:
    """The module's source with the row locators ``rows`` (old -> new selector) and the value fields ``fields``
    ((field, old sub-selector) -> new) replaced: each string literal equal to an old row selector and each
    ``document.querySelector(All)('old')`` of a JavaScript string, and each ``field: r.querySelector('old')``.
    Everything else is left as it is. (A new selector holding the quote its JavaScript string uses is not made:
    fleet/lifecycle/repair.py quotes attribute values with double quotes.) ``source``: the module's text, when
    already patched otherwise."""
    source = Path(path).read_text(encoding="utf-8") if source is None else source
    lines = source.splitlines(keepends=True)
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in rows \
                and node.lineno == node.end_lineno:
            spans.append((node.lineno - 1, node.col_offset, node.end_col_offset, rows[node.value]))
    for line, start, end, new in sorted(spans, reverse=True):  # offsets are of UTF-8 bytes
        raw = lines[line].encode("utf-8")
        lines[line] = (raw[:start] + json.dumps(new).encode("utf-8") + raw[end:]).decode("utf-8")
    text = "".join(lines)
    for old, new in rows.items():  # the same selector inside JavaScript: document.querySelectorAll('#jobs tr.job')
        pattern = re.compile(r"(document\.querySelector(?:All)?\(\s*)(['\"])" + re.escape(old) + r"\2")
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{new}{m.group(2)}", text)
    for (field, old), new in fields.items():
        pattern = re.compile(r"(\b" + re.escape(field) + r"\s*:\s*\w+\.querySelector\(\s*)(['\"])" + re.escape(old) + r"\2")
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{new}{m.group(2)}", text)
    ast.parse(text)  # a proposal is valid Python, or it is a bug here
    return text


def diff(path: Path, new_text: str) -> str:
    old = Path(path).read_text(encoding="utf-8")
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                        fromfile=f"a/{Path(path).name}", tofile=f"b/{Path(path).name}"))
