"""``fleet doctor`` for a scraper written with Playwright locator chains (fleet/scraping/chains.py): count a row
locator and its fields on a page, read last week's values through them, and on today's page find the elements that
hold those values and the simplest locator chains that find exactly them, role and test-id ones first. Every
candidate is checked through Playwright itself (its roles and test ids are its own), against elements marked on the
page: a proposal is what Playwright finds, not what a CSS engine would."""
from __future__ import annotations

import json
import math

from fleet.lifecycle.repair import ROWS_JS
from fleet.scraping import chains

ROW_MARK, CELL_MARK, EXTRA_MARK = "data-fleet-doctor-row", "data-fleet-doctor-cell", "data-fleet-doctor-extra"
MAX_ROWS = 300              # rows counted and read on one page: enough to tell a broken locator from a working one
READ_TIMEOUT_MS = 2_000

# On today's page: last week's rows (fleet/lifecycle/repair.py ROWS_JS); rows and their cells are marked, and what
# they have in common is described for the candidates.
FIND_JS = """({rows, fields, minShare, marks}) => {
  const [ROW, CELL] = marks;
  for (const e of document.querySelectorAll(`[${ROW}],[${CELL}]`)) { e.removeAttribute(ROW); e.removeAttribute(CELL); }""" + ROWS_JS + """
  const got = findRows(rows, fields, minShare);
  if (got.error) return got;
  const {found} = got;
  found.forEach((a, i) => {
    a.row.setAttribute(ROW, String(i));
    for (const [f, el] of Object.entries(a.cells)) el.setAttribute(CELL, `${i}:${f}`);
  });
  const same = vals => vals.every(v => v === vals[0]) ? vals[0] : null;
  const ours = n => n === ROW || n === CELL || n.startsWith('data-fleet-doctor');
  const describe = els => ({
    tag: same(els.map(e => e.tagName.toLowerCase())),
    testid: same(els.map(e => e.getAttribute('data-testid'))),
    role: same(els.map(e => e.getAttribute('role'))),
    label: same(els.map(e => e.getAttribute('aria-label'))),
    text: same(els.map(e => norm(e.textContent))),
    classes: els.map(e => Array.from(e.classList)).reduce((a, b) => a.filter(x => b.includes(x))),
    attrs: Array.from(els[0].attributes).filter(a => !['id', 'class', 'style', 'role', 'aria-label', 'data-testid'].includes(a.name)
      && !ours(a.name) && els.every(e => e.getAttribute(a.name) === a.value)).map(a => [a.name, a.value]),
  });
  const R = found.map(a => a.row);
  const ancestors = [];
  for (let anc = R[0].parentElement; anc && anc !== document.body; anc = anc.parentElement)
    if (R.every(r => anc.contains(r))) ancestors.push({...describe([anc]), id: anc.id || null});
  const cells = {};
  for (const f of fields) {
    const pairs = found.filter(a => a.cells[f.name]);
    if (!pairs.length) { cells[f.name] = null; continue; }
    const els = pairs.map(a => a.cells[f.name]);
    const pos = pairs.map(a => Array.from(a.row.querySelectorAll(a.cells[f.name].tagName)).indexOf(a.cells[f.name]));
    cells[f.name] = {...describe(els), index: same(pos), count: pairs.length};
  }
  return {found: found.length, row: describe(R), ancestors, cells};
}"""

# Implicit ARIA roles of the tags a scraper reads most (what Playwright's get_by_role matches without a role attribute)
ROLES = {"tr": "row", "td": "cell", "th": "columnheader", "a": "link", "button": "button", "li": "listitem",
         "ul": "list", "ol": "list", "table": "table", "article": "article", "nav": "navigation", "main": "main",
         "h1": "heading", "h2": "heading", "h3": "heading", "h4": "heading", "h5": "heading", "h6": "heading",
         "tbody": "rowgroup", "thead": "rowgroup", "dd": "definition", "dt": "term", "img": "img"}


def label(root: str, chain: str) -> str:
    return f"{root}.{chain}"


async def _read(loc, field: chains.Field):
    loc = loc.first
    if field.read == "get_attribute":
        return await loc.get_attribute(field.attribute, timeout=READ_TIMEOUT_MS)
    return await getattr(loc, field.read)(timeout=READ_TIMEOUT_MS)


async def _count(loc) -> int | None:
    try:
        return await loc.count()
    except Exception:  # no valid selector (Playwright's error names it)
        return None


async def counts(page, row: chains.Row) -> dict[str, int | str | None]:
    """The row locator's matches on ``page``, and per field how many of those rows it finds an element in ("?"
    when there are no rows to look in); None for a locator Playwright refuses."""
    rows = chains.build(page, row.chain)
    n = await _count(rows)
    out: dict = {label(row.root, row.chain): n}
    for f in row.fields:
        out[label("row", f.chain)] = 0 if n else "?"
    for i in range(min(n or 0, MAX_ROWS)):
        for f in row.fields:
            key = label("row", f.chain)
            got = await _count(chains.build(rows.nth(i), f.chain))
            out[key] = None if got is None or out[key] is None else out[key] + (got > 0)
    return out


async def values(page, row: chains.Row) -> list[dict]:
    """Last week's values as the page showed them, read through the scraper's own locators, one dict per row."""
    rows = chains.build(page, row.chain)
    out = []
    for i in range(min(await _count(rows) or 0, MAX_ROWS)):
        got = {}
        for f in row.fields:
            loc = chains.build(rows.nth(i), f.chain)
            try:
                got[f.name] = await _read(loc, f) if await loc.count() else None
            except Exception:
                got[f.name] = None
        out.append(got)
    return out


def _css(d: dict, *, scoped: bool = True) -> list[str]:
    """CSS candidates for elements described by FIND_JS: class, tag and class, shared attribute, tag."""
    tag, out = d["tag"] or "", []
    for k in d["classes"]:
        out += [f".{k}", f"{tag}.{k}"] if tag else [f".{k}"]
    out += [f"{tag}[{n}={json.dumps(v)}]" for n, v in d["attrs"]]
    if tag and scoped:
        out.append(tag)
    return out


def _q(*args, **kwargs) -> str:
    return chains.Step(args[0], list(args[1:]), kwargs).text()


def field_candidates(f: chains.Field, d: dict) -> list[str]:
    out = [f.chain]
    if d["testid"]:
        out.append(_q("get_by_test_id", d["testid"]))
    if d["label"]:
        out.append(_q("get_by_label", d["label"], exact=True))
    role = d["role"] or ROLES.get(d["tag"] or "")
    if role and d["text"] and f.read in ("get_attribute", "input_value"):  # a link's constant text: its name
        out.append(_q("get_by_role", role, name=d["text"], exact=True))
    if role:
        out.append(_q("get_by_role", role))
    out += [_q("locator", s) for s in _css(d)]
    if d["tag"] and d["index"] is not None and d["index"] >= 0:
        out.append(_q("locator", d["tag"]) + (".first" if d["index"] == 0 else f".nth({d['index']})"))
    return list(dict.fromkeys(out))


def row_candidates(row: chains.Row, d: dict, ancestors: list[dict]) -> list[str]:
    out = [row.chain]
    if d["testid"]:
        out.append(_q("get_by_test_id", d["testid"]))
    role = d["role"] or ROLES.get(d["tag"] or "")
    if role:
        out.append(_q("get_by_role", role))
        for a in ancestors:
            if a["testid"]:
                out.append(_q("get_by_test_id", a["testid"]) + "." + _q("get_by_role", role))
            a_role = a["role"] or ROLES.get(a["tag"] or "")
            if a_role and a["label"]:
                out.append(_q("get_by_role", a_role, name=a["label"], exact=True) + "." + _q("get_by_role", role))
    own = _css(d, scoped=False)
    out += [_q("locator", s) for s in own]
    for a in ancestors:
        for s in own + ([d["tag"]] if d["tag"] else []):
            if a["id"]:
                out.append(_q("locator", f"#{a['id']} {s}"))
            out += [_q("locator", f"{a['tag']}.{k} {s}") for k in a["classes"]]
    return list(dict.fromkeys(out))


async def _marks(loc, attr: str) -> list | None:
    try:
        return await loc.evaluate_all(f"els => els.map(e => e.getAttribute({json.dumps(attr)}))")
    except Exception:
        return None


async def _fits_field(page, chain: str, name: str, rows) -> bool:
    """``chain`` finds, in each of the marked ``rows``, exactly the cell marked as that row's ``name``."""
    for i in rows:
        try:
            loc = chains.build(page.locator(f'[{ROW_MARK}="{i}"]'), chain)
        except Exception:
            return False
        got = await _marks(loc, CELL_MARK)
        if got is None:
            return False
        if got != [f"{i}:{name}"]:
            return False
    return True


async def _fits_rows(page, chain: str, found: int, fields: dict[str, str]) -> int:
    """2: ``chain`` finds exactly the marked rows; 1: those and others where every field's chain finds an element
    (rows of the same shape, new this week); 0: neither."""
    try:
        loc = chains.build(page, chain)
    except Exception:
        return 0
    got = await _marks(loc, ROW_MARK)
    if got is None or sorted(m for m in got if m is not None) != sorted(str(i) for i in range(found)):
        return 0
    extras = len(got) - found
    if not extras:
        return 2
    if extras > MAX_ROWS:
        return 0
    await loc.evaluate_all(f"els => els.forEach((e, j) => e.setAttribute({json.dumps(EXTRA_MARK)}, String(j)))")
    try:
        for j in range(len(got)):
            if got[j] is not None:
                continue
            for sub in fields.values():
                n = await _count(chains.build(page.locator(f'[{EXTRA_MARK}="{j}"]'), sub))
                if not n:
                    return 0
        return 1
    finally:
        await page.evaluate(f"() => document.querySelectorAll('[{EXTRA_MARK}]')"
                            f".forEach(e => e.removeAttribute('{EXTRA_MARK}'))")


async def propose(page, old: list[dict], row: chains.Row, min_share: float) -> dict:
    """Today's chains for ``row`` and its fields from last week's values ``old``: ``{"row", "fields", "found",
    "exact"}`` (a chain unchanged where the old one still finds the same elements), or ``{"error", "found"}``."""
    spec = [{"name": f.name, "read": f.read, "attribute": f.attribute} for f in row.fields]
    got = await page.evaluate(FIND_JS, {"rows": old, "fields": spec, "minShare": min_share,
                                        "marks": [ROW_MARK, CELL_MARK]})
    if "error" in got:
        return got
    found, new_fields, missing = got["found"], {}, []
    for f in row.fields:
        d = got["cells"].get(f.name)
        had = sum(r.get(f.name) not in (None, "") for r in old)
        if not had:
            new_fields[f.name] = f.chain
            continue
        if d is None or d["count"] < max(1, math.ceil(found * min_share)):
            missing.append(f.name)
            continue
        chosen = None
        for cand in field_candidates(f, d):
            if await (_fits_field(page, cand, f.name, range(found)) if d["count"] == found
                      else _fits_some(page, cand, f.name, found)):
                chosen = cand
                break
        if chosen is None:
            missing.append(f.name)
        else:
            new_fields[f.name] = chosen
    if missing:
        return {"error": f"no locator finds {', '.join(missing)} in every row found", "found": found}
    scored = []
    for cand in row_candidates(row, got["row"], got["ancestors"]):
        score = await _fits_rows(page, cand, found, new_fields)
        if score == 2:
            scored = [(cand, 2)]
            break
        if score == 1 and not scored:
            scored = [(cand, 1)]
    if not scored:
        return {"error": "no locator finds exactly the rows found", "found": found}
    return {"row": scored[0][0], "fields": new_fields, "found": found, "exact": scored[0][1] == 2}


async def _fits_some(page, chain: str, name: str, found: int) -> bool:
    """For a field some rows lack: ``chain`` finds its cell in the rows that have one and nothing in the others."""
    for i in range(found):
        try:
            got = await _marks(chains.build(page.locator(f'[{ROW_MARK}="{i}"]'), chain), CELL_MARK)
        except Exception:
            return False
        if got is None or got not in ([f"{i}:{name}"], []):
            return False
        if not got and await page.locator(f'[{ROW_MARK}="{i}"] [{CELL_MARK}="{i}:{name}"]').count():
            return False
    return True
