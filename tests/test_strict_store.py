"""The pipeline's store readers stop on missing data: a shard file that is not there, or a shard
index that marks an inner chunk as never written, raises :class:`chunks.MissingChunkError` naming
the file, where zarr alone reads zeros. Each damaged store is a copy of a real tiny-model store."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from attnscope import choices, chunks, mapdata, metrics, spectrastore, store, zarrwrite
from tests.helpers import compressor, punch_hole, shard, store_path

VARIANT = "trained"


def first_target(path: Path) -> str:
    return zarr.open_group(path, mode="r").attrs["prompts"][0]["target"]


READERS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    # name: (the array of prompt 000 it reads, a read of the whole array through the stage's reader)
    "choices_table": ("choices", choices.choices_table),
    "metrics_table": ("metrics", metrics.metrics_table),
    "mapdata": ("head_mean", lambda p: mapdata.read_prompt_maps(p, first_target(p)).token_maps([0, 1])),
    "mapdata_cosine": ("cosine", lambda p: mapdata.read_prompt_maps(p, first_target(p)).cosine()),
    "open_attention": ("word_attn_sum", lambda p: store.open_attention(p)["000"]["word_attn_sum"].values),
}


def inner_chunks(path: Path) -> int:
    """Inner chunks in the one shard file of the array at ``path``."""
    array = zarr.open_array(path, mode="r")
    return int(np.prod([-(-n // c) for n, c in zip(array.shape, array.chunks)]))


def missing(path: Path) -> None:
    path.unlink()


def hole(path: Path) -> None:
    """The shard's last inner chunk marked as never written."""
    entries = inner_chunks(path.parent)
    punch_hole(path, entries - 1, entries)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("damage", [missing, hole], ids=["missing-shard", "hole-in-index"])
def test_a_reader_stops_on_missing_data(results, tmp_path, reader, damage):
    name, read = READERS[reader]
    path = store_path(tmp_path, VARIANT)
    shutil.copytree(store_path(results, VARIANT), path)
    assert np.asarray(read(path), dtype=object).size  # the good copy reads
    damaged = shard(tmp_path, VARIANT, name)
    damage(damaged)
    with pytest.raises(chunks.MissingChunkError, match=f"{damaged}: .*(chunk file missing|never written)"):
        read(path)


def test_singular_values_stop_on_a_missing_chunk(tmp_path):
    """The spectra's singular-value store (zarr-written, one chunk file per matrix type)."""
    path = tmp_path / "sv.zarr"
    zarr.open_group(path, mode="w", zarr_format=3).create_array("q", data=np.ones((2, 3)), chunks=(2, 3))
    np.testing.assert_array_equal(spectrastore.read_singular_values(path)["q"], np.ones((2, 3)))
    chunk = path / "q" / "c" / "0" / "0"
    chunk.unlink()
    with pytest.raises(chunks.MissingChunkError, match=f"{chunk}: chunk file missing"):
        spectrastore.read_singular_values(path)


def test_an_all_zero_array_is_written(tmp_path):
    """zarr skips a chunk of fill values unless told; the whole arrays are written with theirs."""
    zarrwrite.write_whole_array(tmp_path / "a", np.zeros((2, 3)), compressor("float64"), ("query", "key"))
    read = zarr.open_array(chunks.strict_store(tmp_path / "a"), mode="r")
    np.testing.assert_array_equal(read[...], np.zeros((2, 3)))


def test_a_good_store_reads_as_zarr_reads_it(results):
    """The strict reader changes no value of a whole store."""
    path = store_path(results, VARIANT)
    plain, strict = zarr.open_group(path, mode="r"), store.open_store(path)
    for name, array in plain.arrays():
        np.testing.assert_array_equal(strict[name][...], array[...])
    for group in store.prompt_groups(plain):
        for name, array in group.arrays():
            np.testing.assert_array_equal(strict[group.basename][name][...], array[...], err_msg=name)
