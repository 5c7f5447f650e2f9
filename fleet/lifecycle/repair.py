"""What ``fleet doctor`` does in a browser, offline: open the pages of a HAR (Playwright's ``route_from_har``, every
other request aborted), count each locator's matches on them, read last week's raw values through the old row
locators, and on today's page find the elements that hold those values and the simplest CSS selectors that select
exactly them. Deterministic: the same two pages give the same proposal."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

# Last week's values as the page showed them (before the scraper's own parsing), one dict per row element.
OLD_VALUES_JS = """(rows, fields) => rows.map(r => Object.fromEntries(fields.map(([f, sub]) => {
  const el = r.querySelector(sub);
  return [f, el ? el.textContent.replace(/\\s+/g, ' ').trim() : null];
})))"""

# The rows both doctors look for (fleet/lifecycle/relocate.py for locator chains): on today's page, each of last
# week's values found as one element (text: the deepest element showing it; an attribute's or an input's value: the
# element holding it); a row is the lowest common ancestor of its unambiguous values (the one value's parent when
# the row has one field); a row element holds one row, and the rows found share the commonest tag. ``findRows``
# returns {found: [{row, cells}], tag} or, with fewer than ``minShare`` of the rows found, {error, found}.
ROWS_JS = """
  const norm = s => String(s ?? '').replace(/\\s+/g, ' ').trim();
  const findRows = (rows, fields, minShare) => {
    const skip = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD']);
    const all = Array.from(document.body.querySelectorAll('*')).filter(e => !skip.has(e.tagName));
    // a value as the page shows it; a number (a stored row's, already parsed) as the number its text holds
    const index = new Map(), numbers = new Map();
    const add = (map, k, el) => { if (!map.has(k)) map.set(k, []); map.get(k).push(el); };
    for (const el of all) {
      const t = norm(el.textContent);
      if (!t || t.length > 300 || Array.from(el.children).some(c => norm(c.textContent) === t)) continue;
      add(index, t, el);
      const n = t.length < 40 && /\\d/.test(t) ? Number(t.replace(/[^0-9.\\-]/g, '')) : NaN;
      if (Number.isFinite(n)) add(numbers, String(n), el);
    }
    const lookup = (f, v) => {
      if (v === null || v === undefined || norm(v) === '') return [];
      if (f.read === 'get_attribute') return all.filter(e => e.getAttribute(f.attribute) === String(v));
      if (f.read === 'input_value')
        return all.filter(e => 'value' in e && ['INPUT', 'TEXTAREA', 'SELECT'].includes(e.tagName) && e.value === String(v));
      return typeof v === 'number' ? (numbers.get(String(v)) || []) : (index.get(norm(v)) || []);
    };
    const lca = els => { let a = els[0]; while (a && !els.every(e => a.contains(e))) a = a.parentElement; return a; };
    let found = [];
    for (const r of rows) {
      const unique = {}, several = {};
      for (const f of fields) {
        const c = lookup(f, r[f.name]);
        if (c.length === 1) unique[f.name] = c[0]; else if (c.length > 1) several[f.name] = c;
      }
      const n = Object.keys(unique).length;
      if (n < Math.min(2, fields.length)) continue;
      const row = n === 1 ? Object.values(unique)[0].parentElement : lca(Object.values(unique));
      if (!row || row === document.body || row === document.documentElement) continue;
      const cells = {...unique};
      for (const [f, c] of Object.entries(several)) {
        const inside = c.filter(e => row.contains(e));
        if (inside.length === 1) cells[f] = inside[0];
      }
      found.push({row, cells});
    }
    // a row element holds one row: drop those that hold another's, or that another row also landed on
    found = found.filter(a => !found.some(b => b !== a && a.row.contains(b.row)));
    const tags = {};
    for (const a of found) tags[a.row.tagName] = (tags[a.row.tagName] || 0) + 1;
    const tag = Object.keys(tags).sort((x, y) => tags[y] - tags[x] || (x < y ? -1 : 1))[0];
    found = found.filter(a => a.row.tagName === tag);
    const need = Math.max(1, Math.ceil(rows.length * minShare));
    if (found.length < need)
      return {error: `${found.length} of ${rows.length} of last week's rows found on today's page (${need} needed)`,
              found: found.length};
    return {found, tag};
  };
"""

# On today's page: last week's rows (ROWS_JS); then, for the rows found, the simplest selector of each field
# relative to its row, and of the rows themselves, that select exactly those elements.
PROPOSE_JS = """({rows, fields, minShare, oldRow, oldFields}) => {""" + ROWS_JS + """
  const got = findRows(rows, fields.map(name => ({name})), minShare);
  if (got.error) return got;
  const {found, tag} = got;
  const esc = CSS.escape, q = v => JSON.stringify(v);
  const common = els => els.map(e => Array.from(e.classList)).reduce((a, b) => a.filter(x => b.includes(x)));
  const attrs = els => Array.from(els[0].attributes).filter(a => !['id', 'class', 'style'].includes(a.name)
      && !a.value.includes("'") && els.every(e => e.getAttribute(a.name) === a.value)).map(a => [a.name, a.value]);
  const sameTag = els => els.every(e => e.tagName === els[0].tagName) ? els[0].tagName.toLowerCase() : null;
  const nth = e => Array.from(e.parentElement.children).filter(c => c.tagName === e.tagName).indexOf(e) + 1;
  const cands = els => {
    const t = sameTag(els), out = [];
    for (const k of common(els)) { out.push('.' + esc(k)); if (t) out.push(t + '.' + esc(k)); }
    for (const [n, v] of attrs(els)) out.push(`${t || ''}[${n}=${q(v)}]`);
    if (t && els.every(e => nth(e) === nth(els[0]))) out.push(`${t}:nth-of-type(${nth(els[0])})`);
    if (t) out.push(t);
    return out;
  };
  const fieldSel = {}, missing = [];
  for (const f of fields) {
    const pairs = found.filter(a => a.cells[f]);
    const had = rows.filter(r => norm(r[f])).length;
    if (!had) continue;
    if (pairs.length < Math.max(1, Math.ceil(found.length * minShare))) { missing.push(f); continue; }
    const ok = s => { try { return pairs.every(a => a.row.querySelector(s) === a.cells[f]); } catch (e) { return false; } };
    const sel = [oldFields[f], ...cands(pairs.map(a => a.cells[f]))].find(ok);
    if (sel) fieldSel[f] = sel; else missing.push(f);
  }
  if (missing.length) return {error: `no selector finds ${missing.join(', ')} in every row found`, found: found.length};
  const R = found.map(a => a.row), inR = new Set(R);
  const rowCands = [oldRow];
  const t = tag.toLowerCase();
  const base = cands(R).filter(s => s.startsWith(t));
  rowCands.push(...base);
  for (let anc = R[0].parentElement; anc && anc !== document.body; anc = anc.parentElement) {
    const holds = R.every(r => anc.contains(r));
    if (anc.id && holds) for (const b of [...base, t]) rowCands.push(`#${esc(anc.id)} ${b}`);
    if (holds) for (const k of anc.classList) for (const b of [...base, t]) rowCands.push(`${anc.tagName.toLowerCase()}.${esc(k)} ${b}`);
  }
  const path = [];
  for (let e = R[0]; e && e !== document.body; e = e.parentElement) path.unshift(e.tagName.toLowerCase());
  rowCands.push('body > ' + path.join(' > '));
  const fits = s => {
    let m;
    try { m = Array.from(document.querySelectorAll(s)); } catch (e) { return 0; }
    if (!R.every(r => m.includes(r))) return 0;
    if (!m.every(e => inR.has(e) || Object.values(fieldSel).every(fs => e.querySelector(fs)))) return 0;
    return m.length === R.length ? 2 : 1;
  };
  const scored = rowCands.map(s => [s, fits(s)]).filter(([, v]) => v);
  const best = scored.find(([, v]) => v === 2) || scored[0];
  if (!best) return {error: 'no CSS selector selects exactly the rows found', found: found.length};
  return {row: best[0], fields: fieldSel, found: found.length, exact: best[1] === 2};
}"""


def documents(har: Path) -> list[str]:
    """The URLs of the documents a HAR holds (the pages a scraper opened), in the order they were fetched."""
    with zipfile.ZipFile(har) as z:
        entries = json.loads(z.read("har.har"))["log"]["entries"]
    urls = [e["request"]["url"] for e in entries if e.get("_resourceType") == "document"
            and e["request"]["method"] == "GET" and 200 <= e["response"]["status"] < 300]
    return list(dict.fromkeys(urls))


def page_id(url: str) -> str:
    """A page's path and query, without the host: last week's page and today's are the same page on another port."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


async def open_har_page(browser, har: Path, url: str):
    """A page of ``browser`` showing ``url`` as ``har`` recorded it: offline, a request it lacks is aborted."""
    context = await browser.new_context(service_workers="block")
    await context.route_from_har(str(har), not_found="abort")
    page = await context.new_page()
    await page.goto(url, wait_until="load", timeout=15_000)
    try:
        await page.wait_for_load_state("networkidle", timeout=5_000)  # rows built by JavaScript after load
    except Exception:
        pass
    return context, page


async def count(page, selector: str) -> int | None:
    """How many elements ``selector`` matches on ``page``; None when it is no valid selector."""
    try:
        return await page.locator(selector).count()
    except Exception:
        return None


async def old_values(page, row_selector: str, fields: dict[str, str]) -> list[dict]:
    return await page.locator(row_selector).evaluate_all(OLD_VALUES_JS, list(fields.items()))


async def propose(page, rows: list[dict], old_row: str, old_fields: dict[str, str], min_share: float) -> dict:
    """Today's selectors for the row locator ``old_row`` and its fields, from last week's values ``rows``: the old
    ones where they still select the same elements; ``{"error": ...}`` when the values are not found."""
    return await page.evaluate(PROPOSE_JS, {"rows": rows, "fields": list(old_fields), "minShare": min_share,
                                            "oldRow": old_row, "oldFields": old_fields})
