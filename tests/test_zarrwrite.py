"""The hand-written Zarr writers against zarr-python's own reading and writing, no model involved:
random arrays of every dtype the store writes, shapes with partial edge chunks, chunks written in
any order or not at all."""

import itertools
import json

import numpy as np
import pytest
import zarr
from zarr.codecs import TransposeCodec

from attnscope import promptgroup, zarrwrite
from tests.helpers import compressor

DTYPES = ["float16", "float32", "float64", "int64"]
# (shape, inner chunk shape, transpose order inside a chunk): whole chunks, partial edge chunks
# on every axis, and the store's heads-last layout of ``attn``.
LAYOUTS = [
    ((4, 6, 6), (1, 6, 6), None),
    ((3, 7, 5), (2, 3, 4), None),
    ((5, 11), (4, 4), (1, 0)),
    ((2, 5, 9, 9), (1, 2, 9, 9), promptgroup.HEADS_LAST),
]


def random_array(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Random values of ``dtype`` with no zero chunk (zarr skips chunks equal to the fill value)."""
    rng = np.random.default_rng(seed)
    if dtype == "int64":
        return rng.integers(1, 1 << 40, size=shape, dtype=np.int64)
    return (rng.random(shape) + 0.5).astype(dtype)


def chunk_slices(coords: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, chunks))


def stream(directory, data: np.ndarray, chunks, order, coords_order=None, names=None) -> None:
    """Write ``data`` through a ShardWriter, chunk by chunk (C order unless ``coords_order``)."""
    names = names or tuple(f"d{i}" for i in range(data.ndim))
    writer = zarrwrite.ShardWriter(
        directory, data.shape, data.dtype.name, chunks, compressor(data.dtype.name), names, order
    )
    grid = [range(-(-s // c)) for s, c in zip(data.shape, chunks)]
    for coords in coords_order if coords_order is not None else itertools.product(*grid):
        writer.write(coords, data[chunk_slices(coords, chunks)])
    writer.close()


def shard_index(path, grid: tuple[int, ...]) -> np.ndarray:
    """The (offset, length) of every inner chunk from a shard file's end."""
    raw = path.read_bytes()
    size = int(np.prod(grid)) * 16
    return np.frombuffer(raw[-size - 4 : -4], dtype="<u8").reshape(*grid, 2)


def zarr_written(directory, data: np.ndarray, chunks, order) -> zarr.Array:
    """The same array written by zarr with the same codecs: one shard over the chunk grid."""
    grid = tuple(-(-s // c) for s, c in zip(data.shape, chunks))
    array = zarr.create_array(
        str(directory),
        shape=data.shape,
        chunks=chunks,
        shards=tuple(g * c for g, c in zip(grid, chunks)),
        dtype=data.dtype,
        filters=[TransposeCodec(order=order)] if order else [],
        compressors=compressor(data.dtype.name),
        fill_value=0,
        dimension_names=tuple(f"d{i}" for i in range(data.ndim)),
        chunk_key_encoding={"name": "default", "separator": "."},
    )
    array[...] = data
    return array


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,chunks,order", LAYOUTS)
def test_shard_writer_reads_back_with_zarr(tmp_path, dtype, shape, chunks, order):
    """zarr reads what ShardWriter wrote as the input array, chunks in any order."""
    data = random_array(shape, dtype)
    grid = [range(-(-s // c)) for s, c in zip(shape, chunks)]
    shuffled = list(itertools.product(*grid))
    np.random.default_rng(1).shuffle(shuffled)
    stream(tmp_path / "a", data, chunks, order, coords_order=shuffled)
    read = zarr.open_array(str(tmp_path / "a"), mode="r")
    assert read.dtype == data.dtype and read.shape == data.shape
    np.testing.assert_array_equal(read[...], data)
    assert read.metadata.dimension_names == tuple(f"d{i}" for i in range(len(shape)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,chunks,order", LAYOUTS)
def test_shard_writer_bytes_equal_zarr(tmp_path, dtype, shape, chunks, order):
    """Written in the order zarr lays its chunks out, the shard file is byte-equal to zarr's and
    the metadata equal; in C order every chunk's bytes are still zarr's (only the offsets move)."""
    data = random_array(shape, dtype, seed=2)
    zarr_written(tmp_path / "zarr", data, chunks, order)
    grid = tuple(-(-s // c) for s, c in zip(shape, chunks))
    shard = "c" + ".0" * len(shape)
    theirs = shard_index(tmp_path / "zarr" / shard, grid)
    by_offset = sorted(itertools.product(*map(range, grid)), key=lambda c: theirs[c][0])
    stream(tmp_path / "ours", data, chunks, order, coords_order=by_offset)
    assert (tmp_path / "ours" / shard).read_bytes() == (tmp_path / "zarr" / shard).read_bytes()
    ours_meta = json.loads((tmp_path / "ours" / "zarr.json").read_text())
    assert ours_meta == json.loads((tmp_path / "zarr" / "zarr.json").read_text())

    stream(tmp_path / "c-order", data, chunks, order)
    ours_raw = (tmp_path / "c-order" / shard).read_bytes()
    theirs_raw = (tmp_path / "zarr" / shard).read_bytes()
    ours = shard_index(tmp_path / "c-order" / shard, grid)
    for coords in itertools.product(*map(range, grid)):
        (o_off, o_len), (t_off, t_len) = ours[coords], theirs[coords]
        assert ours_raw[o_off : o_off + o_len] == theirs_raw[t_off : t_off + t_len]


def test_unwritten_chunks_read_as_zero(tmp_path):
    """Chunks never written read as the fill value 0; the index marks them empty."""
    data = random_array((3, 4, 4), "float16")
    writer = zarrwrite.ShardWriter(
        tmp_path / "a", data.shape, "float16", (1, 4, 4), compressor("float16"), "xyz"
    )
    writer.write((1, 0, 0), data[1:2])
    writer.close()
    expected = np.zeros_like(data)
    expected[1] = data[1]
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[...], expected)
    index = shard_index(tmp_path / "a" / "c.0.0.0", (3, 1, 1))
    assert (index[[0, 2]] == np.iinfo(np.uint64).max).all() and (index[1] != np.iinfo(np.uint64).max).all()


def test_shard_writer_checksum_is_zarrs(tmp_path):
    """A flipped byte in the shard index fails zarr's crc32c check: the checksum is really read."""
    data = random_array((2, 3, 3), "float32")
    stream(tmp_path / "a", data, (1, 3, 3), None)
    path = tmp_path / "a" / "c.0.0.0"
    raw = bytearray(path.read_bytes())
    raw[-6] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(Exception, match="(?i)checksum|crc"):
        zarr.open_array(str(tmp_path / "a"), mode="r")[...]


@pytest.mark.parametrize("dtype", DTYPES)
def test_whole_array_reads_back(tmp_path, dtype):
    """write_whole_array: zarr reads back the input, its dimension names and one shard file."""
    data = random_array((3, 5, 7), dtype)
    zarrwrite.write_whole_array(tmp_path / "a", data, compressor(dtype), ("layer", "query", "key"))
    read = zarr.open_array(str(tmp_path / "a"), mode="r")
    np.testing.assert_array_equal(read[...], data)
    assert read.metadata.dimension_names == ("layer", "query", "key")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["c.0.0.0", "zarr.json"]


def test_group_attributes_and_replacement(tmp_path):
    """write_zarr_group: zarr opens the group with its attributes, its arrays beneath it, and a
    second call replaces the attributes."""
    stream(tmp_path / "g" / "a", random_array((2, 4), "float16"), (1, 4), None)
    zarrwrite.write_zarr_group(tmp_path / "g", {"tokens": ["a", "ü"], "n": 2})
    group = zarr.open_group(str(tmp_path / "g"), mode="r")
    assert dict(group.attrs) == {"tokens": ["a", "ü"], "n": 2}
    assert list(group.array_keys()) == ["a"]
    zarrwrite.write_zarr_group(tmp_path / "g", {"n": 3})
    assert dict(zarr.open_group(str(tmp_path / "g"), mode="r").attrs) == {"n": 3}
