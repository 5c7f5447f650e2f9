"""Find scraper modules and their ``Scraper`` subclasses. A broken module becomes a broken source, never a crash."""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Any, Mapping

from fleet.errors import ScraperDefinitionError
from fleet.scraping.contract import Scraper


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

    @property
    def broken(self) -> bool:
        return self.error is not None

    def load_class(self) -> type[Scraper]:
        if self.error:
            raise ScraperDefinitionError(self.error)
        module = load_module(self.module_path)
        return getattr(module, self.class_name)


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
    s = re.sub(r"[^a-z0-9_]", "_", path.stem.lower())
    if not s or not s[0].isalpha():
        s = "m_" + s
    return s


def _broken(path: Path, error: str) -> Source:
    return Source(name=slug_for_module(path), module_path=path, class_name=None,
                  description=f"Broken scraper module {path.name}: {error.splitlines()[-1] if error else ''}",
                  schema=None, key=(), timeout_s=60, error=error)


def discover(dirs: list[Path]) -> list[Source]:
    """Every source in ``dirs`` (non-recursive), sorted by name. Never raises for a bad module."""
    candidates: list[Source] = []
    add = candidates.append

    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.py")):
            if path.name.startswith("_"):
                continue
            try:
                module = load_module(path)
            except BaseException as exc:  # SyntaxError, ImportError, anything a module can raise on import
                if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not isinstance(exc, SystemExit):
                    raise
                detail = f"{type(exc).__name__}: {exc}"
                add(_broken(path, f"scraper module {path.name} failed to import: {detail}"))
                continue
            found = [obj for _, obj in inspect.getmembers(module, inspect.isclass)
                     if issubclass(obj, Scraper) and obj is not Scraper and obj.__module__ == module.__name__]
            if not found:
                continue
            for cls in found:
                try:
                    cls.validate_class()
                except ScraperDefinitionError as exc:
                    add(_broken(path, f"scraper module {path.name}: {exc}"))
                    continue
                add(Source(name=cls.name, module_path=path, class_name=cls.__name__, description=cls.description(),
                           schema=dict(cls.schema), key=tuple(cls.key), timeout_s=float(cls.timeout_s),
                           own_browser=cls.own_browser, own_process=cls.own_process))
    by_name: dict[str, list[Source]] = {}
    for src in candidates:
        by_name.setdefault(src.name, []).append(src)
    sources: dict[str, Source] = {}
    for name, group in by_name.items():
        if len(group) > 1:
            # Ambiguous: none of them runs, each fails under its module's name, saying where the twin is.
            where = ", ".join(str(g.module_path) for g in group)
            group = [_broken(g.module_path, f"scraper name {name!r} is defined more than once ({where}); "
                                            f"scraper names must be unique") for g in group]
        for src in group:
            if src.name in sources:
                src = dataclasses.replace(src, name=f"{src.name}_{hashlib.sha1(str(src.module_path).encode()).hexdigest()[:6]}")
            sources[src.name] = src
    return [sources[k] for k in sorted(sources)]
