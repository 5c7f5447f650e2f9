"""The demo sites' data: deterministic per week (item names and keys stable, prices and ratings moving), and what
each site mode shows of it."""
from __future__ import annotations

import datetime as dt
import hashlib
import random

from fleet.demo import changes, walls

SITES = ("books", "catalog", "stocks", "jobs", "parts", "shops")
MODES = ("normal", "selector_rot", "volume_collapse", "empty", *walls.WALL_MODES, *changes.CHANGE_MODES, *changes.CATALOG_MODES)
# The column whose CSS class changes under ``selector_rot``, per site.
ROT_COLUMN = {"books": "price", "catalog": "price", "stocks": "close", "jobs": "salary", "parts": "price", "shops": "city"}
EPOCH = dt.date(2026, 1, 5)
CATALOG_PAGE_SIZE = 8
JOBS_BATCH = 10
PART_KINDS = ("bolt", "nut", "washer", "screw", "rivet")
FLAKY_FAILURES = 2


def _rng(*parts) -> random.Random:
    seed = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()
    return random.Random(int(seed[:16], 16))


def week_index(week: dt.date) -> int:
    return (week - EPOCH).days // 7


def _shift(site: str, item, week: dt.date, base: float, spread: float = 0.1) -> float:
    """``base`` moved by up to +-``spread`` (fraction), differently each week."""
    return base * (1 + _rng(site, item, week.isoformat()).uniform(-spread, spread))


_ADJ = ("Silent", "Crimson", "Hidden", "Last", "Golden", "Broken", "Northern", "Quiet", "Lost", "Iron", "Paper", "Glass")
_NOUN = ("River", "Garden", "Empire", "Letter", "Harbor", "Machine", "Orchard", "Winter", "Signal", "Atlas", "Bridge", "Lantern")
_CITIES = ("Lyon", "Porto", "Ghent", "Tartu", "Basel", "Turin", "Graz", "Malmo", "Cork", "Brno")


def books_rows(week: dt.date) -> list[dict]:
    rows = []
    for i in range(24):
        r = _rng("books", i)
        isbn = "978" + "".join(str(r.randrange(10)) for _ in range(10))
        title = f"The {_ADJ[i % 12]} {_NOUN[(i * 5) % 12]}"
        rows.append({"isbn": isbn, "title": title, "price": round(_shift("books", i, week, r.uniform(6, 40)), 2)})
    return rows


def catalog_rows(week: dt.date) -> list[dict]:
    cats = ("kitchen", "garden", "office", "toys")
    rows = []
    for i in range(40):
        r = _rng("catalog", i)
        rows.append({"sku": f"SKU-{1000 + i}", "name": f"{_ADJ[(i * 7) % 12]} {_NOUN[i % 12].lower()} set",
                     "category": cats[i % 4], "price": round(_shift("catalog", i, week, r.uniform(3, 120)), 2)})
    return rows


def stocks_rows(week: dt.date) -> list[dict]:
    rows = []
    for i in range(20):
        r = _rng("stocks", i)
        symbol = "".join(chr(65 + r.randrange(26)) for _ in range(3)) + str(i % 10)
        base = r.uniform(10, 500)
        close = round(_shift("stocks", i, week, base, 0.2), 2)
        prev = round(_shift("stocks", i, week - dt.timedelta(days=7), base, 0.2), 2)
        rows.append({"symbol": symbol, "company": f"{_NOUN[i % 12]} {_ADJ[(i * 3) % 12]} Corp",
                     "close": close, "change_pct": round((close - prev) / prev * 100, 2)})
    return rows


def jobs_rows(week: dt.date) -> list[dict]:
    titles = ("Data engineer", "Line cook", "Nurse", "Electrician", "Teacher", "Welder", "Accountant")
    rows = []
    for i in range(35):
        r = _rng("jobs", i)
        rows.append({"job_id": 5000 + i, "title": titles[i % 7], "city": _CITIES[(i * 3) % 10],
                     "salary": int(round(_shift("jobs", i, week, r.uniform(28_000, 90_000), 0.05), -2))})
    return rows


def parts_rows(week: dt.date) -> list[dict]:
    """The whole parts inventory (30 parts, 6 per kind); the site only shows it through search."""
    rows = []
    for i in range(30):
        kind = PART_KINDS[i % 5]
        r = _rng("parts", i)
        size = f"M{(i // 5) * 2 + 3}"
        rows.append({"part_no": f"P-{i:04d}", "name": f"{size} {kind} ({('zinc', 'steel', 'brass')[i % 3]})",
                     "price": round(_shift("parts", i, week, r.uniform(0.05, 3)), 3),
                     "in_stock": (week_index(week) + i) % 4 != 0})
    return rows


def parts_search(week: dt.date, q: str) -> list[dict]:
    q = q.strip().lower()
    return [row for row in parts_rows(week) if q and q in row["name"].lower()]


def shops_rows(week: dt.date) -> list[dict]:
    """Shops with their detail-page field ``rating``."""
    rows = []
    for i in range(15):
        r = _rng("shops", i)
        rows.append({"shop_id": f"s{i:03d}", "name": f"{_ADJ[(i * 5) % 12]} {_NOUN[(i * 7) % 12]} Shop",
                     "city": _CITIES[i % 10], "visitors": int(_shift("shops", i, week, r.uniform(200, 5000), 0.3)),
                     "rating": round(min(5.0, _shift("shops-rating", i, week, r.uniform(2.5, 4.8), 0.05)), 1)})
    return rows


def flaky_rows(week: dt.date) -> list[dict]:
    return [{"code": f"F{i}", "value": round(_shift("flaky", i, week, 10 + i), 2)} for i in range(5)]


def apply_volume(rows: list, mode: str) -> list:
    """What a site shows of ``rows`` in ``mode``: all, 5% (at least one), or nothing."""
    if mode == "empty":
        return []
    if mode == "volume_collapse":
        return rows[: max(1, round(len(rows) * 0.05))]
    return rows


def rot_class(col: str, i: int, site: str, mode: str) -> str:
    """The CSS class of a cell; under ``selector_rot`` the site's rot column is renamed for 9 rows in 10."""
    if mode == "selector_rot" and ROT_COLUMN.get(site) == col and i % 10 != 0:
        return col + "-v2"
    return col
