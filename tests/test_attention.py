"""Attention capture into Zarr, word maps, stored metrics, the loader, interrupted writes."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import google_crc32c
import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr
import zarr
from threadpoolctl import threadpool_limits

import attnscope
from attnscope import architecture, attention, capture, choices, metrics, models, promptgroup, prompts, store
from tests.conftest import REPO
from tests.helpers import (
    SPEC,
    assert_derived_from_its_maps,
    clue_table,
    derived_arrays,
    extract,
    float16_steps,
    forward_contributions,
    np_layout,
    np_streamed_metrics,
    prompt_table,
    query_shares,
    reference_differences,
    with_random_gains,
)


def reference_attentions(model, ids) -> np.ndarray:
    """[layer, head, query, key] from transformers' own output_attentions=True."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([list(ids)], device=model.device), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).float().cpu().numpy()


def assert_float16_equal(stored: np.ndarray, reference: np.ndarray) -> None:
    """Equal to float16 precision: within half an ulp of float16 (plus its subnormal step)."""
    np.testing.assert_allclose(stored.astype(np.float32), reference, rtol=2**-11, atol=2**-25)


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_mistral"])
def test_captured_attention_equals_output_attentions(fixture, request, sample_clues, tmp_path):
    model, tokenizer = request.getfixturevalue(fixture)
    table = prompt_table(tokenizer, sample_clues, targets=["Fox"])
    root = zarr.open_group(extract(model, tokenizer, table, tmp_path / "s.zarr"), mode="r")
    attn = root["000"]["attn"][...]
    reference = reference_attentions(model, table["input_ids"][0])
    assert attn.dtype == np.float16 and attn.shape == reference.shape
    assert_float16_equal(attn, reference)
    assert root.attrs["kv_head"] == [
        h // (model.config.num_attention_heads // 2) for h in range(attn.shape[1])
    ]


@pytest.mark.routes
def test_layer_capture_streams_one_layer_at_a_time(tiny_mistral):
    """The sink gets each layer's probabilities of the first sequence, in layer order, as
    output_attentions returns them."""
    model, _ = tiny_mistral
    seen = []
    ids = torch.arange(1, 9)[None]
    with (
        torch.inference_mode(),
        capture.LayerCapture(model, lambda layer, a: seen.append((layer, a.clone()))),
    ):
        model(input_ids=ids)
    assert [layer for layer, _ in seen] == [0, 1]
    reference = reference_attentions(model, ids[0].tolist())
    for layer, weights in seen:
        assert weights.dtype == model.dtype and weights.shape == (4, 8, 8)
        np.testing.assert_array_equal(weights.numpy(), reference[layer])
    with torch.inference_mode():  # the hooks are gone afterwards
        model(input_ids=ids)
    assert len(seen) == 2


def captured(model, ids, kernel: str) -> list[torch.Tensor]:
    """Each layer's probabilities [head, query, key] as the ``kernel`` route captures them."""
    seen = []
    with (
        torch.inference_mode(),
        capture.capture(model, lambda layer, a: seen.append((layer, a.clone())), kernel),
    ):
        model.model(input_ids=torch.as_tensor([list(ids)]), use_cache=False)
    assert [layer for layer, _ in seen] == list(range(model.config.num_hidden_layers))
    return [a for _, a in seen]


def assert_same_to_float16_rounding(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal after the float16 cast the store applies, up to one float16 step."""
    np.testing.assert_allclose(a.half().float().numpy(), b.half().float().numpy(), rtol=2**-10, atol=2**-24)


@pytest.mark.routes
@pytest.mark.parametrize(("fixture", "sliding_window"), [("tiny_llama", None), ("tiny_mistral", 40)])
def test_sdpa_route_equals_eager_attention(fixture, sliding_window, request, sample_clues):
    """Probabilities recomputed beside SDPA equal the eager kernel's (its mask, scaling, GQA)."""
    model, tokenizer = request.getfixturevalue(fixture)
    ids = prompt_table(tokenizer, sample_clues, targets=["Fox"])["input_ids"][0]
    previous = model.config.sliding_window if hasattr(model.config, "sliding_window") else None
    model.config.sliding_window = sliding_window
    try:
        eager, recomputed = captured(model, ids, "eager"), captured(model, ids, "sdpa")
    finally:
        model.config.sliding_window = previous
    assert model.config._attn_implementation == "eager", "the capture restores the implementation"
    torch.testing.assert_close(recomputed[0], eager[0], rtol=0, atol=0)  # same inputs: same bits
    for layer_eager, layer_recomputed in zip(eager, recomputed):
        assert_same_to_float16_rounding(layer_recomputed, layer_eager)
    if sliding_window is not None:
        n = len(ids)
        assert n > sliding_window + 10
        assert float(recomputed[0][:, n - 1, : n - sliding_window].abs().max()) == 0.0


def arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of a store, by its path."""
    members = zarr.open_group(path, mode="r").members(max_depth=None)
    return {name: node[...] for name, node in members if isinstance(node, zarr.Array)}


@pytest.mark.parametrize(
    ("fixture", "sliding_window", "kernel"),
    [
        ("tiny_llama", None, "eager"),
        ("tiny_llama", None, "sdpa"),
        ("tiny_mistral", 40, "eager"),
        ("tiny_mistral", 40, "sdpa"),
    ],
)
@pytest.mark.routes
def test_a_shared_prefix_stores_what_whole_prompts_store(
    fixture, sliding_window, kernel, request, sample_clues, tmp_path
):
    """The prompts' common prefix run once, each prompt run from its end behind the prefix's
    KV cache, against running each prompt whole (both kernels; a sliding window shorter than the
    prefix). A matrix product of the prefix's rows rounds differently from one of the whole
    prompt's, by an amount that depends on the CPU's kernel width, so what holds on every machine
    is: the maps within one float16 step (head means and value-weighted maps, whose steps a key's
    norm can scale, within one step of values ≤ 1), and each route's metrics, singular values,
    choices and word maps exactly those of its own maps — a discontinuous metric (ε-rank, diagonal
    share) is compared through its map, never by a tolerance. The embedding cosine and the
    attributes do not depend on the route: equal."""
    model, tokenizer = request.getfixturevalue(fixture)
    table = prompt_table(tokenizer, sample_clues, targets=["Ant", "Bee"])
    inputs = attention.prompt_inputs(table, tokenizer, clue_table(table, tokenizer), ["bee"])
    previous = model.config.sliding_window if hasattr(model.config, "sliding_window") else None
    model.config.sliding_window = sliding_window
    try:
        shared = attention.shared_prefix(model, inputs, kernel)
        length = len(shared.prefix.ids)
        assert (sliding_window or 0) < length < min(len(p.annotation.input_ids) for p in inputs)
        assert [m.shape[1:] for m in shared.maps] == [(length, length)] * model.config.num_hidden_layers
        stores = {}
        for share in (True, False):
            stores[share] = tmp_path / f"{share}.zarr"
            attention.extract(
                model,
                inputs,
                stores[share],
                {"config_digest": "t"},
                progress=False,
                kernel=kernel,
                share_prefix=share,
            )
    finally:
        model.config.sliding_window = previous
    shared_arrays, whole = arrays(stores[True]), arrays(stores[False])
    assert shared_arrays.keys() == whole.keys() and {"001/attn", "001/value_attn"} <= whole.keys()
    for name in whole:
        if name.endswith("/attn"):
            assert float16_steps(shared_arrays[name], whole[name]).max() <= 1, name
        elif name.endswith(("head_mean", "value_attn")):
            np.testing.assert_allclose(shared_arrays[name], whole[name], rtol=0, atol=2**-10, err_msg=name)
        elif name.endswith("cosine"):
            np.testing.assert_array_equal(shared_arrays[name], whole[name], err_msg=name)
    roots = {share: zarr.open_group(path, mode="r") for share, path in stores.items()}
    for p in inputs:
        assert dict(roots[True][p.group].attrs) == dict(roots[False][p.group].attrs)
        for root in roots.values():
            assert_derived_from_its_maps(root[p.group])


@pytest.mark.routes
def test_the_route_checks_fail_on_maps_built_to_differ(llama_store, tmp_path):
    """The checks above can fail: two float16 steps apart is not one, and a head mean moved by
    one step on a word's diagonal no longer gives its group's stored metrics and word maps."""
    path, _ = llama_store
    attn = zarr.open_group(path, mode="r")["000"]["attn"][...]
    assert float16_steps(attn, attn).max() == 0
    assert float16_steps((attn.view(np.uint16) + 2).view(np.float16), attn).max() == 2
    group = zarr.open_group(shutil.copytree(path, tmp_path / "moved.zarr"), mode="r+")["000"]
    token = list(np.isin(group.attrs["token_word"], group.attrs["map_words"])).index(True)
    head_mean = group["head_mean"][...]
    head_mean[1, token, token] = (head_mean[1, token, token : token + 1].view(np.uint16) + 1).view(
        np.float16
    )[0]
    group["head_mean"][...] = head_mean
    derived = derived_arrays(group)
    for name in ("head_mean", "metrics", "choices", "word_attn_sum", "thesis_word_attn_sum"):
        index, values = derived[name]
        assert not np.array_equal(values, group[name][index], equal_nan=True), name


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_mistral", "tiny_gemma"])
def test_value_weighted_maps_equal_what_each_head_writes(fixture, request, sample_clues, tmp_path):
    """The capture's α · ‖g ⊙ W_O,h v_j‖ (value norms from a v_proj hook, through the Gram matrices
    and the post-attention gain: Gemma 3's) equals, as shares of each query row, the norms of what
    each head adds to the residual in the model's own forward to 1e-5 (GQA, QK-norm, gains and
    biases drawn at random); the stored per-head and head-mean maps are their row shares to
    float16 rounding."""
    model, tokenizer = request.getfixturevalue(fixture)
    model = with_random_gains(model)
    table = prompt_table(tokenizer, sample_clues)
    ids = prompts.prompt_annotation(table.iloc[0].to_dict()).input_ids
    reference = forward_contributions(model, ids)
    computed = captured_value_weighted(model, ids)
    np.testing.assert_allclose(query_shares(computed), query_shares(reference), rtol=1e-5, atol=1e-7)
    if fixture != "tiny_gemma":  # no post-attention norm: the norms themselves
        np.testing.assert_allclose(computed, reference, rtol=1e-5, atol=1e-5 * reference.max())
    path = extract(model, tokenizer, table, tmp_path / "s.zarr", keep_heads="all")
    group = zarr.open_group(path, mode="r")["000"]
    shares = reference / reference.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(group["value_attn"][...].astype(np.float32), shares, atol=2e-3)
    summed = reference.sum(axis=1)
    np.testing.assert_allclose(
        group["value_head_mean"][...].astype(np.float32),
        summed / summed.sum(axis=-1, keepdims=True),
        atol=2e-3,
    )
    rows = group["value_head_mean"][...].astype(np.float64).sum(axis=-1)
    np.testing.assert_allclose(rows, 1.0, atol=2e-2)


def captured_value_weighted(model, ids) -> np.ndarray:
    """[layer, head, query, key] α · the capture's value norms (:class:`attnscope.capture.ValueNorms`)."""
    alpha = torch.from_numpy(reference_attentions(model, ids))
    with torch.inference_mode(), capture.ValueNorms(model) as values:
        model(input_ids=torch.tensor([list(ids)]))
    return np.stack(
        [promptgroup.value_weighted(alpha[layer], values.norms[layer]).numpy() for layer in range(len(alpha))]
    ).astype(np.float64)


def test_value_norms_without_the_post_attention_gain_differ_on_gemma(tiny_gemma, sample_clues, monkeypatch):
    """The form before the gain, ‖W_O,h v_j‖ (Gemma 3 declared without its post-attention norm), is
    not what the heads write: the reference above can fail."""
    model, tokenizer = tiny_gemma
    model = with_random_gains(model)
    ids = prompts.prompt_annotation(prompt_table(tokenizer, sample_clues).iloc[0].to_dict()).input_ids
    reference = query_shares(forward_contributions(model, ids))
    declared = architecture.FAMILIES["gemma3_text"]
    monkeypatch.setitem(
        architecture.FAMILIES, "gemma3_text", dataclasses.replace(declared, post_attention_norm=None)
    )
    without_gain = query_shares(captured_value_weighted(model, ids))
    assert np.abs(without_gain - reference).max() > 100 * 1e-5 * reference.max()


@pytest.mark.routes
def test_without_values_the_weights_are_stored_alone_and_the_same(tiny_llama, sample_clues, tmp_path):
    """``with_values=False`` (the benchmark's comparison): no ``value_*`` array, every other array
    byte-identical to the full extraction's."""
    model, tokenizer = tiny_llama
    inputs = attention.prompt_inputs(prompt_table(tokenizer, sample_clues), tokenizer, keep_heads="all")
    for values in (True, False):
        path = tmp_path / f"{values}.zarr"
        attention.extract(model, inputs, path, {"config_digest": "t"}, progress=False, with_values=values)
    full, weights = arrays(tmp_path / "True.zarr"), arrays(tmp_path / "False.zarr")
    assert any("/value_" in name for name in full) and not any("/value_" in name for name in weights)
    for name, values in weights.items():
        np.testing.assert_array_equal(full[name], values, err_msg=name)


def test_value_weighted_maps_are_not_the_weights(tiny_llama, sample_clues, tmp_path):
    """A case built to differ: with one key's values scaled to zero in every layer (its v_proj
    output zeroed by a hook), that key gets no value-weighted mass while its weights still do."""
    model, tokenizer = tiny_llama
    table = prompt_table(tokenizer, sample_clues)
    key = 5

    def silence(module, args, output):
        output = output.clone()
        output[0, key] = 0
        return output

    modules = architecture.attention_modules(model)
    handles = [module.v_proj.register_forward_hook(silence) for module in modules]
    try:
        path = extract(model, tokenizer, table.iloc[:1], tmp_path / "s.zarr", keep_heads="all")
    finally:
        for handle in handles:
            handle.remove()
    group = zarr.open_group(path, mode="r")["000"]
    assert (group["value_attn"][:, :, key:, key] == 0).all() and (
        group["value_head_mean"][:, key:, key] == 0
    ).all()
    assert (group["attn"][:, :, key + 1 :, key] > 0).all()


def test_recomputed_chunks_give_the_whole_map():
    query, key = torch.randn(1, 4, 37, 16), torch.randn(1, 2, 37, 16)
    whole = capture.recomputed_probabilities(query, key, None, 0.25)
    chunked = capture.recomputed_probabilities(query, key, None, 0.25, chunk_bytes=4 * 4 * 37 * 5)
    torch.testing.assert_close(chunked, whole)  # BLAS blocks rows differently: float32 rounding
    reference = torch.softmax((query[0] @ key[0].repeat_interleave(2, 0).transpose(1, 2)) * 0.25
                              + torch.full((37, 37), float("-inf")).triu(1), dim=-1)  # fmt: skip
    torch.testing.assert_close(whole, reference)


def test_unknown_kernel_names_the_key(tiny_mistral):
    with pytest.raises(ValueError, match="attention.kernel: unknown kernel 'flash'"):
        capture.capture(tiny_mistral[0], lambda layer, a: None, "flash")


def test_sdpa_attention_is_refused(tiny_mistral):
    model, _ = tiny_mistral
    model.config._attn_implementation = "sdpa"
    try:
        with pytest.raises(RuntimeError, match="eager"), torch.inference_mode():
            with capture.LayerCapture(model, lambda layer, a: None):
                model(input_ids=torch.arange(1, 9)[None])
    finally:
        model.config._attn_implementation = "eager"


def test_stored_rows_are_causal_distributions(llama_store):
    path, _ = llama_store
    group = zarr.open_group(path, mode="r")["000"]
    for name in ("attn", "head_mean"):
        maps = group[name][...].astype(np.float64)
        n = maps.shape[-1]
        assert (maps[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0).all(), name
        np.testing.assert_allclose(maps.sum(axis=-1), 1.0, atol=1e-3, err_msg=name)


def test_head_mean_and_cosine_are_what_the_docs_say(llama_store, tiny_llama):
    path, table = llama_store
    group = zarr.open_group(path, mode="r")["000"]
    attn = group["attn"][...]
    expected = attn.mean(axis=1, dtype=np.float32).astype(np.float16)
    np.testing.assert_array_equal(group["head_mean"][...], expected)
    ids = group.attrs["input_ids"]
    cosine = attention.input_cosine(tiny_llama[0], ids).astype(np.float16)
    np.testing.assert_array_equal(group["cosine"][...], cosine)


def inner_chunks(array_dir: Path) -> dict[tuple[int, ...], bytes]:
    """The encoded inner chunks of a one-shard array, by chunk-grid coordinates, read through
    the shard index at the end of the file (its crc32c checked)."""
    array = zarr.open_array(array_dir, mode="r")
    assert array.cdata_shape == tuple(-(-s // c) for s, c in zip(array.shards, array.chunks))  # one shard
    shard = (array_dir / ".".join(["c"] + ["0"] * array.ndim)).read_bytes()
    grid = array.cdata_shape
    size = 16 * int(np.prod(grid))
    index_bytes, crc = shard[-4 - size : -4], shard[-4:]
    assert crc == np.array(google_crc32c.value(index_bytes), dtype="<u4").tobytes()
    index = np.frombuffer(index_bytes, dtype="<u8").reshape(*grid, 2)
    return {
        coords: shard[int(index[coords][0]) : int(index[coords][0] + index[coords][1])]
        for coords in np.ndindex(*grid)
        if index[coords][0] != np.iinfo(np.uint64).max
    }


def assert_shards_are_zarrs(group_dir: Path, name: str, copy_dir: Path) -> None:
    """An array is one shard file whose metadata and encoded inner chunks equal what zarr
    writes for the same values."""
    source = zarr.open_array(group_dir / name, mode="r")
    again = zarr.open_group(copy_dir, mode="a").create_array(
        name,
        shape=source.shape,
        chunks=source.chunks,
        shards=source.shards,
        dtype=source.dtype,
        filters=source.filters,
        compressors=source.compressors,
        fill_value=0,
        chunk_key_encoding=source.metadata.chunk_key_encoding,
        dimension_names=source.metadata.dimension_names,
    )
    again[...] = source[...]
    assert source.metadata == again.metadata, name
    assert sorted(p.name for p in (group_dir / name).iterdir()) == ["c" + ".0" * source.ndim, "zarr.json"]
    ours, zarrs = inner_chunks(group_dir / name), inner_chunks(copy_dir / name)
    assert len(ours) == int(np.prod(source.cdata_shape)), name  # every inner chunk written
    assert ours == zarrs, name


def test_arrays_are_the_shards_zarr_writes(llama_store, tmp_path):
    """Every array of the store (streamed by zarrwrite.ShardWriter or written whole by zarr) equals
    zarr's own encoding of the same data."""
    path, _ = llama_store
    names = sorted(zarr.open_group(path, mode="r")["000"].array_keys())
    assert names == [
        "attn",
        "choices",
        "cosine",
        "head_mean",
        "metrics",
        "singular_values",
        "thesis_word_attn_sum",
        "value_attn",
        "value_choices",
        "value_head_mean",
        "value_metrics",
        "value_word_attn_sum",
        "word_attn_mean_query",
        "word_attn_sum",
    ]
    for name in names:
        assert_shards_are_zarrs(Path(path) / "000", name, tmp_path / "copy.zarr")


def test_attn_chunks_are_layers_until_the_chunk_cap(tiny_llama, sample_clues, tmp_path, monkeypatch):
    """One inner chunk holds a layer's heads; above CHUNK_BYTES fewer heads (the last chunk
    padded), with the same values."""
    model, tokenizer = tiny_llama
    table = prompt_table(tokenizer, sample_clues, targets=["Fox"])

    def attn(name: str) -> zarr.Array:
        return zarr.open_group(extract(model, tokenizer, table, tmp_path / name), mode="r")["000"]["attn"]

    whole = attn("whole.zarr")
    num_layers, num_heads, n, _ = whole.shape
    assert whole.chunks == (1, num_heads, n, n)
    monkeypatch.setattr(promptgroup, "CHUNK_BYTES", 4 * 2 * n * n)  # four float16 heads
    assert num_heads % 4  # so the last chunk of a layer is an edge chunk, padded
    split = attn("split.zarr")
    assert split.chunks == (1, 4, n, n)
    assert split.cdata_shape == (num_layers, -(-num_heads // 4), 1, 1)
    assert_shards_are_zarrs(tmp_path / "split.zarr" / "000", "attn", tmp_path / "copy.zarr")
    np.testing.assert_array_equal(split[...], whole[...])


def test_heads_are_kept_only_for_the_chosen_targets(llama_store):
    path, _ = llama_store
    root = zarr.open_group(path, mode="r")
    assert "attn" in root["000"] and root["000"].attrs["keep_heads"]
    assert "attn" not in root["001"] and not root["001"].attrs["keep_heads"]
    assert {"head_mean", "word_attn_sum", "word_attn_mean_query", "cosine", "metrics"} <= set(root["001"])


def test_word_maps_by_hand():
    a = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    membership = np.array([[1, 0], [1, 0], [0, 0], [0, 1]], dtype=np.float32)  # word 0 = tokens 0, 1
    summed, mean_query = promptgroup.word_maps(a, membership)
    np.testing.assert_allclose(summed, [[1 + 0.5 + 0.5, 0], [0.25 + 0.25, 0.25]])
    np.testing.assert_allclose(mean_query, [[1.0, 0], [0.5, 0.25]])


def test_word_maps_group_each_words_subwords_and_keep_the_mass(llama_store, tiny_llama):
    path, _ = llama_store
    tokenizer = tiny_llama[1]
    group = zarr.open_group(path, mode="r")["000"]
    attrs = group.attrs
    words, tokens, token_word = attrs["words"], attrs["tokens"], np.array(attrs["token_word"])
    map_words = attrs["map_words"]
    assert {"Man's", "semi-aquatic"} <= {words[w] for w in map_words}
    members = {}
    for w in map_words:
        idx = np.flatnonzero(token_word == w)
        members[w] = idx
        assert tokenizer.convert_tokens_to_string([tokens[i] for i in idx]).strip() == words[w]
    multi = [words[w] for w in map_words if len(members[w]) > 1]
    assert "semi-aquatic" in multi  # a word of several subwords is one group
    head_mean = group["head_mean"][...].astype(np.float32)
    summed, mean_query = group["word_attn_sum"][...], group["word_attn_mean_query"][...]
    every = np.concatenate(list(members.values()))
    for layer in range(head_mean.shape[0]):
        # total mass over the plotted words is preserved ...
        expected_total = head_mean[layer][np.ix_(every, every)].sum()
        assert summed[layer].sum() == pytest.approx(expected_total, rel=1e-5)
        # ... and each cell sums exactly its two words' subword pairs
        for i, wq in enumerate(map_words):
            for j, wk in enumerate(map_words[:5]):
                cell = head_mean[layer][np.ix_(members[wq], members[wk])].sum()
                assert summed[layer, i, j] == pytest.approx(cell, rel=1e-5, abs=1e-7)
                assert mean_query[layer, i, j] == pytest.approx(cell / len(members[wq]), rel=1e-5, abs=1e-7)


@pytest.mark.routes
def test_stored_metrics_are_the_metrics_of_the_stored_maps(llama_store):
    """Every array derived from the maps (metrics, singular values, choices, word maps, of the
    weights and of the value-weighted maps) is what the library computes from the stored maps,
    bit for bit."""
    path, _ = llama_store
    group = zarr.open_group(path, mode="r")["000"]
    assert_derived_from_its_maps(group)
    assert not np.allclose(group["value_metrics"][...], group["metrics"][...])
    stored = group["metrics"][...]
    row = dict(zip(metrics.STREAMED, stored[0, -1]))
    assert 0 < row["clue_target_mass"] < 1  # the appended clue attends to the target word
    assert 0 < row["within_shot_mass"] < 1 and 0 < row["across_shot_mass"] < 1


@pytest.mark.routes
def test_stored_metrics_are_the_numpy_routes_within_tolerance(llama_store):
    """The streamed metrics the capture stored for the tiny Llama's maps (both prompts, weights and
    value-weighted maps, kept heads and head means) are the numpy route's, which the torch route
    replaced, within each metric's tolerance (tests/helpers.py: ``REFERENCE_TOLERANCES``)."""
    path, _ = llama_store
    compared = 0
    for group in store.prompt_groups(store.open_store(path)):
        layout = np_layout(group.attrs["token_shot"], group.attrs["token_segment"], group["cosine"][...])
        for prefix in ("", "value_"):
            head_mean = group[f"{prefix}head_mean"][...][:, None]
            heads = group[f"{prefix}attn"][...] if f"{prefix}attn" in group else None
            maps = head_mean if heads is None else np.concatenate([heads, head_mean], axis=1)
            stored = group[f"{prefix}metrics"][...][:, -maps.shape[1] :]
            for layer_maps, layer_metrics in zip(maps, stored, strict=True):
                expected = np_streamed_metrics(layer_maps, layout)
                reference_differences(layer_metrics, expected)
                compared += len(layer_maps)
    assert compared == 2 * 2 * (7 + 1)  # two layers, weights and values: Ant's 6 heads and mean, Bee's mean


def test_metrics_table_rows_and_spectral_ranks(llama_store, tiny_llama):
    path, _ = llama_store
    table = metrics.metrics_table(path, epsilon=0.1)
    num_layers, num_heads = 2, 6
    assert len(table) == 2 * num_layers * (num_heads + 1)
    assert list(table.columns[-len(metrics.METRICS) :]) == list(metrics.METRICS)
    assert sorted(table["head"].unique()) == [-1, *range(num_heads)]
    kept = table["target"] == "Ant"
    assert table.loc[kept, "effective_rank"].notna().all()  # heads stored: spectra of every map
    means = table["head"] == -1
    assert table.loc[~kept & means, "effective_rank"].notna().all()
    assert table.loc[~kept & ~means, "effective_rank"].isna().all()
    head_mean = zarr.open_group(path, mode="r")["001"]["head_mean"][1].astype(np.float64)
    row = table[(table["prompt_index"] == 1) & (table["layer"] == 1) & means].iloc[0]
    assert [row["effective_rank"], row["epsilon_rank"]] == pytest.approx(
        metrics.spectral_ranks(np.linalg.svd(head_mean, compute_uv=False), 0.1)
    )


def gram_singular_values(a: np.ndarray) -> np.ndarray:
    """The rule's former route to a map's singular values: eigenvalues of a·aᵀ in float64."""
    a = a.astype(np.float64)
    return np.sqrt(np.clip(np.linalg.eigvalsh(a @ a.T), 0.0, None))[::-1]


def svd_singular_values(a: np.ndarray) -> np.ndarray:
    """A map's singular values by numpy's SVD in float64 (accurate to ~1e-16·σ₁ for small σ)."""
    return np.linalg.svd(a.astype(np.float64), compute_uv=False)


def _store_pass_ranks(group: zarr.Group, epsilon: float, spectrum) -> list[list[float]]:
    """[effective rank, ε-rank] of every map of a prompt group in the metrics table's order."""
    head_mean = group["head_mean"][...]
    heads = group["attn"][...] if "attn" in group else None
    ranks = []
    for layer in range(head_mean.shape[0]):
        maps = [None] * group["metrics"].shape[1]
        maps[-1] = head_mean[layer]
        if heads is not None:
            maps[:-1] = list(heads[layer])
        for a in maps:
            if a is None:
                ranks.append([np.nan, np.nan])
            else:
                sigma = spectrum(a)
                ranks.append([metrics.effective_rank(sigma), metrics.epsilon_rank(sigma, epsilon)])
    return ranks


def store_pass_tables(
    path: Path, epsilon: float, spectrum=gram_singular_values
) -> tuple[np.ndarray, pd.DataFrame]:
    """Reference, as rule attention_metrics computed it before the capture did: the spectral
    ranks [row of the metrics table, SPECTRAL] (singular values by ``spectrum``) and the
    choices table, both from the maps read back from the store."""
    ranks, frames = [], []
    with threadpool_limits(1, "blas"):  # as the rule ran (one thread; oversubscribed BLAS crawls)
        for group in store.prompt_groups(store.open_store(path)):
            ranks += _store_pass_ranks(group, epsilon, spectrum)
    for group in store.prompt_groups(store.open_store(path)):
        head_mean = group["head_mean"][...]
        attrs = group.attrs
        values, n_queries = choices.prompt_choices(head_mean, attrs["token_segment"], attrs["token_shot"])
        word_sums = choices.word_sum_choices(group)[:, 0]  # from the stored word maps in both routes
        values = np.concatenate([values, word_sums[None, :, 1:]])
        n_queries = np.concatenate([n_queries, word_sums[None, :, 0]])
        for layer in range(head_mean.shape[0]):
            for c, choice in enumerate(choices.TABLE_CHOICES):
                frames.append(
                    {"prompt_index": attrs["prompt_index"], "layer": layer, "choice": choice}
                    | {"n_queries": n_queries[c, layer]}
                    | dict(zip(choices.CHOICE_METRICS, values[c, layer]))
                )
    return np.array(ranks), pd.DataFrame(frames)


@pytest.mark.routes
@pytest.mark.parametrize("k", [2, 3])
def test_capture_metrics_equal_the_store_pass(tiny_llama, sample_clues, tmp_path, k):
    """The tables assembled from the capture's arrays equal what the rule computed from the
    stored maps before (reference above): spectral ranks to 1e-6, choices to 1e-9."""
    model, tokenizer = tiny_llama
    spec = {"category": "Animals", "k": k, "seed": 0}
    table = prompt_table(tokenizer, sample_clues, targets=["Ant", "Bee", "Fox"], spec=spec)
    path = extract(
        model, tokenizer, table, tmp_path / "s.zarr", clue_table(table, tokenizer), ["ant"], head_spectra=True
    )
    epsilon = 0.1
    ranks, reference_choices = store_pass_tables(path, epsilon)
    got = metrics.metrics_table(path, epsilon)
    assert got["keep_heads"].any() and not got["keep_heads"].all()
    np.testing.assert_allclose(got[list(metrics.SPECTRAL)].to_numpy(), ranks, rtol=1e-6, atol=0)
    got_choices = choices.choices_table(path)
    assert tuple(got_choices.columns) == choices.COLUMNS
    for column in ("prompt_index", "layer", "choice", "n_queries"):
        assert got_choices[column].tolist() == reference_choices[column].tolist(), column
    np.testing.assert_allclose(
        got_choices[list(choices.CHOICE_METRICS)].to_numpy(),
        reference_choices[list(choices.CHOICE_METRICS)].to_numpy(),
        rtol=1e-9,
        atol=1e-12,
    )


@pytest.mark.routes
@pytest.mark.integration
def test_embedded_model_capture_metrics_equal_the_store_pass(embedded_model_dir, sample_clues, tmp_path):
    """As above on SmolLM2's 30 layers (k = 3, head means; Ant's heads too). Equal to numpy's
    SVD route to 1e-9; to the former route (eigenvalues of a·aᵀ) to 1e-5: it returns the
    singular values below ~1e-8·σ₁ as square roots of rounding noise, which moves the
    effective rank of near rank-one maps by up to 5.5e-6 (one map of 1200 above 1e-6)."""
    loaded = models.load_model(embedded_model_dir)
    spec = {"category": "Animals", "k": 3, "seed": 0}
    table = prompt_table(loaded.tokenizer, sample_clues, targets=["Ant", "Bee"], spec=spec)
    path = extract(
        loaded.model, loaded.tokenizer, table, tmp_path / "s.zarr", keep_heads=["ant"], head_spectra=True
    )
    ranks, reference_choices = store_pass_tables(path, 0.1)
    got = metrics.metrics_table(path, 0.1)
    np.testing.assert_allclose(got[list(metrics.SPECTRAL)].to_numpy(), ranks, rtol=1e-5, atol=0)
    svd_ranks, _ = store_pass_tables(path, 0.1, svd_singular_values)
    np.testing.assert_allclose(got[list(metrics.SPECTRAL)].to_numpy(), svd_ranks, rtol=1e-9, atol=0)
    got_choices = choices.choices_table(path)
    assert got_choices["n_queries"].tolist() == reference_choices["n_queries"].tolist()
    np.testing.assert_allclose(
        got_choices[list(choices.CHOICE_METRICS)].to_numpy(),
        reference_choices[list(choices.CHOICE_METRICS)].to_numpy(),
        rtol=1e-9,
        atol=1e-12,
    )


@pytest.mark.routes
def test_the_layer_thread_stores_what_the_hooks_store_inline(tiny_llama, sample_clues, monkeypatch, tmp_path):
    """Every file of the store, byte for byte, whether each layer's work runs on the layer thread
    beside the forward pass or inside the hook before the forward pass goes on."""
    model, tokenizer = tiny_llama
    table = prompt_table(tokenizer, sample_clues)
    clues = clue_table(table, tokenizer)
    stores = {}
    for route in ("thread", "inline"):
        if route == "inline":
            monkeypatch.setattr(promptgroup, "LAYER_QUEUE_DEPTH", 0)
        path = extract(model, tokenizer, table, tmp_path / f"{route}.zarr", clues, ["ant"], head_spectra=True)
        stores[route] = {f.relative_to(path): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}
    assert stores["thread"] == stores["inline"]
    assert {"000/attn", "001/metrics", "001/choices"} <= {"/".join(f.parts[:2]) for f in stores["inline"]}


def test_the_layer_queue_runs_in_order_at_most_depth_behind_and_raises_the_first_failure():
    queue, release, done, submitted = promptgroup.LayerQueue(2), threading.Event(), [], []

    def work(i: int) -> None:
        if i == 0:
            release.wait(30)
        done.append((i, torch.is_inference_mode_enabled(), threading.current_thread().name))

    def hook() -> None:
        for i in range(4):
            queue.submit(work, i)
            submitted.append(i)

    caller = threading.Thread(target=hook)
    caller.start()
    deadline = time.monotonic() + 30
    while len(submitted) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert submitted == [0, 1]  # the third waits for the oldest, which waits for the release
    release.set()
    caller.join(30)
    queue.join()
    assert [(i, mode) for i, mode, _ in done] == [(i, True) for i in range(4)]
    assert all(name.startswith("attnscope-layers") for *_, name in done)
    failing = promptgroup.LayerQueue(2)
    failing.submit(lambda: 1 / 0)
    failing.submit(lambda: None)
    with pytest.raises(ZeroDivisionError):
        failing.join()
    inline, names = promptgroup.LayerQueue(0), []
    inline.submit(lambda: names.append((threading.current_thread().name, torch.is_inference_mode_enabled())))
    assert names == [(threading.current_thread().name, True)]  # depth 0: in the hook, no thread


@pytest.mark.routes
def test_choices_in_chunks_of_layers_are_the_same(llama_store, tiny_llama, monkeypatch, tmp_path):
    """One layer at a time (``CHUNK_VALUES`` below one map, as for long prompts): the same
    arrays to float32 summation order (as ``pandas.testing.assert_frame_equal`` checks)."""
    path, table = llama_store
    model, tokenizer = tiny_llama
    monkeypatch.setattr(choices, "CHUNK_VALUES", 1)
    one = extract(model, tokenizer, table, tmp_path / "one.zarr", clue_table(table, tokenizer), ["ant"])
    for group in ("000", "001"):
        together = zarr.open_group(path, mode="r")[group]["choices"][...]
        alone = zarr.open_group(one, mode="r")[group]["choices"][...]
        np.testing.assert_allclose(alone, together, rtol=1e-5, atol=1e-9)


def test_a_finished_stores_snakemake_timestamp_is_not_a_zarr_node(llama_store, tmp_path):
    """Snakemake marks a finished directory output with a hidden ``.snakemake_timestamp``: the
    reader lists no such node (zarr would warn that it is no part of the hierarchy)."""
    path = shutil.copytree(llama_store[0], tmp_path / "done.zarr")
    (path / ".snakemake_timestamp").touch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tree = attnscope.open_attention(path)
    assert sorted(tree.children) == ["000", "001"]
    with pytest.warns(UserWarning, match="snakemake_timestamp"):  # the check can fail: zarr's own listing
        dict(zarr.open_group(path, mode="r").members())


def test_loader_coordinates_match_the_prompt_table(llama_store):
    path, table = llama_store
    tree = attnscope.open_attention(path)
    assert isinstance(tree, xr.DataTree)
    assert [p["target"] for p in tree.attrs["prompts"]] == ["Ant", "Bee"]
    for row in table.to_dict("records"):
        ds = tree[f"{row['prompt_index']:03d}"].to_dataset()
        n = row["n_tokens"]
        assert ds.attrs["prompt_id"] == row["prompt_id"]
        for side in ("query", "key"):
            assert list(ds[f"{side}_token"].values[:n]) == list(row["tokens"])
            assert list(ds[f"{side}_segment"].values[:n]) == list(row["token_segment"])
            assert list(ds[f"{side}_shot"].values[:n]) == list(row["token_shot"])
            assert list(ds[f"{side}_token_word"].values[:n]) == list(row["token_word"])
        assert "generated" in set(ds["query_segment"].values[n:])
        words = [w for w, s in zip(row["words"], row["word_segment"]) if s in store.WORD_SEGMENTS]
        assert list(ds["query_word_text"].values[: len(words)]) == words
        assert ds["head_mean"].dims == ("layer", "query", "key")
        assert ds["word_attn_sum"].dims == ("layer", "query_word", "key_word")
        assert list(ds["metric"].values) == list(metrics.STREAMED)
        assert ds["choices"].dims == ("layer", "choice", "choice_metric")
        assert list(ds["choice"].values) == list(choices.CHOICES)
        assert ds["singular_values"].dims == ("layer", "map", "singular_value")
        assert not ds["head_mean"].variable._in_memory  # read from disk only when indexed
    ant = tree["000"].to_dataset()
    assert ant["attn"].dims == ("layer", "head", "query", "key")
    assert list(ant["kv_head"].values) == [0, 0, 0, 1, 1, 1]
    one = ant["attn"].sel(layer=1, head=2).where(ant["query_segment"] == "target", drop=True)
    assert one.shape == (1, ant.sizes["key"])


SLOW_EXTRACT = textwrap.dedent(
    """
    import sys, time
    import pandas as pd
    from attnscope import attention, models, promptgroup

    model_dir, table_path, store = sys.argv[1:]
    loaded = models.load_model(model_dir)
    inputs = attention.prompt_inputs(pd.read_parquet(table_path), loaded.tokenizer)
    finish = promptgroup.PromptGroup.finish

    def slow_finish(self):  # make the kill land mid-run
        finish(self)
        time.sleep(0.5)

    promptgroup.PromptGroup.finish = slow_finish
    attention.extract(loaded.model, inputs, store, {"config_digest": "test"}, progress=False)
    """
)


def completed_groups(partial: Path) -> int:
    done = 0
    for meta in partial.glob("*/zarr.json"):
        try:
            done += bool(json.loads(meta.read_text())["attributes"].get("complete"))
        except (OSError, ValueError, KeyError):
            pass
    return done


@pytest.mark.integration  # a fresh interpreter and three extractions; the unit form: the test below
def test_killed_write_leaves_no_store_and_a_rerun_completes_it(prepared_tiny_mistral, sample_clues, tmp_path):
    loaded = models.load_model(prepared_tiny_mistral)
    table = prompt_table(loaded.tokenizer, sample_clues, targets=["Ant", "Bee", "Fox", "Raven", "Dog"])
    table.to_parquet(tmp_path / "prompts.parquet")
    store = tmp_path / "out" / "animals-k3.zarr"
    partial = attention.partial_path(store)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    script = [
        sys.executable,
        "-c",
        SLOW_EXTRACT,
        str(prepared_tiny_mistral),
        str(tmp_path / "prompts.parquet"),
    ]
    process = subprocess.Popen([*script, str(store)], env=env)
    try:
        deadline = time.monotonic() + 120
        while completed_groups(partial) < 2:
            assert process.poll() is None, "the extraction ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait()
    assert not store.exists(), "a killed job left a finished-looking store"
    assert partial.is_dir() and completed_groups(partial) < len(table)

    inputs = attention.prompt_inputs(table, loaded.tokenizer)
    counts = attention.extract(loaded.model, inputs, store, {"config_digest": "test"}, progress=False)
    assert counts["resumed"] >= 2 and counts["computed"] == len(table) - counts["resumed"]
    assert store.is_dir() and not partial.exists()
    fresh = extract(loaded.model, loaded.tokenizer, table, tmp_path / "fresh.zarr")
    resumed, reference = zarr.open_group(store, mode="r"), zarr.open_group(fresh, mode="r")
    for name in reference.group_keys():
        assert resumed[name].attrs["complete"]
        for array in reference[name].array_keys():
            np.testing.assert_array_equal(resumed[name][array][...], reference[name][array][...])


def test_an_unfinished_prompt_directory_is_rewritten(tiny_mistral, sample_clues, tmp_path):
    """A prompt directory without its group zarr.json (a job killed mid-prompt) is not a
    finished group: the rerun deletes it, stale files included, and computes the prompt again."""
    model, tokenizer = tiny_mistral
    table = prompt_table(tokenizer, sample_clues)
    fresh = extract(model, tokenizer, table, tmp_path / "fresh.zarr")
    store = tmp_path / "s.zarr"
    partial = attention.partial_path(store)
    shutil.copytree(fresh, partial)
    (partial / "001" / "zarr.json").unlink()
    shard = partial / "001" / "head_mean" / "c.0.0.0"
    shard.write_bytes(shard.read_bytes()[:100])  # cut off mid-write
    (partial / "001" / "stale").mkdir()
    inputs = attention.prompt_inputs(table, tokenizer)
    counts = attention.extract(model, inputs, store, {"config_digest": "test"}, progress=False)
    assert counts == {"computed": 1, "resumed": 1}
    assert not (store / "001" / "stale").exists()
    resumed, reference = zarr.open_group(store, mode="r"), zarr.open_group(fresh, mode="r")
    for name in ("000", "001"):
        assert resumed[name].attrs.asdict() == reference[name].attrs.asdict()
        assert sorted(resumed[name].array_keys()) == sorted(reference[name].array_keys())
        for array in reference[name].array_keys():
            np.testing.assert_array_equal(resumed[name][array][...], reference[name][array][...])


def test_a_partial_store_of_another_config_is_discarded(tiny_mistral, sample_clues, tmp_path):
    model, tokenizer = tiny_mistral
    table = prompt_table(tokenizer, sample_clues, targets=["Ant"])
    store = tmp_path / "s.zarr"
    partial = attention.partial_path(store)
    zarr.open_group(partial, mode="w", attributes={"config_digest": "old"}).create_group("000")
    counts = attention.extract(
        model, attention.prompt_inputs(table, tokenizer), store, {"config_digest": "new"}
    )
    assert counts == {"computed": 1, "resumed": 0}
    assert zarr.open_group(store, mode="r").attrs["config_digest"] == "new"


def test_clue_table_must_match_the_prompts(tiny_mistral, sample_clues):
    _, tokenizer = tiny_mistral
    table = prompt_table(tokenizer, sample_clues)
    clues = clue_table(table, tokenizer).assign(prompt_id="other/000")
    with pytest.raises(ValueError, match="clue table"):
        attention.prompt_inputs(table, tokenizer, clues)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_capture_on_cuda_matches_the_cpu(tiny_llama, sample_clues, tmp_path):
    model, tokenizer = tiny_llama
    table = prompt_table(tokenizer, sample_clues, targets=["Ant"])
    cpu = zarr.open_group(extract(model, tokenizer, table, tmp_path / "cpu.zarr"), mode="r")["000"]
    try:
        model.to("cuda")
        gpu = zarr.open_group(extract(model, tokenizer, table, tmp_path / "gpu.zarr"), mode="r")["000"]
    finally:
        model.to("cpu")
    np.testing.assert_allclose(
        gpu["attn"][...].astype(np.float32), cpu["attn"][...].astype(np.float32), atol=2e-3
    )
    np.testing.assert_allclose(gpu["metrics"][...], cpu["metrics"][...], rtol=1e-2, atol=1e-2)


@pytest.mark.routes
@pytest.mark.integration
@pytest.mark.parametrize("k", [3, 8])
def test_embedded_model_sdpa_route_equals_eager(embedded_model_dir, sample_clues, tmp_path, k):
    """The stores of both capture routes agree to float16 rounding (30 layers of SmolLM2)."""
    loaded = models.load_model(embedded_model_dir)
    spec = {"category": "Animals", "k": k, "seed": 0}
    table = prompt_table(loaded.tokenizer, sample_clues, targets=["Ant"], spec=spec)
    inputs = attention.prompt_inputs(table, loaded.tokenizer, None, "all")
    stores = {}
    for kernel in capture.KERNELS:
        stores[kernel] = tmp_path / f"{kernel}.zarr"
        attention.extract(
            loaded.model, inputs, stores[kernel], {"config_digest": "t"}, progress=False, kernel=kernel
        )
    eager, sdpa = (zarr.open_group(stores[k], mode="r")["000"] for k in capture.KERNELS)
    for name in ("attn", "head_mean"):
        np.testing.assert_allclose(
            sdpa[name][...].astype(np.float32), eager[name][...].astype(np.float32), rtol=2**-9, atol=2**-20
        )
    np.testing.assert_allclose(sdpa["metrics"][...], eager["metrics"][...], rtol=1e-3, atol=1e-4)
    assert loaded.model.config._attn_implementation == "eager"


@pytest.mark.routes
@pytest.mark.integration
@pytest.mark.parametrize("k", [3, 8])
def test_embedded_model_shared_prefix_stores_what_whole_prompts_store(
    embedded_model_dir, sample_clues, tmp_path, k
):
    """On SmolLM2 (30 layers), k = 3 and 8, what the test above checks on the tiny models: the
    heads' maps within one float16 step of running each prompt whole, their means and the
    value-weighted maps within one step of values ≤ 1, each route's derived arrays exactly those
    of its own maps; and the prefix rows identical in every prompt (the whole route's own prefix
    rows differ by rounding)."""
    loaded = models.load_model(embedded_model_dir)
    spec = {"category": "Animals", "k": k, "seed": 0}
    table = prompt_table(loaded.tokenizer, sample_clues, targets=["Ant", "Bee", "Fox"], spec=spec)
    inputs = attention.prompt_inputs(table, loaded.tokenizer, clue_table(table, loaded.tokenizer), ["ant"])
    length = len(attention.shared_prefix(loaded.model, inputs, "eager").prefix.ids)
    assert length > 50
    stores = {share: tmp_path / f"{share}.zarr" for share in (True, False)}
    for share, path in stores.items():
        attention.extract(
            loaded.model, inputs, path, {"config_digest": "t"}, progress=False, share_prefix=share
        )
    shared, whole = arrays(stores[True]), arrays(stores[False])
    assert shared.keys() == whole.keys() and "000/attn" in whole
    for name, values in whole.items():
        if name.endswith("/attn"):
            assert float16_steps(shared[name], values).max() <= 1, name
        elif name.endswith(("head_mean", "value_attn")):  # one step of values ≤ 1
            np.testing.assert_allclose(shared[name], values, rtol=0, atol=2**-10, err_msg=name)
        elif name.endswith("cosine"):
            np.testing.assert_array_equal(shared[name], values, err_msg=name)
    roots = [zarr.open_group(path, mode="r") for path in stores.values()]
    for root in roots:
        for p in inputs:
            assert_derived_from_its_maps(root[p.group])
    prefix_rows = [shared[f"{p.group}/head_mean"][:, :length, :length] for p in inputs]
    assert all(np.array_equal(rows, prefix_rows[0]) for rows in prefix_rows)


@pytest.mark.integration
def test_embedded_model_capture_equals_output_attentions(embedded_model_dir, sample_clues, tmp_path):
    loaded = models.load_model(embedded_model_dir)
    spec = {"category": "Animals", "k": 2, "seed": 0}
    table = prompt_table(loaded.tokenizer, sample_clues, targets=["Ant"], spec=spec)
    path = extract(loaded.model, loaded.tokenizer, table, tmp_path / "smollm2.zarr")
    root = zarr.open_group(path, mode="r")
    attn = root["000"]["attn"][...]
    assert attn.shape[:2] == (30, 9) and root.attrs["kv_head"] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert_float16_equal(attn, reference_attentions(loaded.model, table["input_ids"][0]))
    np.testing.assert_allclose(attn.astype(np.float64).sum(axis=-1), 1.0, atol=1e-3)
    stored = root["000"]["metrics"][...]
    assert np.isfinite(stored[..., : metrics.STREAMED.index("clue_target_mass")]).all()


def test_thesis_word_maps_are_the_notebooks_aggregation(tiny_mistral, sample_clues, tmp_path):
    """The stored thesis word map equals the notebook's aggregation (sum over each word pair's
    token ranges, written in tests/helpers.py) of the stored head-mean map."""
    from attnscope.prepared import CHAT_TEMPLATES
    from tests.helpers import NOTEBOOK_FORMAT, notebook_groups, notebook_selection

    model, tokenizer = tiny_mistral
    thesis = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    thesis.chat_template = CHAT_TEMPLATES["mistral-thesis"]
    table = prompts.build_prompts(sample_clues, "animals-k3", SPEC, ["Ant"], thesis, NOTEBOOK_FORMAT)
    root = zarr.open_group(
        extract(model, thesis, table, tmp_path / "s.zarr", clue_table(table, thesis)), mode="r"
    )
    group = root["000"]
    tokens, words = group.attrs["tokens"], group.attrs["thesis_words"]
    n_prompt = group.attrs["n_prompt_tokens"]
    groups = notebook_groups(tokens[:n_prompt], notebook_selection(tokens[:n_prompt]), words)
    assert len(groups) == len(words) > 10
    head_mean = group["head_mean"][...].astype(np.float32)
    reference = np.array(
        [[[a[g[0] : g[-1] + 1, h[0] : h[-1] + 1].sum() for h in groups] for g in groups] for a in head_mean]
    )
    np.testing.assert_allclose(group["thesis_word_attn_sum"][...], reference, rtol=1e-6, atol=1e-7)
    tree = attention.open_attention(tmp_path / "s.zarr")
    assert list(tree["000"].query_thesis_word_text.values) == words


# --- Only what is read (issue 40, item 4): the kept heads' singular values on request.


def test_kept_heads_spectra_only_with_head_spectra(tiny_llama, sample_clues, tmp_path):
    """By default (``attention.head_spectra: false``) the kept heads' singular values are NaN, so
    are their rows' spectral ranks in the metrics table; every other array, the head means'
    singular values included, equals a store that computed them."""
    model, tokenizer = tiny_llama
    table = prompt_table(tokenizer, sample_clues, targets=["Ant", "Bee"])
    paths = {
        spectra: extract(
            model, tokenizer, table, tmp_path / f"{spectra}.zarr", keep_heads=["ant"], head_spectra=spectra
        )
        for spectra in (False, True)
    }
    default, full = (zarr.open_group(paths[s], mode="r") for s in (False, True))
    for name in full.group_keys():
        for array in full[name].array_keys():
            if array != "singular_values":
                np.testing.assert_array_equal(
                    default[name][array][...], full[name][array][...], err_msg=array
                )
        sigma, full_sigma = default[name]["singular_values"][...], full[name]["singular_values"][...]
        np.testing.assert_array_equal(sigma[:, -1], full_sigma[:, -1])
        assert np.isnan(sigma[:, :-1]).all()
    assert not np.isnan(full["000"]["singular_values"][...]).any()  # Ant keeps its heads
    rows = metrics.metrics_table(paths[False])
    heads = rows["head"] >= 0
    assert rows.loc[heads, list(metrics.SPECTRAL)].isna().all().all()
    assert rows.loc[~heads, list(metrics.SPECTRAL)].notna().all().all()
