"""`fleet smoke --changed-since REF`: the sources a git diff touches (their module, a shared module they import,
followed through imports, their fixture; fleet's own scraping code or pinned versions touch all), each run once,
live, through the weekly runner into a scratch store: nothing is committed or kept but a quarantine lift."""
from __future__ import annotations

import ast
import subprocess
import tempfile
from pathlib import Path

import fleet
from fleet.errors import FleetError
from fleet.lifecycle import quarantine
from fleet.lifecycle.replay import Checked, attempt
from fleet.scraping.discovery import Source
from fleet.storage.store import ArtifactStore
from fleet.weeks import last_complete_week

FLEET_DIR = Path(fleet.__file__).resolve().parent
# fleet's own code a scrape runs through, and its public API (fleet/__init__.py, whose names are imported lazily,
# so no import of theirs can be followed: site_url lives in fleet/demo): a change to it can break any source
SCRAPING_CODE = [FLEET_DIR / "scraping", FLEET_DIR / "engine", FLEET_DIR / "__init__.py", FLEET_DIR / "errors.py", FLEET_DIR / "config.py",
                 FLEET_DIR / "storage" / "frames.py", FLEET_DIR / "weeks.py", FLEET_DIR / "demo"]
# the versions fleet and the scrapers run with
PIN_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "poetry.lock", "uv.lock", "Pipfile.lock")
PIN_PREFIXES = ("requirements", "constraints")


def _git(cwd: Path, *args: str) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode:
        raise FleetError(f"git {' '.join(args)} in {cwd}: {(res.stderr.strip().splitlines() or ['failed'])[-1]}")
    return res.stdout


def changed_files(ref: str, cwd: Path) -> tuple[Path, list[Path]]:
    """The repository holding ``cwd`` and the files changed since its merge base with ``ref`` (committed, staged,
    in the work tree, or new and untracked), as absolute paths."""
    top = Path(_git(cwd, "rev-parse", "--show-toplevel").strip())
    check = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=top,
                           capture_output=True, text=True)
    if check.returncode:
        raise FleetError(f"--changed-since {ref!r}: no such commit in {top}")
    base = _git(top, "merge-base", ref, "HEAD").strip()
    names = _git(top, "diff", "--name-only", base).splitlines()
    names += _git(top, "ls-files", "--others", "--exclude-standard").splitlines()
    return top, sorted({(top / n).resolve() for n in names if n.strip()})


def _module_file(name: str, level: int, here: Path, roots: list[Path]) -> list[Path]:
    """Files of the scrapers' folders ``roots`` an import in ``here`` may load: relative ones from ``here``'s
    folder, absolute ones from each root. Found by name on disk, never through the import system, which would run
    the packages' code and look in site-packages (a checkout's .venv made that thousands of files)."""
    parts = name.split(".") if name else []
    if level:
        if level > len(here.parents):
            return []
        targets = [here.parents[level - 1].joinpath(*parts)]
    else:  # a package's __init__ runs too
        targets = [root.joinpath(*parts[:i]) for root in roots for i in range(1, len(parts) + 1)]
    files = [t / "__init__.py" for t in targets] + [t.with_suffix(".py") for t in targets if parts]
    return [f for f in files if f.is_file() and _inside(f.resolve(), roots)]


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(r == path or r in path.parents for r in roots) and not {"site-packages", "dist-packages"} & set(path.parts)


def imported_files(module: Path, roots: list[Path]) -> set[Path]:
    """``module`` and every file in the scrapers' folders ``roots`` it imports, followed through their imports."""
    roots = [r.resolve() for r in roots]
    seen: set[Path] = set()
    todo = [module.resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_text(), str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = [f for a in node.names for f in _module_file(a.name, 0, path, roots)]
            elif isinstance(node, ast.ImportFrom):
                found = _module_file(node.module or "", node.level, path, roots)
                # `from . import helpers` / `from pkg import sub`: the names may be modules themselves
                for a in node.names:
                    found += _module_file(f"{node.module}.{a.name}" if node.module else a.name, node.level, path, roots)
            else:
                continue
            todo += [f.resolve() for f in found]
    return seen


def _touches_all(path: Path, top: Path) -> bool:
    if any(path == p or p in path.parents for p in SCRAPING_CODE):
        return True
    return path.parent == top and (path.name in PIN_FILES or path.name.startswith(PIN_PREFIXES))


def affected(sources: list[Source], ref: str, cwd: Path, roots: list[Path]) -> dict[str, str]:
    """Each source the changes since ``ref`` touch, with why; imports are followed inside ``roots``, the scrapers'
    folders."""
    top, changed = changed_files(ref, cwd)
    if not changed:
        return {}
    everything = next((p for p in changed if _touches_all(p, top)), None)
    out = {}
    for src in sources:
        if everything is not None:
            out[src.name] = f"{everything.relative_to(top) if top in everything.parents else everything} affects every source"
            continue
        fixtures = src.module_path.resolve().parent / "fixtures"
        own = [p for p in changed if p.parent == fixtures and p.name.startswith(f"{src.name}.")]
        if src.module_path.resolve() in changed:
            out[src.name] = "its module changed"
        elif own:
            out[src.name] = f"its fixture {own[0].name} changed"
        else:
            via = sorted(imported_files(src.module_path, roots) & set(changed))
            if via:
                out[src.name] = f"imports {via[0].relative_to(top)}, which changed"
    return out


def run(sources: list[Source], scratch: Path, lift_store: ArtifactStore | None = None) -> list[Checked]:
    """Each of ``sources`` once, live, end to end (the weekly run's attempt, in a browser process of its own),
    its rows in a scratch store under ``scratch``; a pass lifts its quarantine in ``lift_store``."""
    week = last_complete_week().isoformat()
    out = []
    for src in sources:
        (scratch / src.name).mkdir()
        got = attempt(src, week, scratch / src.name)
        ok = got["status"] == "ok"
        detail = "" if ok else (got["error"] or f"{got['status']}: no rows").strip().splitlines()[0][:200]
        if ok and lift_store is not None and quarantine.state(lift_store, src.name, src.quarantine_after):
            quarantine.lift(lift_store, src.name, by="fleet smoke")
            detail = "passed live: quarantine lifted"
        out.append(Checked(src.name, "pass" if ok else "fail", got["rows"], got["seconds"], detail))
    return out


def smoke(sources: list[Source], ref: str, roots: list[Path], lift_store: ArtifactStore, echo) -> list[Checked] | None:
    """The affected sources' results, or None when the diff touches none (then nothing ran); ``roots`` are the
    scrapers' folders (the first one's repository is diffed)."""
    hit = affected(sources, ref, roots[0], roots)
    if not hit:
        echo(f"fleet: no source is affected by the changes since {ref}; nothing was run")
        return None
    for name, why in hit.items():
        echo(f"fleet: smoke {name}: {why}")
    with tempfile.TemporaryDirectory(prefix="fleet-smoke-") as tmp:
        Path(tmp).chmod(0o711)  # fleet's own folder: the sandbox's user reaches each source's scratch in it
        return run([s for s in sources if s.name in hit], Path(tmp), lift_store)
