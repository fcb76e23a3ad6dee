"""Zarr reads that never fill: a store whose missing chunks raise instead of reading as zarr's fill
value (zeros), and a check of an array's chunk files and shard indexes. Every reader of the
attention stores goes through :func:`attnscope.store.open_store`, which uses it."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import zarr
import zarr.storage
from zarr.abc.store import ByteRequest, SuffixByteRequest

if TYPE_CHECKING:
    from zarr.core.buffer import Buffer


class MissingChunkError(LookupError):
    """A chunk that an array's metadata promises is not on disk. zarr would read it as the fill
    value (zeros), which is no data: attnscope's writers write every chunk of every array, so a
    gap means a damaged or incomplete store."""


EMPTY_INNER_CHUNK = 2**64 - 1
"""A shard index entry's offset and length for an inner chunk never written (the sharding spec)."""

RERUN_HINT = "delete the store and rerun its extract_attention job"
METADATA_KEYS = ("zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata")
"""Metadata documents (zarr v3's, and v2's that zarr-python probes when opening a group)."""


def shard_index(index: bytes) -> np.ndarray:
    """A shard index (``bytes`` + ``crc32c``, as attnscope's writers and zarr's default write it) as
    ``[inner chunk, (offset, length)]``: 16 bytes per inner chunk, then a 4-byte checksum."""
    return np.frombuffer(index[:-4], dtype="<u8").reshape(-1, 2)


def check_index(path: Path, index: np.ndarray) -> None:
    """Raise :class:`MissingChunkError` if the :func:`shard_index` of the shard file at ``path`` marks
    an inner chunk as never written (zarr would read it as zeros)."""
    empty = int((index == EMPTY_INNER_CHUNK).all(axis=1).sum())
    if empty:
        raise MissingChunkError(
            f"{path}: {empty} of {len(index)} inner chunks never written (zarr would read zeros); "
            f"{RERUN_HINT}"
        )


def check_chunks(array: zarr.Array, directory: str | os.PathLike) -> None:
    """Raise :class:`MissingChunkError` if a chunk file of ``array`` (stored under ``directory``) is
    missing or truncated, or a shard's index marks an inner chunk as never written.

    The shard index lies at the shard's end (:func:`shard_index`).
    """
    shards = array.shards or array.chunks
    inner = 1 if array.shards is None else int(np.prod([-(-s // c) for s, c in zip(shards, array.chunks)]))
    index_size = 16 * inner + 4
    for coords in itertools.product(*(range(-(-n // s)) for n, s in zip(array.shape, shards))):
        path = Path(directory, array.metadata.encode_chunk_key(coords))
        if not path.is_file():
            raise MissingChunkError(f"{path}: chunk file missing (zarr would read zeros); {RERUN_HINT}")
        if array.shards is None:
            continue
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            if size < index_size:
                raise MissingChunkError(f"{path}: truncated shard ({size} bytes, no index); {RERUN_HINT}")
            file.seek(-index_size, os.SEEK_END)
            index = shard_index(file.read(index_size))
        check_index(path, index)
        if (index[:, 0] + index[:, 1] > size - index_size).any():
            raise MissingChunkError(f"{path}: truncated shard (its index points past the data); {RERUN_HINT}")


def _inner_chunks(metadata: bytes) -> int | None:
    """Inner chunks per shard of an array's ``zarr.json`` with its shard index at the end (None:
    anything else; a malformed document is zarr's to report)."""
    try:
        document = json.loads(metadata)
        codec, grid = document["codecs"][0], document["chunk_grid"]["configuration"]
        if codec["name"] != "sharding_indexed" or codec["configuration"].get("index_location") != "end":
            return None
        shard, inner = grid["chunk_shape"], codec["configuration"]["chunk_shape"]
    except (ValueError, LookupError, TypeError, AttributeError):
        return None
    return int(np.prod([-(-s // c) for s, c in zip(shard, inner)]))


class StrictStore(zarr.storage.WrapperStore):
    """A read-only local store whose missing data raises :class:`MissingChunkError` (naming the
    file) instead of reading as zarr's fill value: a chunk file that is not there, or a shard index
    read by zarr (from the shard's end or with the whole shard) that marks an inner chunk as never
    written. The index is checked as it passes, so no read is added."""

    def __init__(self, store: zarr.storage.LocalStore):
        super().__init__(store)
        self.inner: dict[str, int | None] = {}  # array path: inner chunks per shard, from its zarr.json

    async def get(self, key: str, prototype, byte_range=None):  # noqa: ANN001 (zarr's signature)
        return self.strict(key, byte_range, await self._store.get(key, prototype, byte_range))

    async def _get_many(self, requests):  # noqa: ANN001 (zarr's signature): each through get
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)

    async def list_dir(self, prefix: str):  # noqa: ANN201 (zarr's signature)
        """The entries under ``prefix`` except hidden files: no Zarr name starts with a dot, and
        Snakemake marks a finished directory output with its ``.snakemake_timestamp``."""
        async for name in self._store.list_dir(prefix):
            if not name.startswith("."):
                yield name

    def _inner_chunks_of(self, key: str) -> int | None:
        """:attr:`inner` of the array that holds chunk ``key``: the nearest folder above it whose
        ``zarr.json`` was read (arrays are leaves; any chunk key encoding)."""
        parts = key.split("/")
        for depth in range(len(parts) - 1, -1, -1):
            folder = "/".join(parts[:depth])
            if folder in self.inner:
                return self.inner[folder]
        return None

    def strict(self, key: str, byte_range: ByteRequest | None, value: Buffer | None) -> Buffer | None:
        """``value`` read for ``key``, checked: metadata as it is; a chunk that is not there, or a
        shard index with an unwritten inner chunk, raises."""
        directory, name = key.rpartition("/")[::2]
        if name in METADATA_KEYS:
            if name == "zarr.json" and value is not None:
                self.inner[directory] = _inner_chunks(value.to_bytes())
            return value
        path = Path(self._store.root, key)
        if value is None:
            raise MissingChunkError(f"{path}: chunk file missing (zarr would read zeros); {RERUN_HINT}")
        inner = self._inner_chunks_of(key)
        if inner and (isinstance(byte_range, SuffixByteRequest) or byte_range is None):
            check_index(path, shard_index(value[-(16 * inner + 4) :].to_bytes()))
        return value


def strict_store(path: str | os.PathLike) -> StrictStore:
    """The local store at ``path``, read-only, as a :class:`StrictStore`."""
    return StrictStore(zarr.storage.LocalStore(path, read_only=True))
