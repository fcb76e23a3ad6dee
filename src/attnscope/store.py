"""The attention store: its layout, names and the one reader every consumer uses (torch-free).

A store is a Zarr v3 group per model × variant × experiment. The root's attributes describe
the run (model, variant, ``num_layers``, ``num_heads``, ``kv_head``, ``metrics``, ``choices``,
``choice_metrics``, ``prompts``: one entry per prompt with its ``group``, ``prompt_id`` and
``target``); each prompt is a child
group (``"000"``, ...) whose arrays carry the named dimensions of :data:`DIMENSIONS` and whose
attributes label every token with a segment of :data:`SEGMENTS`.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
import zarr.storage
from zarr.abc.store import ByteRequest, SuffixByteRequest

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr
    from zarr.core.buffer import Buffer

# Token segments. ``template`` is everything the chat template and the prompt format
# add (role markers, special tokens, a default system turn, "Word:" labels, "#").
TEMPLATE = "template"
INSTRUCTION_SEGMENT = "instruction"
SHOT_WORD = "shot_word"
SHOT_CLUE = "shot_clue"
TARGET = "target"
GENERATED = "generated"
SEGMENTS = (TEMPLATE, INSTRUCTION_SEGMENT, SHOT_WORD, SHOT_CLUE, TARGET, GENERATED)
# The segments made of words: word-level maps, plotted tokens and the value domain use these.
WORD_SEGMENTS = (SHOT_WORD, SHOT_CLUE, TARGET, GENERATED)

STORE_VERSION = 6
"""The layout version a store records at its root (``store_version``); readers refuse others."""

# The ``head`` (metrics tables) / ``map`` (stores) index of the head-mean map.
HEAD_MEAN = -1

# The arrays of a prompt group and their named dimensions.
DIMENSIONS = {
    "attn": ("layer", "head", "query", "key"),
    "head_mean": ("layer", "query", "key"),
    "word_attn_sum": ("layer", "query_word", "key_word"),
    "word_attn_mean_query": ("layer", "query_word", "key_word"),
    "thesis_word_attn_sum": ("layer", "query_thesis_word", "key_thesis_word"),
    "cosine": ("query", "key"),
    "metrics": ("layer", "map", "metric"),
    "singular_values": ("layer", "map", "singular_value"),
    "choices": ("layer", "choice", "choice_metric"),
}


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


def open_store(path: str | os.PathLike) -> zarr.Group:
    """The store at ``path``, read-only: missing data raises (:class:`StrictStore`)."""
    return zarr.open_group(strict_store(path), mode="r")


def prompt_groups(root: zarr.Group) -> list[zarr.Group]:
    """The prompt groups of an open store, in the order of its ``prompts`` attribute."""
    return [root[entry["group"]] for entry in root.attrs["prompts"]]


def _prompt_dataset(ds: xr.Dataset, root: Mapping[str, Any]) -> xr.Dataset:
    attrs = ds.attrs
    n, words = attrs["n_tokens"], attrs["map_words"]
    word_text = [attrs["words"][w] for w in words]
    word_segment = [attrs["word_segment"][w] for w in words]
    word_shot = [attrs["word_shot"][w] for w in words]
    coords: dict[str, Any] = {
        "layer": np.arange(root["num_layers"]),
        "head": np.arange(root["num_heads"]),
        "kv_head": ("head", np.asarray(root["kv_head"])),
        "map": np.append(np.arange(root["num_heads"]), HEAD_MEAN),
        "metric": list(root["metrics"]),
        "choice": list(root["choices"]),
        "choice_metric": list(root["choice_metrics"]),
    }
    for side in ("query", "key"):
        coords[side] = np.arange(n)
        coords[f"{side}_token"] = (side, list(attrs["tokens"]))
        coords[f"{side}_segment"] = (side, list(attrs["token_segment"]))
        coords[f"{side}_shot"] = (side, np.asarray(attrs["token_shot"]))
        coords[f"{side}_token_word"] = (side, np.asarray(attrs["token_word"]))
        coords[f"{side}_word"] = np.asarray(words, dtype=np.int64)
        coords[f"{side}_word_text"] = (f"{side}_word", word_text)
        coords[f"{side}_word_segment"] = (f"{side}_word", word_segment)
        coords[f"{side}_word_shot"] = (f"{side}_word", np.asarray(word_shot, dtype=np.int64))
        coords[f"{side}_thesis_word"] = np.arange(len(attrs["thesis_words"]))
        coords[f"{side}_thesis_word_text"] = (f"{side}_thesis_word", list(attrs["thesis_words"]))
        coords[f"{side}_thesis_word_segment"] = (f"{side}_thesis_word", list(attrs["thesis_word_segment"]))
        coords[f"{side}_thesis_word_shot"] = (
            f"{side}_thesis_word",
            np.asarray(attrs["thesis_word_shot"], dtype=np.int64),
        )
    return ds.assign_coords(coords)


def open_attention(path: str | os.PathLike) -> xr.DataTree:
    """Open a store lazily as an ``xarray.DataTree``: one child per prompt group (``"000"``, ...).

    Each child's Dataset has ``attn`` (prompts that keep heads), ``head_mean``,
    ``word_attn_sum``, ``word_attn_mean_query``, ``thesis_word_attn_sum``, ``cosine``,
    ``metrics``, ``singular_values`` and ``choices`` with named dimensions (layer, head, query,
    key, query_word, key_word, query_thesis_word, key_thesis_word, map, metric,
    singular_value, choice, choice_metric) and token coordinates (``query_token``,
    ``query_segment``, ``query_shot``, ``query_token_word``, the same for ``key``;
    ``query_word_text``, ``query_thesis_word_text`` etc. for the words). Arrays are read from
    disk only when indexed or loaded. The root's attributes are the store's: model,
    variant, config digest, ``kv_head``, and ``prompts`` (group, prompt_id, target).
    """
    import xarray as xr

    tree = xr.open_datatree(strict_store(path), engine="zarr", chunks=None, consolidated=False, zarr_format=3)
    root = dict(tree.attrs)
    nodes = {"/": xr.Dataset(attrs=root)}
    for entry in root["prompts"]:
        nodes[entry["group"]] = _prompt_dataset(tree[entry["group"]].to_dataset(), root)
    return xr.DataTree.from_dict(nodes)


EXPERIMENT_ATTRS = ("category", "k", "seed", "prompt_format")
"""The experiment settings a store records at its root (prompt-table columns of one value each;
``prompt_format`` as :meth:`attnscope.prompts.PromptFormat.to_json` wrote it), so figure titles
and resource sizing read them from the store instead of the config."""


def experiment_attrs(prompt_table: pd.DataFrame) -> dict[str, Any]:
    """:data:`EXPERIMENT_ATTRS` of a prompt table, as JSON-ready root attributes."""
    attrs: dict[str, Any] = {}
    for column in EXPERIMENT_ATTRS:
        values = prompt_table[column].unique()
        if len(values) != 1:
            raise ValueError(f"prompt table column {column!r}: {len(values)} values, expected one per store")
        attrs[column] = values[0].item() if isinstance(values[0], np.generic) else values[0]
    return attrs
