"""Find scraper modules and their ``Scraper`` subclasses. A broken module becomes a broken source, never a crash."""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import itertools
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Mapping

from fleet.errors import ScraperDefinitionError
from fleet.scraping.contract import NAME_MAX, Scraper


@dataclasses.dataclass(frozen=True)
class Source:
    """One source as the pipeline sees it: where its class lives, and what is wrong with it if it is broken."""

    name: str
    module_path: Path
    class_name: str | None
    description: str
    schema: Mapping[str, Any] | None
    key: tuple[str, ...]
    timeout_s: float
    error: str | None = None  # set for a broken module or class: the source fails with it when run
    own_browser: bool = False
    own_process: bool = False
    quarantine_after: int = 3
    carry_forward: bool = False
    carry_forward_weeks: int = 2
    obey_robots: bool = True
    obey_robots_reason: str = ""
    owner: str | None = None  # an email or team:NAME: the asset's owner, and where its alerts go
    volume_warn_ratio: float = 0.5
    volume_error_ratio: float = 0.1
    where: str | None = None  # of a broken source: FILE:LINE of what is wrong (FILE alone when no line is known)
    optional: tuple[str, ...] = ()  # columns that may be null in any share of rows (fleet/quality/baseline.py)

    @property
    def broken(self) -> bool:
        return self.error is not None


def module_name_for(path: Path) -> str:
    digest = hashlib.sha1(str(path.resolve().parent).encode()).hexdigest()[:10]
    return f"fleet_scrapers_{digest}.{path.stem}"


def load_module(path: Path):
    """Import a scraper module from its file, once per process, under a name unique to its directory."""
    name = module_name_for(path)
    if name in sys.modules:
        return sys.modules[name]
    pkg = name.split(".")[0]
    if pkg not in sys.modules:
        import types
        pkg_mod = types.ModuleType(pkg)
        pkg_mod.__path__ = [str(path.parent)]
        sys.modules[pkg] = pkg_mod
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def slug_for_module(path: Path) -> str:
    return _slug(path.stem)


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9_]", "_", text.lower())
    if not s or not s[0].isalpha():
        s = "m_" + s
    return s


@dataclasses.dataclass
class _Placeholder:
    """A broken module or class, before it has a name: it fails as a source when run, with its own error."""

    path: Path
    error: str
    class_name: str | None = None  # None: the whole module is broken
    where: str | None = None

    def sort_key(self) -> tuple[str, str]:
        return str(self.path), self.class_name or ""

    def names(self):
        """Names to try, best first: the module's (as README promises), then with the class, then with a digest;
        each cut to a source name's length (``NAME_MAX``), the base before its suffix."""
        module = base = slug_for_module(self.path)
        yield base[:NAME_MAX]
        if self.class_name:
            base = f"{module}_{_slug(self.class_name)}"
            if len(module) < NAME_MAX:  # else it is cut back to the module's name
                yield base[:NAME_MAX]
        digest = hashlib.sha1(f"{self.path.resolve()}:{self.class_name or ''}".encode()).hexdigest()
        for n in range(6, len(digest) + 1):
            yield f"{base[:NAME_MAX - n - 1]}_{digest[:n]}"
        for n in itertools.count(2):
            suffix = f"_{digest[:16]}_{n}"
            yield f"{base[:NAME_MAX - len(suffix)]}{suffix}"

    def source(self, name: str) -> Source:
        return Source(name=name, module_path=self.path, class_name=None,
                      description=f"Broken scraper module {self.path.name}: {self.error.splitlines()[-1]}",
                      schema=None, key=(), timeout_s=60, error=self.error, where=self.where or str(self.path))


def _import_site(path: Path, exc: BaseException) -> str | None:
    """FILE:LINE where importing ``path`` failed: a syntax error's own place, else the last line run in the
    scrapers' folder (the module, or a helper of its that raised)."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{exc.filename}:{exc.lineno}"
    folder, site = path.parent.resolve(), None
    for frame in traceback.extract_tb(exc.__traceback__):
        where = Path(frame.filename)  # "<frozen importlib._bootstrap>" is no file, wherever the cwd is
        if frame.lineno and where.is_absolute() and folder in where.resolve().parents:
            site = f"{frame.filename}:{frame.lineno}"
    return site


def _class_site(path: Path, class_name: str | None) -> str | None:
    """FILE:LINE of the top-level class ``class_name`` in ``path``, read with ast (nothing is run)."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    line = next((n.lineno for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    return f"{path}:{line}" if line else None


def _own_classes(module) -> list[tuple[str, type]]:
    """The ``Scraper`` subclasses defined in ``module`` itself (not imported into it), each once, with the
    attribute it is found under (its own ``__name__`` when that attribute holds it)."""
    found: dict[int, tuple[str, type]] = {}
    for attr, obj in sorted(vars(module).items()):  # vars(): a module's own __getattr__/__dir__ play no part
        if (isinstance(obj, type) and obj is not Scraper and issubclass(obj, Scraper)
                and obj.__module__ == module.__name__):
            if id(obj) not in found or attr == obj.__name__:
                found[id(obj)] = (attr, obj)
    return sorted(found.values(), key=lambda item: item[0])


def _is_base(cls: type) -> bool:
    """A base class, not a source: marked ``abstract = True`` in its own body, or without a ``name`` of its own."""
    own = vars(cls)
    if "abstract" in own and not isinstance(own["abstract"], bool):
        raise ScraperDefinitionError(f"scraper class {cls.__name__}: abstract must be True or False, "
                                     f"got {own['abstract']!r}")
    return own.get("abstract", False) or "name" not in own


def _scan(path: Path, module, sources: list[Source], broken: list[_Placeholder]) -> None:
    """Add the sources of one imported module, or what is wrong with them."""
    try:
        classes = _own_classes(module)
    except Exception as exc:  # a hostile metaclass: the module is broken, discovery goes on
        broken.append(_Placeholder(path, f"scraper module {path.name}: {type(exc).__name__}: {exc}"))
        return
    bases, candidates = [], 0
    for attr, cls in classes:
        try:
            if _is_base(cls):
                bases.append(cls)
                continue
            candidates += 1
            cls.validate_class()
            src = Source(name=cls.name, module_path=path, class_name=attr, description=cls.description(),
                         schema=dict(cls.schema), key=tuple(cls.key), timeout_s=float(cls.timeout_s),
                         own_browser=cls.own_browser, own_process=cls.own_process,
                         quarantine_after=cls.quarantine_after, carry_forward=cls.carry_forward,
                         carry_forward_weeks=cls.carry_forward_weeks, obey_robots=cls.obey_robots,
                         obey_robots_reason=cls.obey_robots_reason, owner=cls.owner,
                         volume_warn_ratio=float(cls.volume_warn_ratio),
                         volume_error_ratio=float(cls.volume_error_ratio), optional=tuple(cls.optional))
        except ScraperDefinitionError as exc:
            broken.append(_Placeholder(path, f"scraper module {path.name}: {exc}", attr, _class_site(path, cls.__name__)))
        except Exception as exc:  # anything a class can raise when its attributes are read
            broken.append(_Placeholder(path, f"scraper module {path.name}: scraper class {attr}: "
                                             f"{type(exc).__name__}: {exc}", attr, _class_site(path, cls.__name__)))
        else:
            sources.append(src)
    unnamed = [cls.__name__ for cls in bases if not vars(cls).get("abstract", False)]
    if not candidates and unnamed:
        # Scraper classes and no source: a forgotten name, not a module of base classes.
        broken.append(_Placeholder(path, (
            f"scraper module {path.name} defines no source: {', '.join(unnamed)} "
            f"{'sets' if len(unnamed) == 1 else 'set'} no name of its own. A source's name must be a slug "
            f"matching [a-z][a-z0-9_]*, set in its class; mark a base class with abstract = True"),
            where=_class_site(path, unnamed[0])))


def discover(dirs: list[Path]) -> list[Source]:
    """Every source in ``dirs`` (non-recursive), sorted by name. Never raises for a bad module.

    Importing a module runs its code, so it happens where a scraper's code may run (fleet/scraping/sandboxed.py):
    as root, in a sandboxed process of its own, whose answer is kept per content of the scrapers; else here."""
    from fleet.scraping import sandboxed

    return sandboxed.discover(list(dirs), scan, Source)


def scan(dirs: list[Path], skip: Mapping[str, str] | None = None, refuse: str | None = None,
         progress=None) -> list[Source]:
    """:func:`discover` in this process: imports every module, calling ``progress(path)`` before each, but those
    named in ``skip`` (path -> why: each fails as a source with that error) and, given ``refuse``, any (each fails
    with it).

    A class is a source when it sets ``name`` in its own body and is not marked ``abstract = True``; other
    ``Scraper`` subclasses are base classes. A broken module or class becomes a failing source with its own
    error, named after its module file unless a healthy source (or an earlier broken one) has that name: then
    the class name and a digest of the path are added. A healthy source keeps its name whatever else is broken.
    Two healthy classes with one ``name`` both fail, each under its module's name."""
    found: list[Source] = []
    broken: list[_Placeholder] = []

    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.py")):
            if path.name.startswith("_"):
                continue
            why = refuse or (skip or {}).get(str(path))
            if why:
                broken.append(_Placeholder(path, f"scraper module {path.name} was not imported: {why}"))
                continue
            if progress is not None:
                progress(path)
            try:
                module = load_module(path)
            except BaseException as exc:  # SyntaxError, ImportError, anything a module can raise on import
                if isinstance(exc, KeyboardInterrupt):
                    raise
                detail = f"{type(exc).__name__}: {exc}"
                broken.append(_Placeholder(path, f"scraper module {path.name} failed to import: {detail}",
                                           where=_import_site(path, exc)))
                continue
            _scan(path, module, found, broken)

    by_name: dict[str, list[Source]] = {}
    for src in found:
        by_name.setdefault(src.name, []).append(src)
    sources: dict[str, Source] = {}
    for name, group in by_name.items():
        if len(group) == 1:
            sources[name] = group[0]
            continue
        # Ambiguous: none of them runs, each fails under its module's name, saying where the twin is.
        where = ", ".join(str(g.module_path) for g in group)
        broken += [_Placeholder(g.module_path, f"scraper name {name!r} is defined more than once ({where}); "
                                               f"scraper names must be unique", g.class_name,
                                  _class_site(g.module_path, g.class_name)) for g in group]
    for p in sorted(broken, key=_Placeholder.sort_key):
        name = next(n for n in p.names() if n not in sources)
        sources[name] = p.source(name)
    return [sources[k] for k in sorted(sources)]


if __name__ == "__main__":  # discovery's sandboxed process (fleet/scraping/sandboxed.py)
    from fleet.scraping import sandboxed

    sys.exit(sandboxed.serve(sys.argv[1], scan))
