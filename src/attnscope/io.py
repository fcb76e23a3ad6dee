"""Atomic, deterministic writing of the workflow's artifacts.

Every artifact is written to a temporary sibling path and renamed into place only
when complete, so an interrupted job never leaves a file that looks finished.
Parquet tables carry an ``attnscope`` metadata entry (JSON) with the config digest
of the values that produced them; the same inputs give the same bytes. Zarr arrays and
groups are written by :mod:`attnscope.zarrwrite`.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from attnscope.store import open_store

METADATA_KEY = b"attnscope"


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace variance: the input of every digest."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def config_digest(*parts: Any) -> str:
    """Short sha256 of the canonical JSON of ``parts`` (params and upstream digests)."""
    return hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()[:16]


def job_metadata(job: Any, digest: str, **fields: Any) -> dict[str, Any]:
    """The provenance every output of a Snakemake job records: its config digest (of its params
    and its inputs' digests), the rule that wrote it, ``fields`` and the attnscope version."""
    from attnscope import __version__

    return {"config_digest": digest, "rule": job.rule, **fields, "attnscope_version": __version__}


def recorded_digest(path: str | os.PathLike) -> str:
    """The config digest that an output of this workflow records: a store's attributes, a
    Parquet table's metadata, a model manifest's spec digest."""
    path = os.fspath(path)
    if path.endswith(".zarr"):
        return open_store(path).attrs["config_digest"]
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        if "spec_digest" not in manifest:
            raise ValueError(f"{path}: not a model manifest (no 'spec_digest' key)")
        return manifest["spec_digest"]
    return read_parquet_metadata(path)["config_digest"]


FIGURE_PARAMS = frozenset({"dpi"})
"""Params that decide only a job's figures, never its tables: they enter no digest."""


def job_digest(job: Any, *extra: Any, inputs: Iterable[str] = (), leave_out: Iterable[str] = ()) -> str:
    """The config digest of a Snakemake job (``snakemake`` in a rule's script): every param in
    the rule's order but those of :data:`FIGURE_PARAMS` and of ``leave_out``, then ``extra`` (what
    else decides the outputs: a wildcard, a format version), then the digest recorded in each file
    of the named ``inputs``, in that order (an input given as an empty list adds nothing).

    ``leave_out`` names params that decide which outputs a job writes, not what one holds: a job
    that writes one set of outputs per variant (params ``variants``) leaves its variant list out
    of each set's digest, which is then that of a job of that variant alone."""
    leave_out = set(leave_out)
    unknown = leave_out - set(job.params.keys())
    if unknown:
        raise ValueError(f"leave_out names no param of rule {job.rule}: {', '.join(sorted(unknown))}")
    params = list(job.params)
    skipped = FIGURE_PARAMS | leave_out
    if skipped & set(job.params.keys()):  # such rules name every param
        params = [value for name, value in job.params.items() if name not in skipped]
    upstream: list[str] = []
    for name in inputs:
        files = job.input[name]
        upstream += [files] if isinstance(files, str) else list(files)
    return config_digest(*params, *extra, *(recorded_digest(path) for path in upstream))


def file_digest(path: str | os.PathLike) -> str:
    """Short sha256 of a file's bytes (an input's content in a config digest)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}.tmp-"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove_stale(path: Path) -> None:
    """Remove the temporary siblings of ``path`` that no running process writes: this
    process's own, and those of killed jobs (``kill -9`` skips every cleanup)."""
    prefix = _tmp_prefix(path)
    for sibling in path.parent.glob(glob.escape(prefix) + "*"):
        pid = sibling.name[len(prefix) :]
        if pid.isdigit() and (int(pid) == os.getpid() or not _running(int(pid))):
            _remove(sibling)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of ``path``; rename it to ``path`` on success.

    Works for files and directories (Zarr stores). On any exception the temporary
    path is removed and ``path`` is left as it was. Temporary siblings that a killed
    process left behind are removed first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{_tmp_prefix(path)}{os.getpid()}")
    _remove_stale(path)
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        _remove(tmp)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def write_parquet(df: pd.DataFrame, path: str | os.PathLike, metadata: Mapping[str, Any]) -> None:
    """Write ``df`` (index dropped) atomically with ``metadata`` stored as JSON."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    schema_meta = dict(table.schema.metadata or {})
    schema_meta[METADATA_KEY] = canonical_json(dict(metadata)).encode()
    table = table.replace_schema_metadata(schema_meta)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_parquet_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The ``attnscope`` metadata written by :func:`write_parquet`."""
    meta = pq.read_schema(path).metadata or {}
    if METADATA_KEY not in meta:
        raise ValueError(f"{path}: not an attnscope table (no '{METADATA_KEY.decode()}' metadata)")
    return json.loads(meta[METADATA_KEY])


def write_text(text: str, path: str | os.PathLike) -> None:
    """Write ``text`` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` as indented, key-sorted JSON atomically."""
    write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n", path)


def setup_script_logging(log_path: str | os.PathLike | None) -> logging.Logger:
    """Log to the rule's ``log:`` file and to stderr; return the ``attnscope`` logger.

    An uncaught exception goes to both as well, so a failed job's log says why it failed."""
    logger = logging.getLogger("attnscope")
    logger.setLevel(logging.INFO)
    logger.handlers.clear()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w", encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(fmt)
        logger.addHandler(handler)
    sys.excepthook = lambda *exc_info: logger.error("job failed: %s", exc_info[1], exc_info=exc_info)
    return logger


def cell_text(value: Any) -> str:
    """The text of a table cell in every table this package writes (Markdown, HTML): empty for
    None and NaN, a float to four significant digits."""
    if isinstance(value, float):
        return "" if value != value else f"{value:.4g}"
    return "" if value is None else str(value)


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of ``df`` (``|`` and newlines in cells escaped)."""

    def cell(value: Any) -> str:
        return cell_text(value).replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(cell(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in record) + " |" for record in df.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"
