"""Atomic, deterministic writing of the workflow's artifacts.

Every artifact is written to a temporary sibling path and renamed into place only
when complete, so an interrupted job never leaves a file that looks finished.
Parquet tables carry an ``attnscope`` metadata entry (JSON) with the config digest
of the values that produced them; the same inputs give the same bytes. Zarr v3 groups
and sharded arrays can be written straight into a local directory
(:func:`write_zarr_group`, :class:`ShardWriter`), chunk by chunk as the data comes.
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
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import google_crc32c
import numcodecs
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from zarr.codecs import BloscCodec

METADATA_KEY = b"attnscope"
ZARR_JSON = "zarr.json"
_EMPTY_CHUNK = np.iinfo(np.uint64).max


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


def markdown_table(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """A GitHub-flavoured Markdown table of ``df`` (``|`` and newlines in cells escaped)."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            text = "" if value != value else format(value, floatfmt)
        else:
            text = "" if value is None else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(cell(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in record) + " |" for record in df.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def _write_zarr_json(directory: Path, metadata: Mapping[str, Any]) -> None:
    """Write a node's ``zarr.json`` (compact JSON: long token lists encode in a fraction of the
    time of zarr's indented form), replacing it atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{ZARR_JSON}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False, allow_nan=False))
    os.replace(tmp, directory / ZARR_JSON)


def write_zarr_group(directory: str | os.PathLike, attributes: Mapping[str, Any]) -> None:
    """Create a Zarr v3 group at ``directory``, or replace its attributes (atomically)."""
    _write_zarr_json(
        Path(directory), {"attributes": dict(attributes), "zarr_format": 3, "node_type": "group"}
    )


def blosc_encoder(codec: BloscCodec) -> numcodecs.Blosc:
    """numcodecs' Blosc with the configuration of zarr's ``codec`` (the encoder zarr runs for it)."""
    config = codec.to_dict()["configuration"]
    shuffles = ["noshuffle", "shuffle", "bitshuffle"]  # numcodecs.Blosc's NOSHUFFLE, SHUFFLE, BITSHUFFLE
    return numcodecs.Blosc(
        cname=config["cname"],
        clevel=config["clevel"],
        shuffle=shuffles.index(config["shuffle"]),
        blocksize=config["blocksize"],
        typesize=config["typesize"],
    )


def write_whole_array(
    directory: str | os.PathLike, data: np.ndarray, compressor: BloscCodec, dimension_names: tuple[str, ...]
) -> None:
    """An array already whole in memory as a Zarr v3 array of one shard and one inner chunk,
    written by zarr itself (the streamed arrays need :class:`ShardWriter`)."""
    import zarr

    array = zarr.create_array(
        str(directory),
        shape=data.shape,
        chunks=data.shape,
        shards=data.shape,
        dtype=data.dtype,
        compressors=compressor,
        fill_value=0,
        dimension_names=dimension_names,
        chunk_key_encoding={"name": "default", "separator": "."},
    )
    array[...] = data


class ShardWriter:
    """A Zarr v3 array written straight into its directory as one shard file, inner chunk by
    inner chunk, as the data comes.

    The array is one shard (``sharding_indexed``: inner chunks of shape ``chunks`` encoded
    by [``transpose`` with ``order``,] ``bytes`` (little-endian) and ``compressor``; the shard
    index, ``bytes`` + ``crc32c``, at the end of the file). Each inner chunk is encoded and
    appended to the shard file when :meth:`write` gets it, and :meth:`close` appends the
    index: an array is one file however many chunks it has, nothing but the chunk being
    written is held in memory, and zarr's per-call machinery (an event-loop round trip per
    chunk) is skipped. Every inner chunk's bytes are those zarr writes for it (tested); only
    their order in the file may differ, which the index records. Chunks never written read
    as the fill value 0.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        shape: tuple[int, ...],
        dtype: str,
        chunks: tuple[int, ...],
        compressor: BloscCodec,
        dimension_names: tuple[str, ...],
        order: tuple[int, ...] | None = None,
    ):
        self.directory = Path(directory)
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.chunks, self.order = tuple(chunks), order
        self.grid = tuple(-(-s // c) for s, c in zip(shape, chunks))  # inner chunks per shard
        self.encoder = blosc_encoder(compressor)
        inner = [{"name": "transpose", "configuration": {"order": list(order)}}] if order else []
        inner += [{"name": "bytes", "configuration": {"endian": "little"}}, compressor.to_dict()]
        sharding = {
            "chunk_shape": list(chunks),
            "codecs": inner,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end",
        }
        _write_zarr_json(
            self.directory,
            {
                "shape": list(shape),
                "data_type": self.dtype.name,
                "chunk_grid": {
                    "name": "regular",
                    "configuration": {"chunk_shape": [g * c for g, c in zip(self.grid, chunks)]},
                },
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}},
                "fill_value": 0.0 if self.dtype.kind == "f" else 0,
                "codecs": [{"name": "sharding_indexed", "configuration": sharding}],
                "attributes": {},
                "dimension_names": list(dimension_names),
                "zarr_format": 3,
                "node_type": "array",
                "storage_transformers": [],
            },
        )
        self.index = np.full((*self.grid, 2), _EMPTY_CHUNK, dtype="<u8")
        self.offset = 0
        self.file = open(self.directory / ".".join(["c"] + ["0"] * len(shape)), "wb")  # noqa: SIM115

    def write(self, coords: tuple[int, ...], data: np.ndarray) -> None:
        """Encode and append the inner chunk at ``coords`` (chunk-grid coordinates): its values
        in array order, of the chunk's shape or smaller at the array's edge (padded with 0)."""
        if data.shape != self.chunks:
            padded = np.zeros(self.chunks, dtype=self.dtype)
            padded[tuple(slice(0, s) for s in data.shape)] = data
            data = padded
        if self.order is not None:
            data = data.transpose(self.order)
        encoded = self.encoder.encode(np.ascontiguousarray(data, dtype=self.dtype))
        self.file.write(encoded)
        self.index[coords] = (self.offset, len(encoded))
        self.offset += len(encoded)

    def close(self) -> None:
        """Append the shard index (and its crc32c) and close the file."""
        index = self.index.tobytes()
        self.file.write(index + np.array(google_crc32c.value(index), dtype="<u4").tobytes())
        self.file.close()
