"""Discovery where a scraper's code may run. Importing a scraper module runs its code (its top level, its class
bodies, a metaclass), so as root it happens as an attempt does (fleet/engine/sandbox.py): in a process of its own,
as the sandbox's user, in the sandbox's view, which prints the sources it found as JSON. fleet's own processes
(the CLI, the forkserver and step processes, the code location, Celery workers) import no scraper module.

The answer is kept in ``FLEET_HOME/discovery/`` (0700) under a digest of every ``*.py`` under the scraper folders,
of fleet's discovery code and of the interpreter, so the processes of a week ask once and a changed scraper is
asked about again. A module whose import does not finish within ``IMPORT_S`` is killed with its process and fails
as a source saying so; the others are asked about again without it (such an answer is not kept).

Not as root, or with ``FLEET_SANDBOX=off``, modules are imported in the asking process, where an attempt's code
would run too. As root where the sandbox is refused, no module is imported: each fails as a source naming why."""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

from fleet.errors import FleetError

IMPORT_S = 60.0      # seconds one module's import may take, and the sandboxed process to start
FORMAT = 2           # of the kept answers: a change of what they hold makes old ones unread
_CODE = [Path(__file__).with_name(n) for n in ("discovery.py", "contract.py", "sandboxed.py")]
_memo: dict[str, list] = {}


def discover(dirs: list[Path], scan, source) -> list:
    """``scan(dirs)`` (fleet/scraping/discovery.py) where scraper code may run, see the module's docstring; an
    answer from elsewhere is made of ``source(**fields)``."""
    from fleet.engine import sandbox
    from fleet.engine.settings import EngineSettings

    if os.geteuid() != 0:
        return scan(dirs)
    settings = EngineSettings.from_env()
    box = sandbox.current(settings.hosts_dir.parent, dirs)
    if box.off:
        return scan(dirs)
    if box.refused:
        return scan(dirs, refuse=f"fleet imports no scraper as root without the sandbox, which cannot run: "
                                 f"{box.refused}")
    key = digest(dirs)
    if key in _memo:
        return _memo[key]
    kept = settings.hosts_dir.parent / "discovery" / f"{key}.json"
    sources = _read(kept, source)
    if sources is None:
        sources, hung = _ask(box, settings, dirs, source)
        if not hung:
            _keep(kept, sources)
    _memo[key] = sources
    return sources


def digest(dirs: list[Path]) -> str:
    """What the answer depends on: the scrapers' code (every ``*.py`` under ``dirs``, by content), fleet's
    discovery code, the interpreter and polars (the schemas' encoding)."""
    import polars

    h = hashlib.sha256(f"{FORMAT}\0{sys.version}\0{polars.__version__}\0".encode())
    for path in _CODE:
        h.update(path.read_bytes())
    for d in dirs:
        h.update(f"\0dir\0{Path(d).resolve()}\0".encode())
        for path in sorted(Path(d).rglob("*.py")) if Path(d).is_dir() else []:
            try:
                h.update(f"{path.relative_to(d)}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
            except OSError as exc:  # unreadable: asked about each time (the sandboxed process says what is wrong)
                h.update(f"{path}\0{exc}".encode() + os.urandom(8))
    return h.hexdigest()[:32]


def _ask(box, settings, dirs: list[Path], source) -> tuple[list, dict[str, str]]:
    """The sources of ``dirs`` as the sandboxed process finds them, and the modules it could not import (path ->
    why): one that hung, or that ended the process, fails as a source and the process is asked again without it."""
    from fleet.engine import sandbox

    skip: dict[str, str] = {}
    while True:
        spec = json.dumps({"dirs": [str(d) for d in dirs], "skip": skip})
        proc = sandbox.popen_python(box, settings, ["fleet.scraping.discovery", spec], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: queue.Queue = queue.Queue()
        err: list[str] = []
        threading.Thread(target=_pump, args=(proc.stdout, lines.put), daemon=True).start()
        errs = threading.Thread(target=_pump, args=(proc.stderr, err.append), daemon=True)
        errs.start()
        importing, answer, timed_out = None, None, False
        while True:
            try:
                line = lines.get(timeout=IMPORT_S)
            except queue.Empty:
                proc.kill()
                timed_out = True
                break
            if line is None:
                break
            if line.startswith("importing "):
                importing = line[len("importing "):].rstrip("\n")
            elif line.startswith("sources "):
                answer = line[len("sources "):]
        proc.wait()
        errs.join(timeout=5)
        if answer is not None and proc.returncode == 0:
            try:
                return [decode(s, source) for s in json.loads(answer)], skip
            except (ValueError, SyntaxError, TypeError, KeyError) as exc:
                raise FleetError(f"scraper discovery (a sandboxed process, as {box.user}) answered what fleet "
                                 f"cannot read: {type(exc).__name__}: {exc}") from None
        last = ("".join(x for x in err if x).strip().splitlines() or ["no output"])[-1]
        if importing and importing not in skip:  # it stopped the process that imported it
            skip[importing] = (f"its import did not finish within {IMPORT_S:.0f} s (module-level code must not "
                               f"wait on anything)" if timed_out else
                               f"its import ended the process that imported it (exit code {proc.returncode}: {last})")
            continue
        what = f"while importing {importing}" if importing else "before importing any module"
        raise FleetError(f"scraper discovery (a sandboxed process, as {box.user}) failed {what}: "
                         f"{'no answer within %.0f s' % IMPORT_S if timed_out else last}; the sandbox's user must "
                         f"be able to run {sys.executable} and import fleet")


def _pump(stream, put) -> None:
    for line in stream:
        put(line)
    put(None)


def encode(src) -> dict:
    out = dataclasses.asdict(src)
    out["module_path"] = str(src.module_path)
    if src.schema is not None:  # each dtype as polars writes it: "Int64", "List(String)", "Datetime(time_unit='us', ...)"
        out["schema"] = {col: repr(dtype) for col, dtype in src.schema.items()}
    return out


def decode(data: dict, source):
    data = dict(data)
    data["module_path"] = Path(data["module_path"])
    data["key"] = tuple(data["key"])
    data["optional"] = tuple(data.get("optional") or ())
    if data.get("schema") is not None:
        data["schema"] = {col: dtype(text) for col, text in data["schema"].items()}
    return source(**data)


def dtype(text: str):
    """The polars dtype ``text`` (its ``repr``) names, read without evaluating anything: only polars' dtype classes
    called with constants, lists, tuples, dicts and dtypes. (Not through polars' own I/O: that starts its thread
    pool, which a process forked afterwards, as the forkserver's steps are, would find dead.)"""
    return _value(ast.parse(text, mode="eval").body, top=True)


def _value(node, top: bool = False):
    import polars as pl

    if isinstance(node, ast.Name) or isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.id if isinstance(node, ast.Name) else node.func.id
        cls = getattr(pl, name, None)
        if not (isinstance(cls, type) and issubclass(cls, pl.DataType)):
            raise ValueError(f"{name!r} is not a polars dtype")
        if isinstance(node, ast.Name):
            return cls
        return cls(*[_value(a) for a in node.args], **{k.arg: _value(k.value) for k in node.keywords if k.arg})
    if top:
        raise ValueError(f"not a polars dtype: {ast.dump(node)}")
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_value(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    raise ValueError(f"not a polars dtype's argument: {ast.dump(node)}")


def _read(path: Path, source) -> list | None:
    """A kept answer, if there is one fleet itself wrote (root's, not writable by another) and it reads whole."""
    try:
        st = path.stat()
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        return [decode(s, source) for s in json.loads(path.read_text())]
    except (OSError, ValueError, SyntaxError, TypeError, KeyError):
        return None


def _keep(path: Path, sources: list) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_text(json.dumps([encode(s) for s in sources]))
    os.replace(part, path)


def serve(spec: str, scan) -> int:
    """The sandboxed process (``python -m fleet.scraping.discovery SPEC``): says each module before importing it,
    then prints every source ``scan`` found."""
    args = json.loads(spec)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # a module's print() must not be taken for the answer

    def progress(path: Path) -> None:
        real_stdout.write(f"importing {path}\n")
        real_stdout.flush()

    sources = scan([Path(d) for d in args["dirs"]], skip=args["skip"], progress=progress)
    real_stdout.write("sources " + json.dumps([encode(s) for s in sources]) + "\n")
    real_stdout.flush()
    return 0
