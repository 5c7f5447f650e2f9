"""Reading what the data repository holds (``fleet show``): one source's committed rows of a week, from a shallow
clone of the branch tip that downloads only that file's LFS object. A week committed in the older one-file layout
(``<week>/raw.parquet`` with a ``source`` column) is read too (fleet/transform/layout.py ``split_legacy``)."""
from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

import click
import git
import polars as pl

from fleet.config import settings
from fleet.errors import FleetError
from fleet.publish import lfs
from fleet.publish.datarepo import DataRepo
from fleet.publish.remote import failure
from fleet.transform import layout


def _find(paths: list[str], prefix: str, source: str, week: str | None, stage: str) -> tuple[str, str, bool]:
    """(week, path, legacy) of ``source``'s file of ``stage``: in ``week``, or the newest week that has one."""
    found: dict[str, tuple[str, bool]] = {}
    for path in paths:
        rel = path[len(prefix):]
        w = rel.split("/", 1)[0]
        if rel == layout.repo_path(w, stage, source):
            found[w] = (path, False)
        elif rel == f"{w}/{layout.LEGACY_REPO_FILE[stage]}" and w not in found:
            found[w] = (path, True)
    if week is not None:
        if week not in found:
            raise FleetError(f"the data repository holds no {stage} rows of week {week} for source {source}"
                             + (f" (weeks it has: {', '.join(sorted(found)[-5:])})" if found else ""))
        return week, *found[week]
    if not found:
        raise FleetError(f"the data repository holds no {stage} rows for source {source}")
    w = max(found)
    return w, *found[w]


def committed(data: DataRepo, source: str, week: str | None, stage: str = "raw") -> tuple[str, pl.DataFrame]:
    """(week, rows) of ``source`` as the branch tip of the data repository holds them."""
    remote = data.parsed()
    where = f"{data.redactor()(remote.url)} branch {data.branch}"
    with tempfile.TemporaryDirectory(prefix="fleet-show-") as tmp:
        try:
            remote.command(Path(tmp)).clone("-q", "--depth", "1", "--no-checkout", "--branch", data.branch,
                                            remote.url, str(Path(tmp) / "repo"))
            with git.Repo(Path(tmp) / "repo") as repo:
                repo.git.update_environment(**remote.environment())
                lfs.install(repo)
                paths = repo.git.ls_tree("-r", "--name-only", "HEAD", "--", data.prefix).splitlines()
                week, path, legacy = _find(paths, data.prefix, source, week, stage)
                repo.git.checkout("HEAD", "--", path)  # the pointer (GIT_LFS_SKIP_SMUDGE), then its object only
                repo.git.lfs("pull", f"--include={path}")
                content = (Path(repo.working_tree_dir) / path).read_bytes()
        except git.CommandError as e:
            raise FleetError(f"cannot read {where}: {data.redactor()(failure(e))}") from None
    if lfs.parse_pointer(content[: lfs.POINTER_MAX + 1]) is not None:
        raise FleetError(f"{path} on {where}: its LFS object could not be downloaded")
    frame = pl.read_parquet(io.BytesIO(content))
    if legacy:
        parts = layout.split_legacy(frame)
        if source not in parts:
            raise FleetError(f"week {week}'s {path} on {where} (an older fleet's one-file layout) has no rows of {source}")
        frame = parts[source].collect()
    return week, frame


def show(source: str, week: str | None, stage: str, fmt: str, output: str | None) -> int:
    """``fleet show``: print or export the rows; a table says which week and file it shows."""
    week, frame = committed(DataRepo.from_settings(settings()), source, week, stage)
    if fmt == "parquet":
        if output is None and sys.stdout.isatty():
            raise FleetError("--format parquet writes binary: give --output FILE, or redirect standard output")
        frame.write_parquet(output or sys.stdout.buffer)
        return 0
    if fmt == "table":
        with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=80, tbl_width_chars=200):
            text = f"{source}: {stage} rows of week {week} ({frame.height} rows)\n{frame}\n"
    elif fmt == "csv":
        # a nested column has no CSV form: written as its JSON text
        nested = [c for c, t in frame.schema.items() if t.is_nested()]
        text = frame.with_columns([pl.col(c).map_elements(_json, return_dtype=pl.String) for c in nested]).write_csv()
    else:
        text = frame.write_ndjson()
    if output:
        Path(output).write_text(text)
    else:
        click.echo(text, nl=False)
    return 0


def _json(value) -> str:
    import json

    return json.dumps(value.to_list() if isinstance(value, pl.Series) else value, default=str, ensure_ascii=False)
