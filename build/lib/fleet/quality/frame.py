"""The page template's frame around the regions a scraper reads (its landmarks, its headings, each region's chain of
ancestors), as structure: tags, landmark roles and heading levels, the data left out. Taken and compared week over
week by fleet/quality/structure.py.

A redesign usually moves the frame first: a header, a navigation, a footer, a new heading, the rows' table moved
into a section, while the scraper still gets its rows. Text, counts, dates, an ad or a rotating banner change words
and numbers, not which landmarks there are, at which heading levels, or where the rows' region sits. So the frame is
compared as three sets, all count-free (a page with 8 cards or 80 has the same frame):
  landmarks  each landmark's path of landmark roles (``banner > navigation``), outside the regions
  headings   each heading's landmark path and level (``main > region > h2``), outside the regions (a row's own
             heading is the region's structure); its text is kept only to name it in the message
  chains     per locator, the tags (and landmark roles) from ``body`` down to its region (``main > region/section > ul``)
"""
from __future__ import annotations

import re

# For each selector, in one call: its region (the CSS path of its first match's container, see structure.py) and
# that region's chain; and the page's landmarks and headings outside every region. ARIA's own rules for the implicit
# roles: a header or footer inside a sectioning element is no banner or contentinfo, a section or a form is a
# landmark only when it is named. Hidden elements count: a carousel's hidden slides are the same every week.
FRAME_JS = """selectors => {
  const containers = new Set(['TABLE', 'UL', 'OL', 'DL', 'FORM', 'MAIN', 'SECTION', 'NAV', 'ARTICLE']);
  const LANDMARKS = new Set(['banner', 'navigation', 'main', 'complementary', 'contentinfo', 'region', 'form', 'search']);
  const implicit = {MAIN: 'main', NAV: 'navigation', ASIDE: 'complementary', SEARCH: 'search'};
  const named = e => !!(e.getAttribute('aria-label') || e.getAttribute('aria-labelledby') || e.getAttribute('title'));
  const role = e => {
    const explicit = (e.getAttribute('role') || '').trim().split(/\\s+/)[0];
    if (explicit) return LANDMARKS.has(explicit) ? explicit : null;
    const t = e.tagName;
    if (t === 'HEADER' || t === 'FOOTER') {
      const inner = e.parentElement && e.parentElement.closest('article, aside, main, nav, section');
      return inner ? null : (t === 'HEADER' ? 'banner' : 'contentinfo');
    }
    if (t === 'SECTION') return named(e) ? 'region' : null;
    if (t === 'FORM') return named(e) ? 'form' : null;
    return implicit[t] || null;
  };
  const level = e => {
    const m = /^H([1-6])$/.exec(e.tagName);
    if ((e.getAttribute('role') || '') === 'heading') return parseInt(e.getAttribute('aria-level') || '2', 10);
    return m ? parseInt(m[1], 10) : null;
  };
  const landmarkPath = e => {
    const parts = [];
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
      const r = role(a);
      if (r) parts.unshift(r);
    }
    return parts;
  };
  const cssPath = el => {
    const parts = [];
    for (let e = el; e && e.parentElement; e = e.parentElement) {
      const same = Array.from(e.parentElement.children).filter(c => c.tagName === e.tagName);
      parts.unshift(`${e.tagName.toLowerCase()}:nth-of-type(${same.indexOf(e) + 1})`);
    }
    return 'html > ' + parts.join(' > ');
  };
  const tagOf = e => {
    const t = e.tagName.toLowerCase(), r = role(e);
    return r && r !== t ? `${r}/${t}` : t;
  };
  const chainOf = el => {
    const parts = [];
    for (let e = el; e && e !== document.body && e !== document.documentElement; e = e.parentElement) parts.unshift(tagOf(e));
    return parts.join(' > ');
  };
  const regions = selectors.map(sel => {
    let el;
    try { el = document.querySelector(sel); } catch (e) { return null; }
    if (!el) return null;
    let region = el;
    while (region.parentElement && !containers.has(region.tagName)) region = region.parentElement;
    if (!containers.has(region.tagName)) region = el;
    return {el: region, css: cssPath(region), chain: chainOf(region)};
  });
  const inside = e => regions.some(r => r && r.el.contains(e));
  const text = e => (e.getAttribute('aria-label') || e.textContent || '').replace(/\\s+/g, ' ').trim().slice(0, 80);
  const landmarks = [], headings = [];
  const all = document.body ? document.body.querySelectorAll(
    'header, footer, nav, main, aside, section, form, search, [role], h1, h2, h3, h4, h5, h6') : [];
  for (const e of all) {
    if (landmarks.length + headings.length >= 400 || inside(e)) continue;
    const path = landmarkPath(e), r = role(e), h = level(e);
    if (h) headings.push([[...path, `h${h}`].join(' > '), text(e)]);
    else if (r) landmarks.push([[...path, r].join(' > '), e.getAttribute('aria-label') || '']);
  }
  return {regions: regions.map(r => r && [r.css, r.chain]), landmarks, headings};
}"""
FRAME_WARN = 3      # landmarks and headings new or gone from which the frame warns; a region moved warns on its own
SHOWN = 6           # items named per kind in the message
_DATA = re.compile(r"\d(?:[\d.,:/'-]*\d)?")  # a number or a date, not the comma after it


def mask(text: str) -> str:
    """Text as a label, its numbers and dates left out (``Catalog, page 3`` -> ``Catalog, page #``)."""
    return re.sub(r"\s+", " ", _DATA.sub("#", text or "")).strip()[:60]


def take(found: dict, selectors: list[str]) -> tuple[dict, dict]:
    """From FRAME_JS's answer: each found selector's region (CSS path) and the page's frame."""
    where = {sel: hit[0] for sel, hit in zip(selectors, found["regions"]) if hit is not None}
    frame = {"chains": {sel: hit[1] for sel, hit in zip(selectors, found["regions"]) if hit is not None},
             "landmarks": {}, "headings": {}}
    for kind in ("landmarks", "headings"):
        for path, label in found[kind]:
            frame[kind].setdefault(path, mask(label))
    return where, frame


def _listed(items: list[str]) -> str:
    return ", ".join(items[:SHOWN]) + (" ..." if len(items) > SHOWN else "")


def _named(path: str, name: str) -> str:
    return f'{path} "{name}"' if name else path


def compare(before: dict, now: dict) -> tuple[int, list[str]]:
    """What moved in the frame of one page between two weeks: a count (a region moved counts ``FRAME_WARN``, so it
    warns on its own) and its description, one item per kind."""
    moved: dict[tuple[str, str], list[str]] = {}
    b_chains, n_chains = before.get("chains", {}), now.get("chains", {})
    for sel in sorted(set(b_chains) & set(n_chains)):
        if b_chains[sel] != n_chains[sel]:
            moved.setdefault((b_chains[sel], n_chains[sel]), []).append(f"`{sel}`")
    count, said = FRAME_WARN * len(moved), []
    for kind in ("landmarks", "headings"):
        b, n = before.get(kind, {}), now.get(kind, {})
        new, gone = sorted(set(n) - set(b)), sorted(set(b) - set(n))
        count += len(new) + len(gone)
        if kind == "landmarks":
            said += [f"new landmarks {_listed([_named(p, n[p]) for p in new])}"] if new else []
            said += [f"gone landmarks {_listed([_named(p, b[p]) for p in gone])}"] if gone else []
            said += [f"the region of {' and '.join(sels)} now at {is_ or '(the body)'} (was {was or '(the body)'})"
                     for (was, is_), sels in sorted(moved.items())]
        else:
            said += [f"heading '{n[p]}' new ({p})" if n[p] else f"new heading {p}" for p in new[:SHOWN]]
            said += [f"heading '{b[p]}' gone ({p})" if b[p] else f"gone heading {p}" for p in gone[:SHOWN]]
    return count, said
