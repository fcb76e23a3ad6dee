"""Zarr v3 arrays and groups written straight into a local directory.

:class:`ShardWriter` streams an array into one shard file chunk by chunk as the data comes,
:func:`write_whole_array` has zarr write an array already whole in memory, and
:func:`write_zarr_group` writes a group's ``zarr.json``. Hand-written where zarr's per-call
machinery would cost a round trip per chunk; ``tests/test_zarrwrite.py`` checks the files
against zarr-python's own reading and writing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import google_crc32c
import numcodecs
import numpy as np

if TYPE_CHECKING:
    from zarr.codecs import BloscCodec

ZARR_JSON = "zarr.json"
_EMPTY_CHUNK = np.iinfo(np.uint64).max


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
    written by zarr itself (the streamed arrays need :class:`ShardWriter`), all-zero chunk
    included: readers take a chunk that is not there for damage (:class:`attnscope.chunks.StrictStore`)."""
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
        config={"write_empty_chunks": True},
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
