"""What several test files share, in one place (no test file imports another): builders of
prompts, stores and maps with known answers, an attention store's arrays recomputed from its own
maps and float16 steps between maps, the explorer's server and page, and for the tests that run
the workflow a tiny config, a Snakemake run in a directory and the jobs a run plans."""

from __future__ import annotations

import copy
import http.client
import json
import os
import re
import subprocess
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import google_crc32c
import numpy as np
import pandas as pd
import pytest
import torch
import yaml
import zarr
from scipy.stats import rankdata
from threadpoolctl import threadpool_limits
from zarr.codecs import BloscCodec

from attnscope import architecture, attention, choices, chunks, metrics, promptgroup, prompts, store, streamed
from attnscope.explorer import StoreReader, make_server
from tests.conftest import REPO, read_yaml, snakemake_command, workflow_config

# --- what each head writes, from the model's own forward ---


POST_ATTENTION_NORMS = {
    "gemma3_text": "post_attention_layernorm",
    "gemma2": "post_attention_layernorm",
    "olmo2": "post_attention_layernorm",
}
"""The block's module that normalises the attention output before the residual, per ``model_type``, as
transformers' modelling code reads (the reference's own record, not the declaration under test)."""


def with_random_gains(model, seed: int = 0):
    """A copy of ``model`` whose norm weights and biases are drawn N(0, 0.5): random init leaves
    gains at one and biases at zero, which would hide a gain or bias left out."""
    edited = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in edited.named_parameters():
            if "norm" in name or ".ln" in name or name.endswith(".bias"):
                parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    return edited


def forward_contributions(model, ids) -> np.ndarray:
    """[layer, head, query, key] ‖what head h adds to query i's residual for key j‖ in float64, all
    from the model's own forward: α and the value states [kv_head, key, d] as its eager attention
    function receives and returns them (a wrapper of its modelling module's
    ``eager_attention_forward``), W_O,h v as the output projection's own forward of v in head h's
    slot (its bias subtracted), times the post-attention norm's output / input where the model has
    one (:data:`POST_ATTENTION_NORMS`: g / rms of the row, so there only row shares compare)."""
    import sys

    modelling = sys.modules[type(model).__module__]
    original = modelling.eager_attention_forward
    records: dict[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}

    def recording(module, query, key, value, *args, **kwargs):
        output, weights = original(module, query, key, value, *args, **kwargs)
        records[module] = value[0].double(), weights[0].double()
        return output, weights

    decoder = architecture.family(model.config)
    blocks = architecture.decoder_layers(model)
    attention_modules = architecture.attention_modules(model)
    o_modules = [decoder.projection(m, "o") for m in attention_modules]
    o_inputs: dict[int, torch.Tensor] = {}
    ratios: dict[int, torch.Tensor] = {}
    handles = [
        o.register_forward_pre_hook(lambda m, args, layer=i: o_inputs.__setitem__(layer, args[0][0].double()))
        for i, o in enumerate(o_modules)
    ]
    post = POST_ATTENTION_NORMS.get(model.config.model_type)
    if post is not None:
        handles += [
            getattr(block, post).register_forward_hook(
                lambda m, args, out, layer=i: ratios.__setitem__(layer, out[0].double() / args[0][0].double())
            )
            for i, block in enumerate(blocks)
        ]
    modelling.eager_attention_forward = recording
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([list(ids)]), output_attentions=True)
    finally:
        modelling.eager_attention_forward = original
        for handle in handles:
            handle.remove()
    out = []
    for layer, (module, o) in enumerate(zip(attention_modules, o_modules, strict=True)):
        values, alpha = records[module]
        num_heads, (num_kv, num_keys, head_dim) = alpha.shape[0], values.shape
        v = values[torch.arange(num_heads) // (num_heads // num_kv)]  # [head, key, d]
        mixed = (alpha @ v).transpose(0, 1).reshape(alpha.shape[1], -1)  # what o reads [query, head·d]
        torch.testing.assert_close(mixed, o_inputs[layer], rtol=1e-5, atol=1e-6)
        slots = torch.zeros(num_heads, num_keys, num_heads * head_dim, dtype=torch.float64)
        for head in range(num_heads):
            slots[head, :, head * head_dim : (head + 1) * head_dim] = v[head]
        o64 = copy.deepcopy(o).double()
        with torch.inference_mode():
            written = o64(slots) - o64(torch.zeros(num_heads * head_dim, dtype=torch.float64))
        vectors = alpha[..., None] * written[:, None]  # [head, query, key, hidden]
        if post is not None:
            vectors = vectors * ratios[layer][None, :, None, :]
        out.append(vectors.norm(dim=-1).numpy())
    return np.stack(out)


def query_shares(maps: np.ndarray) -> np.ndarray:
    """[layer, head, query, key] maps as shares of each (layer, query) over heads and keys: a
    factor common to a query row (a post-attention norm's 1/rms) cancels."""
    return maps / maps.sum(axis=(1, 3), keepdims=True)


# --- prompts, clue tables and attention stores of the tiny models ---


CLUE = "Man's best friend, semi-aquatic.#"


SPEC = {"category": "Animals", "k": 3, "seed": 0}


def prompt_table(tokenizer, clues, targets=("Ant", "Bee"), spec=SPEC) -> pd.DataFrame:
    return prompts.build_prompts(clues, "animals-k3", spec, list(targets), tokenizer)


def clue_table(table: pd.DataFrame, tokenizer, text: str = CLUE) -> pd.DataFrame:
    """A clue table as generate_clues writes it, every prompt 'generating' ``text`` and EOS."""
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return pd.DataFrame(
        {
            "prompt_index": table["prompt_index"],
            "prompt_id": table["prompt_id"],
            "clue": text.split("#")[0],
            "generated_ids": [ids] * len(table),
        }
    )


def extract(
    model, tokenizer, table, path, clues=None, keep_heads="all", digest="test", head_spectra=False
) -> Path:
    """A store of ``table``'s prompts; with ``head_spectra`` the kept heads' singular values too."""
    inputs = attention.prompt_inputs(table, tokenizer, clues, keep_heads)
    attention.extract(
        model, inputs, path, {"config_digest": digest}, progress=False, head_spectra=head_spectra
    )
    return Path(path)


# The thesis notebook's selection and grouping, re-implemented here from its description
# (attention_maps_llm/language_generation_attention_patterns.ipynb), on token strings.
NOTEBOOK_FORMAT = prompts.PromptFormat(acknowledgement="Ok!")  # the notebook's acknowledgement


def notebook_selection(tokens: list[str]) -> list[int]:
    """Once the acknowledgement token "Ok" has passed, a token is drawn while a ":" or "]"
    came after the last "▁[", "#" or "</s>"; ":" and "]" themselves are never drawn."""
    drawn, after_ok, open_ = [], False, False
    for i, token in enumerate(tokens):
        if token == "Ok":
            after_ok, open_ = True, False
        if token in (":", "]"):
            open_ = True
        elif token in ("▁[", "#", "</s>"):
            open_ = False
        elif after_ok and open_:
            drawn.append(i)
    return drawn


def notebook_groups(tokens: list[str], drawn: list[int], words: list[str]) -> list[list[int]]:
    """Drawn tokens (leading "▁" removed) spell the words in order; a token that is not the
    next piece of the current word (",", "-") joins no word."""
    groups, current, word, at = [], [], 0, 0
    for i in drawn:
        piece = tokens[i].removeprefix("▁")
        if word < len(words) and piece == words[word][at : at + len(piece)]:
            current.append(i)
            at += len(piece)
            if at == len(words[word]):
                groups.append(current)
                current, word, at = [], word + 1, 0
    return groups


# --- attention maps and prompt layouts built to have known answers ---


def uniform_causal(n: int) -> np.ndarray:
    """Row i attends uniformly to keys 0..i."""
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def random_causal(rng: np.random.Generator, n: int, scale: float = 3.0) -> np.ndarray:
    """A causal softmax map of random logits, rounded to float16 (so with ties and zeros)."""
    logits = scale * rng.standard_normal((n, n)) + np.triu(np.full((n, n), -np.inf), 1)
    a = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (a / a.sum(axis=1, keepdims=True)).astype(np.float16)


def k3_labels() -> tuple[list[str], np.ndarray]:
    """Token segments and shots laid out like a k = 3 prompt: template, instruction, three
    shots ("Word:" label, word, chat markers, clue, "#", chat markers), target, clue."""
    segment, shot = ["template"] * 5 + ["instruction"] * 8, [0] * 13
    for s in (1, 2, 3):
        for seg, sh, count in [
            ("template", s, 2),
            ("shot_word", s, 2),
            ("template", 0, 3),
            ("shot_clue", s, 5),
            ("template", s, 1),
            ("template", 0, 3),
        ]:
            segment += [seg] * count
            shot += [sh] * count
    for seg, count in [("target", 1), ("template", 3), ("generated", 4)]:
        segment += [seg] * count
        shot += [0] * count
    return segment, np.array(shot)


def shot_labels(clue_lengths: tuple[int, ...] = (16, 25, 18, 30)) -> tuple[list[str], np.ndarray]:
    """Token segments and shots of a prompt with one shot per clue length, laid out like a chat
    prompt (template, instruction; per shot: chat markers, "Word:" label, word, markers, clue,
    "#", markers; target, generated clue). Clues this long and this varied put own- and
    other-shot keys of the same segments at equal distances, so the boundary drop is defined."""
    segment, shot = ["template"] * 5 + ["instruction"] * 20 + ["template"] * 4, [0] * 29
    for s, clue in enumerate(clue_lengths, start=1):
        for seg, sh, count in [
            ("template", 0, 3),
            ("template", s, 2),
            ("shot_word", s, 1 + s % 2),
            ("template", 0, 5),
            ("shot_clue", s, clue),
            ("template", s, 1),
            ("template", 0, 2),
        ]:
            segment += [seg] * count
            shot += [sh] * count
    for seg, count in [("template", 5), ("target", 2), ("template", 5), ("generated", 8)]:
        segment += [seg] * count
        shot += [0] * count
    return segment, np.array(shot)


def row_stochastic(weights: np.ndarray) -> np.ndarray:
    """Causal rows of ``weights`` normalised to sum 1."""
    w = np.tril(weights)
    return w / w.sum(axis=1, keepdims=True)


def locality(n: int, tau: float | np.ndarray) -> np.ndarray:
    """Weights exp(−(i − j)/τ) of every query i and key j ≤ i; ``tau`` one scale or one per query."""
    distance = np.arange(n)[:, None] - np.arange(n)[None, :]
    return np.exp(-np.clip(distance, 0, None) / np.reshape(tau, (-1, 1)))


def segment_positions(segment: list[str]) -> np.ndarray:
    """Each token's place in its run of one segment (0 for the run's first token)."""
    starts = np.flatnonzero(np.r_[True, np.asarray(segment[1:]) != np.asarray(segment[:-1])])
    return (
        np.arange(len(segment)) - starts[np.searchsorted(starts, np.arange(len(segment)), side="right") - 1]
    )


def shot_maps(
    segment: list[str], shot: np.ndarray, weights: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Maps built to have, or to lack, attention within shots on top of a decay with distance
    (``weights``; default exp(−distance/8)): the decay alone; across-shot keys × 0.2 (a real
    boundary); every shot word × 3, whichever shot it is in (a shot-blind segment preference);
    across-shot keys × 5 (attention mostly across shots)."""
    weights = locality(len(segment), tau=8.0) if weights is None else weights
    across = (shot[:, None] >= 1) & (shot[None, :] >= 1) & (shot[:, None] != shot[None, :])
    word = np.array(segment) == "shot_word"
    return {
        name: row_stochastic(w)
        for name, w in {
            "locality": weights,
            "boundary": np.where(across, 0.2 * weights, weights),
            "shot words": weights * np.where(word[None, :], 3.0, 1.0),
            "across": np.where(across, 5.0 * weights, weights),
        }.items()
    }


def noisy_shot_maps(name: str, labels=shot_labels, tau=None, layers: int = 3):
    """One of :func:`shot_maps` on the token ``labels``, ``layers`` layers per prompt, each with its
    own multiplicative noise, so that intervals have a width; ``tau(segment, rng)`` gives each
    query's decay scale, drawn per prompt (default: 8 for every query)."""
    segment, shot = labels()

    def maps(rng: np.random.Generator) -> np.ndarray:
        weights = locality(len(segment), 8.0 if tau is None else tau(segment, rng))
        base = shot_maps(segment, shot, weights)[name]
        return np.stack([row_stochastic(base * rng.lognormal(0, 0.3, base.shape)) for _ in range(layers)])

    return maps


def map_choices(
    maps_of_prompt,
    prompts: int = 12,
    variant: str = "trained",
    labels=k3_labels,
    seeds: tuple[int, ...] = (0,),
) -> pd.DataFrame:
    """The choices table of synthetic maps: ``maps_of_prompt(rng)`` gives one prompt's maps
    [layer, query, key] on the token ``labels`` (:func:`k3_labels`, :func:`shot_labels`), for
    ``prompts`` targets under each shot draw of ``seeds``."""
    segment, shot = labels()
    rng = np.random.default_rng(0)
    rows = []
    for seed in seeds:
        experiment = "animals-k3" if seed == seeds[0] else f"animals-k3-seed{seed}"
        for prompt in range(prompts):
            values, n_queries = choices.prompt_choices(maps_of_prompt(rng), segment, shot)
            for c, choice in enumerate(choices.CHOICES):
                for layer, row in enumerate(values[c]):
                    rows.append(
                        {"variant": variant, "experiment": experiment, "seed": seed, "prompt_index": prompt,
                         "target": f"t{prompt}", "layer": layer, "choice": choice,
                         "n_queries": n_queries[c, layer], **dict(zip(choices.CHOICE_METRICS, row))}
                    )  # fmt: skip
    return pd.DataFrame(rows)


# --- the streamed metrics in numpy, as the library computed them before torch (the reference) ---
#
# attnscope.streamed's metrics were computed in numpy until they moved to torch: float16 maps read
# through lookup tables of their 65 536 bit patterns (value, x·log x in float32), float32 sums (BLAS's
# matrix products) for the shot masses and the power iteration, float64 for the row sums of the
# entropies, the means and the correlations (one pass: Σx² − (Σx)²/m), average ranks from a
# histogram of the bit patterns. Kept here verbatim as the reference the torch route is tested against.

_NP_F16_VALUE = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
with np.errstate(invalid="ignore", divide="ignore"):
    _NP_F16_XLOGX = np.where(_NP_F16_VALUE > 0, _NP_F16_VALUE * np.log(_NP_F16_VALUE), np.float32(0)).astype(
        np.float32
    )


def np_as_float32(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.float16:
        return np.take(_NP_F16_VALUE, a.view(np.uint16))
    return a.astype(np.float32, copy=False)


def np_xlogx(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.float16:
        return np.take(_NP_F16_XLOGX, a.view(np.uint16))
    a = a.astype(np.float64, copy=False)
    return a * np.log(np.where(a > 0, a, 1.0))


def np_row_entropy(maps: np.ndarray) -> np.ndarray:
    maps = np.asarray(maps)
    if maps.shape[-1] < 2:
        return np.full(len(maps), np.nan)
    entropy = -np_xlogx(maps[:, 1:]).sum(axis=2, dtype=np.float64)
    return np.mean(entropy / np.log(np.arange(2, maps.shape[-1] + 1)), axis=1)


def _np_row_mean(values: np.ndarray) -> np.ndarray:
    if not values.shape[1]:
        return np.full(len(values), np.nan)
    return np.mean(np_as_float32(values), axis=1, dtype=np.float64)


def np_shot_masses(maps: np.ndarray, token_shot) -> tuple[np.ndarray, np.ndarray]:
    shot = np.asarray(token_shot)
    queries = np.flatnonzero(shot >= 2)
    if not len(queries):
        return np.full(len(maps), np.nan), np.full(len(maps), np.nan)
    one_hot = (shot[:, None] == np.arange(shot.max() + 1)).astype(np.float32)
    mass = (np_as_float32(np.take(maps, queries, axis=1)) @ one_hot).astype(np.float64)  # [map, query, shot]
    within = np.take_along_axis(mass, shot[queries][None, :, None], axis=2)[:, :, 0]
    across = mass[:, :, 1:].sum(axis=2) - within
    return within.mean(axis=1), across.mean(axis=1)


def np_block_mass(maps: np.ndarray, queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if not len(queries) or not len(keys):
        return np.full(len(maps), np.nan)
    block = np_as_float32(np.take(np.take(maps, queries, axis=1), keys, axis=2))  # [map, query, key]
    return block.sum(axis=2, dtype=np.float64).mean(axis=1)


def np_average_ranks(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values)
    codes = values.view(np.uint16) if values.dtype == np.float16 else None
    if codes is None or (codes >= 0x7C00).any():
        return rankdata(values, axis=1)
    bins = int(codes.max()) + 1
    row_codes = codes + np.arange(0, len(codes) * bins, bins)[:, None]
    counts = np.bincount(row_codes.ravel(), minlength=len(codes) * bins)
    below = np.cumsum(counts.reshape(len(codes), bins), axis=1).ravel() - counts
    return np.take(below + (counts + 1) / 2.0, row_codes)


def _np_row_dots(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x[:, None, :] @ y[..., None])[:, 0, 0]


def _np_unit_centered(values: np.ndarray) -> np.ndarray | None:
    centered = np.asarray(values, dtype=np.float64) - np.mean(values, dtype=np.float64)
    norm = np.linalg.norm(centered)
    return centered / norm if norm > 0 else None


def np_correlation(x: np.ndarray, y_unit: np.ndarray | None) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float64)
    if y_unit is None:
        return np.full(len(x), np.nan)
    squares = _np_row_dots(x, x)
    sums = np.array([total**2 for total in x.sum(axis=1).tolist()])
    spread = squares - sums / x.shape[1]
    flat = spread <= 1e-12 * squares
    r = _np_row_dots(x, y_unit) / np.sqrt(np.where(flat, 1.0, spread))
    return np.where(flat, np.nan, np.clip(r, -1.0, 1.0))


def np_stable_rank(maps: np.ndarray) -> np.ndarray:
    a = np_as_float32(maps)
    frobenius = np.array([np.einsum("ij,ij->", m, m, dtype=np.float64) for m in a])
    out = np.full(len(a), np.nan)
    running = np.flatnonzero(frobenius != 0)
    running_maps = a if len(running) == len(a) else a[running]
    n = a.shape[-1]
    v = np.full((len(running), n, 1), 1 / np.sqrt(n), dtype=np.float32)
    largest = np.zeros(len(running))
    for step in range(streamed.POWER_ITERATIONS):
        w = np.swapaxes(running_maps, 1, 2) @ (running_maps @ v)
        estimate = _np_row_dots(v[:, :, 0], w[:, :, 0]).astype(np.float64)
        v = w / np.sqrt(_np_row_dots(w[:, :, 0], w[:, :, 0]))[:, None, None]
        done = np.abs(estimate - largest) <= streamed.POWER_TOLERANCE * estimate
        largest = estimate
        if step == streamed.POWER_ITERATIONS - 1:
            done[:] = True
        if done.any():
            out[running[done]] = frobenius[running[done]] / largest[done]
            if done.all():
                break
            running, running_maps, v, largest = running[~done], running_maps[~done], v[~done], largest[~done]
    return out


def np_cosine_pairs(
    cosine: np.ndarray, tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    pairs = np.tri(len(tokens), len(tokens), -1, dtype=bool) & tokens[:, None] & tokens[None, :]
    index = np.flatnonzero(pairs)
    if len(index) < 2:
        return index, None, None
    values = np.asarray(cosine).ravel()[index]
    return (
        index,
        _np_unit_centered(np_as_float32(values)),
        _np_unit_centered(np_average_ranks(values[None])[0]),
    )


def np_cosine_correlations(maps: np.ndarray, pairs: tuple) -> tuple[np.ndarray, np.ndarray]:
    index, unit, rank_unit = pairs
    values = np.take(np.asarray(maps).reshape(len(maps), -1), index, axis=1)  # [map, pair]
    if values.shape[1] < 2:
        return np.full(len(maps), np.nan), np.full(len(maps), np.nan)
    return np_correlation(np_as_float32(values), unit), np_correlation(np_average_ranks(values), rank_unit)


class NpLayout(NamedTuple):
    """A prompt's layout as the numpy route prepared it once for all of the prompt's maps."""

    token_shot: np.ndarray
    all_pairs: tuple
    word_pairs: tuple
    clue: np.ndarray
    target: np.ndarray


def np_layout(token_shot, token_segment, cosine: np.ndarray) -> NpLayout:
    segment = np.asarray(token_segment)
    return NpLayout(
        np.asarray(token_shot),
        np_cosine_pairs(cosine, np.ones(len(segment), dtype=bool)),
        np_cosine_pairs(cosine, np.isin(segment, store.WORD_SEGMENTS)),
        np.flatnonzero(segment == store.GENERATED),
        np.flatnonzero(segment == store.TARGET),
    )


def np_streamed_metrics(maps: np.ndarray, layout: NpLayout) -> np.ndarray:
    """metrics.STREAMED of maps [map, query, key] as [map, metric], as numpy computed them
    (batches of streamed.BATCH_BYTES of float32; BLAS on the caller's threads: one, as in the
    capture, for the old route's bit-for-bit batch invariance); ``layout``: :func:`np_layout`."""
    maps = np.asarray(maps)
    step = max(1, streamed.BATCH_BYTES // (4 * maps.shape[-1] ** 2))
    if len(maps) > step:
        return np.concatenate(
            [np_streamed_metrics(maps[i : i + step], layout) for i in range(0, len(maps), step)]
        )
    a32 = np_as_float32(maps)
    return np.stack(
        [
            np_row_entropy(maps),
            _np_row_mean(np.diagonal(a32, axis1=1, axis2=2)[:, 1:]),
            _np_row_mean(np.diagonal(a32, -1, axis1=1, axis2=2)),
            _np_row_mean(a32[:, 1:, 0]),
            *np_shot_masses(a32, layout.token_shot),
            np_block_mass(a32, layout.clue, layout.target),
            *np_cosine_correlations(maps, layout.all_pairs),
            *np_cosine_correlations(maps, layout.word_pairs),
            np_stable_rank(a32),
        ],
        axis=1,
    )


REFERENCE_TOLERANCES = {
    # metric: (relative, absolute): the torch route's value within abs + rel·|numpy's|
    "row_entropy": (1e-6, 0.0),  # terms −a·log a in float32: the two logs differ in the last bit
    "self_mass": (0.0, 0.0),  # sums of float16 values in float64: exact in both routes
    "previous_mass": (0.0, 0.0),
    "sink_mass": (0.0, 0.0),
    "within_shot_mass": (1e-6, 1e-12),  # numpy's float32 sums round once a sum passes 1; torch's are exact
    "across_shot_mass": (1e-6, 1e-12),
    "clue_target_mass": (0.0, 0.0),  # exact in both routes
    "cosine_pearson": (0.0, 1e-12),  # float64, numpy's one-pass spread Σx² − (Σx)²/m, torch's Σ(x − x̄)²
    "cosine_spearman": (0.0, 1e-12),  # the same ranks (exact); the spreads as above
    "cosine_pearson_words": (0.0, 1e-12),
    "cosine_spearman_words": (0.0, 1e-12),
    "stable_rank": (1e-4, 0.0),  # float32 power iterations round differently and may stop a step apart
}
"""Per streamed metric, how far :func:`streamed.streamed_metrics` may lie from
:func:`np_streamed_metrics` (same NaNs): (relative, absolute)."""


def reference_differences(got: np.ndarray, expected: np.ndarray) -> dict[str, tuple[float, float]]:
    """Per streamed metric, the largest absolute and relative difference of ``got`` [map, metric] from
    the numpy reference ``expected``, after checking both have NaN in the same places and every value
    is within :data:`REFERENCE_TOLERANCES`."""
    differences = {}
    for column, name in enumerate(metrics.STREAMED):
        g, e = got[:, column], expected[:, column]
        np.testing.assert_array_equal(np.isnan(g), np.isnan(e), err_msg=f"{name}: NaN in other places")
        g, e = g[~np.isnan(e)], e[~np.isnan(e)]
        rel, tol = REFERENCE_TOLERANCES[name]
        np.testing.assert_allclose(g, e, rtol=rel, atol=tol, err_msg=name)
        absolute = np.abs(g - e)
        relative = np.divide(absolute, np.abs(e), out=np.zeros_like(absolute), where=e != 0)
        differences[name] = (float(absolute.max(initial=0)), float(relative.max(initial=0)))
    return differences


# --- knockout effects ---


def synthetic(
    effect: dict[str, float], prompts_per_target: int = 2, targets: int = 12, seed: int = 0
) -> pd.DataFrame:
    """Per-prompt rows of each knockout (name → mean Δ per token), noise shared per prompt."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, 0.05, targets * prompts_per_target)
    rows = []
    for name, mean in effect.items():
        noise = rng.normal(0, 0.02, len(shared))
        for i, base in enumerate(shared):
            delta = mean + base + noise[i]
            rows.append(
                {"variant": name, "experiment": "animals-k3", "prompt_index": i,
                 "target": f"t{i // prompts_per_target}", "delta_token": delta, "delta_total": 4 * delta,
                 "chrf": 50.0 + i, "exact_match": float(i % 2), "end_marker": 1.0}
            )  # fmt: skip
    return pd.DataFrame(rows)


# --- the explorer: the stores of `results` (conftest), a server, requests, the page in Chromium ---


MODEL, EXPERIMENT = "tiny-mistral", "animals-k3"


CLUES = {"trained": "Small and busy, it carries crumbs.#", "qkscale-a2": "Tiny worker.#"}


def store_id(variant: str) -> str:
    return f"{MODEL}/{variant}/{EXPERIMENT}"


def plotted(group: zarr.Group) -> np.ndarray:
    """The figures' plotted tokens (word segments), from the labels: the reference index."""
    return np.flatnonzero(np.isin(group.attrs["token_segment"], store.WORD_SEGMENTS))


def reference(results: Path, variant: str, group: str, level: str, layer: int, head: int) -> np.ndarray:
    """The map read straight from the store with zarr."""
    prompt = zarr.open_group(store_path(results, variant), mode="r")[group]
    keep = np.ix_(plotted(prompt), plotted(prompt))
    if level == "cosine":
        return prompt["cosine"][...][keep]
    if level == "token":
        values = prompt["head_mean"][layer] if head == store.HEAD_MEAN else prompt["attn"][layer, head]
        return values[keep]
    return prompt[WORD_ARRAYS[level]][layer]


WORD_ARRAYS = {
    "word": "word_attn_sum",
    "word_mean": "word_attn_mean_query",
    "thesis_word": "thesis_word_attn_sum",
}


def store_path(results: Path, variant: str) -> Path:
    return results / "attention" / MODEL / variant / f"{EXPERIMENT}.zarr"


CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def browser():
    """Headless Debian Chromium driven by Debian's chromedriver (Selenium Manager never runs: the
    driver's path is given), or a skip (a failure under ATTNSCOPE_CHROMIUM=1, as .ci/run sets)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip install selenium)")
    if missing:
        message = (
            f"missing {', '.join(missing)} (apt-get install chromium chromium-driver; pip install selenium)"
        )
        if os.environ.get("ATTNSCOPE_CHROMIUM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1150"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))


class Page:
    """The explorer page in a browser: views, their reads, hovered values, screenshots."""

    def __init__(self, driver, explorer: StoreReader, url: str, shots: list[Path]):
        self.driver, self.explorer, self.shots = driver, explorer, shots
        self.ready = 0
        driver.get(url)
        self.wait()

    def wait(self) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        status = self.driver.find_element("id", "status")
        WebDriverWait(self.driver, 30).until(lambda _: int(status.get_attribute("data-ready")) > self.ready)
        self.ready = int(status.get_attribute("data-ready"))
        problems = self.driver.find_element("id", "problems").text
        assert problems == "", problems

    def view(self, name: str, change) -> dict[str, int]:
        """Make one change in the page, wait for its view, screenshot it; the reads it made."""
        self.explorer.stats(reset=True)
        change()
        self.wait()
        for folder in self.shots:
            self.driver.save_screenshot(str(folder / f"explorer-{name}.png"))
        return self.explorer.stats()

    def select(self, element: str, value: str) -> None:
        from selenium.webdriver.support.ui import Select

        Select(self.driver.find_element("id", element)).select_by_value(value)

    def mouse(self, panel: int, query: int, key: int, click: bool = False) -> None:
        """Move the mouse (a real pointer event, through chromedriver) to the centre of a cell of
        the ``panel``-th map, where the page drew it (``explorer.box``: its origin and cell size)."""
        from selenium.webdriver import ActionChains

        canvas = self.driver.find_elements("css selector", "#maps .map canvas")[panel]
        box = self.driver.execute_script(
            "return document.querySelectorAll('#maps .map')[arguments[0]].explorer.box;", panel
        )
        size = canvas.size  # offsets are from the element's centre
        x = box["x0"] + (key + 0.5) * box["cw"] - size["width"] / 2
        y = box["y0"] + (query + 0.5) * box["ch"] - size["height"] / 2
        actions = ActionChains(self.driver).move_to_element_with_offset(canvas, round(x), round(y))
        (actions.click() if click else actions).perform()

    def hover(self, panel: int, query: int, key: int) -> dict[str, str]:
        """Hover a cell: the page's hover line (``#hover``'s data) and the colour drawn there."""
        self.mouse(panel, query, key)
        hovered = self.driver.execute_script(
            "return Object.assign({}, document.getElementById('hover').dataset);"
        )
        assert (hovered["query"], hovered["key"]) == (str(query), str(key)), hovered
        return hovered

    def pixel(self, panel: int, query: int, key: int) -> tuple[list[int], dict]:
        """The RGB drawn at a cell's centre of the ``panel``-th map and the map's colour scale."""
        return self.driver.execute_script(
            "const div = document.querySelectorAll('#maps .map')[arguments[0]];"
            " const {box, scale} = div.explorer;"
            " const x = Math.floor(box.x0 + (arguments[2] + 0.5) * box.cw);"
            " const y = Math.floor(box.y0 + (arguments[1] + 0.5) * box.ch);"
            " const rgb = Array.from(div.querySelector('canvas').getContext('2d')"
            ".getImageData(x, y, 1, 1).data).slice(0, 3);"
            " return [rgb, {zmin: scale.zmin, zmax: scale.zmax}];",
            panel,
            query,
            key,
        )


@contextmanager
def serving(reader: StoreReader, host: str = "127.0.0.1") -> Iterator[tuple[str, int]]:
    """(host, port) of a real server over ``reader`` on a free port, in a thread."""
    httpd = make_server(reader, host, 0)
    # shutdown() waits for the loop's next poll: 0.5 s by default, per server
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield host, httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def request(
    address: tuple[str, int], path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; never raises on an HTTP error status."""
    connection = http.client.HTTPConnection(*address, timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def json_error(status: int, headers: dict[str, str], body: bytes) -> str:
    """The error of an answer that must be one: JSON ``{"error": text}``, no fabricated map."""
    assert status >= 400, (status, body[:80])
    assert headers["Content-Type"] == "application/json", headers
    assert "X-Shape" not in headers
    error = json.loads(body)["error"]
    assert isinstance(error, str) and "\n" not in error and "Traceback" not in error
    return error


def shard(root: Path, variant: str, name: str, group: str = "000") -> Path:
    return next((store_path(root, variant) / group / name).glob("c.*"))


def punch_hole(path: Path, inner: int, entries: int) -> None:
    """Mark inner chunk ``inner`` of a shard of ``entries`` inner chunks as never written in its
    index (its checksum recomputed, so only the hole is wrong)."""
    data = path.read_bytes()
    index = np.frombuffer(data[-4 - 16 * entries : -4], dtype="<u8").copy().reshape(entries, 2)
    index[inner] = chunks.EMPTY_INNER_CHUNK
    crc = np.array(google_crc32c.value(index.tobytes()), dtype="<u4").tobytes()
    path.write_bytes(data[: -4 - 16 * entries] + index.tobytes() + crc)


# --- configs and stores of workflow runs ---


def write_config(workdir: Path, config: dict) -> None:
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))


def example_config(name: str) -> dict:
    """An example config from config/examples with its paths made absolute."""
    config = read_yaml(REPO / "config" / "examples" / f"{name}.yaml")
    for entry in config["data"]["clue_files"]:
        entry["path"] = str(REPO / entry["path"])
    config["data"]["targets"] = {c: str(REPO / p) for c, p in config["data"]["targets"].items()}
    return config


def assert_same_zarr(a: Path, b: Path) -> None:
    """Equal attributes, members, and arrays (dtype, shape, attributes, values) in two stores."""

    def same(x: zarr.Group, y: zarr.Group, where: str) -> None:
        assert dict(x.attrs) == dict(y.attrs), f"{where}: attributes differ"
        assert sorted(x.array_keys()) == sorted(y.array_keys()), f"{where}: arrays differ"
        assert sorted(x.group_keys()) == sorted(y.group_keys()), f"{where}: groups differ"
        for name in x.array_keys():
            u, v = x[name], y[name]
            assert (u.dtype, u.shape) == (v.dtype, v.shape), f"{where}/{name}: dtype or shape differ"
            assert dict(u.attrs) == dict(v.attrs), f"{where}/{name}: attributes differ"
            assert np.array_equal(u[...], v[...], equal_nan=True), f"{where}/{name}: values differ"
        for name in x.group_keys():
            same(x[name], y[name], f"{where}/{name}")

    with warnings.catch_warnings():  # Snakemake's marker in directory() outputs is no Zarr member
        warnings.filterwarnings("ignore", message="Object at .snakemake_timestamp")
        same(zarr.open_group(a, mode="r"), zarr.open_group(b, mode="r"), str(a))


def compressor(dtype: str) -> BloscCodec:
    """The store's codec, its typesize matched to ``dtype``."""
    return BloscCodec(
        cname="zstd", clevel=1, shuffle="shuffle", typesize=np.dtype(dtype).itemsize, blocksize=4 << 20
    )


REPORT_AFTER_RUN = ("--report", "results/report.html", "--report-after-run")
"""Snakemake's HTML report of the run, written after it (README: the documented command)."""


def tiny_config(model: str = "tiny-mistral", **experiments) -> dict:
    config = workflow_config()
    config["model"] = model
    config["experiments"] = experiments or {
        "animals-k2": {"category": "Animals", "k": 2, "n_targets": 3},
        "food-k3": {"category": "Food", "k": 3, "n_targets": 2},
    }
    config["generation"] = {"max_new_tokens": 6, "batch_size": 2}
    # trained and the random init the comparisons use (config.yaml adds two init seeds and the
    # α edits): every stage runs, with four variants fewer in the weight_spectra and head_types jobs
    config["spectra"]["variants"] = ["trained", "random-s0"]
    config["theory"] = {
        "trials": 200,
        "samples": 2000,
        "trials_spectral": 20,
        "slerp_pairs": 20,
        "mp_shapes": [[64, 32]],
        "mp_trials": 2,
        "attention_sizes": [16, 32],
    }
    return config


STAGE_TARGETS = (
    *(f"results/clues/tiny-mistral/trained/{e}.parquet" for e in ("animals-k2", "food-k3")),
    *(f"results/metrics/tiny-mistral/trained/{e}.parquet" for e in ("animals-k2", "food-k3")),
    "results/spectra/tiny-mistral/learned_vs_random.parquet",
    "results/theory/checks.parquet",
    "results/claims.parquet",
)
"""Targets of tiny_config() with a Parquet table or a Zarr store of every stage: data, prompts,
clues, attention, metrics, spectra, theory, knockout, claims (the clue tables, figures and
report hold no digest)."""


def variants_config() -> dict:
    """tiny_config() with three variants of animals-k2 (trained, a random init, W_q and W_k
    scaled by 2) and every kind of attention-map figure of its Ant prompt."""
    config = tiny_config()
    config["experiments"]["animals-k2"]["variants"] = ["trained", "random-s0", "qkscale-a2"]
    config["figures"]["maps"] = [
        {
            "experiments": ["animals-k2"],
            "variants": "all",
            "targets": ["Ant"],
            "kinds": ["word_grid", "token_grid", "cosine", "word_pass", "token_pass"],
        }
    ]
    return config


def snakemake(workdir: Path, *args: str, config: dict | None = None) -> str:
    if config is not None:
        (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    run = subprocess.run(
        snakemake_command(workdir, "--cores", "2", *args),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return run.stdout + run.stderr


def planned_jobs(workdir: Path) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job a dry run would execute."""
    out = snakemake(workdir, "-n")
    jobs = []
    for block in re.split(r"\n(?=\[.*\]\n)|\n(?=(?:local)?rule \w+:)", out):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if rule is None or rule.group(1) == "all":
            continue
        wildcards = re.search(r"wildcards: (.*)", block)
        jobs.append((rule.group(1), wildcards.group(1) if wildcards else ""))
    return sorted(jobs)


def every_job(workdir: Path) -> list[tuple[str, str]]:
    """(rule, wildcards) of every job of the current config (a --forceall dry run)."""
    out = snakemake(workdir, "-n", "--forceall")
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        if rule and rule.group(1) != "all":
            wildcards = re.search(r"wildcards: (.*)", block)
            jobs.append((rule.group(1), wildcards.group(1) if wildcards else ""))
    return sorted(jobs)


AGGREGATE_SOURCES = {
    "metric_curves": ("attention_metrics",),
    "clue_comparison": ("generate_clues", "clue_table"),
    "spectra_comparison": ("weight_spectra",),
    "spectra_figures": ("weight_spectra",),
    "knockout_effects": ("knockout",),
}
"""Jobs that combine the jobs of several variants: an experiment's variant comparison, its
knockout effects and a model's spectra comparison rerun with the jobs they combine (same model,
experiment)."""
TABLE_FIGURES = {"knockout_effects": "knockout_figure", "head_correlations": "head_correlations_figure"}
"""The figure rule that draws a combining job's table (same wildcards): it reruns with the table."""


def with_aggregates(selected: list, jobs: list, claims_experiment: str = "animals-k2") -> list:
    """`selected` plus the jobs of `jobs` that combine them: the aggregates above, the claims
    table (it reads every experiment's results of a model), a variant's head table (its head
    types and its metrics on `claims_experiment`, the first experiment of the tests' configs) and
    a model's head correlations (its head tables), and the figures of those tables (TABLE_FIGURES).
    A head_types job is one per model (every spectra variant): every head table of the model reads it."""
    combining = (*AGGREGATE_SOURCES, "claims", "head_table", "head_correlations", *TABLE_FIGURES.values())
    chosen = sorted({job for job in selected if job[0] not in combining})
    found = [set(wc.split(", ")) for _, wc in chosen]

    def combines(rule: str, wildcards: str) -> bool:
        if rule == "claims":
            return any(w.startswith("model=") for keys in found for w in keys)
        keys = set(wildcards.split(", "))
        if rule == "head_table":  # its variant's head types come from its model's head_types job
            model = {w for w in keys if w.startswith("model=")}
            return any(
                (r == "head_types" and model <= f)
                or (r == "attention_metrics" and keys <= f and f"experiment={claims_experiment}" in f)
                for (r, _), f in zip(chosen, found)
            )
        if rule == "head_correlations" or rule in TABLE_FIGURES.values():  # added below, with their tables
            return False
        return any(r in AGGREGATE_SOURCES[rule] and keys <= f for (r, _), f in zip(chosen, found))

    chosen += [(rule, wc) for rule, wc in jobs if rule in combining and combines(rule, wc)]
    tables = [set(wc.split(", ")) for rule, wc in chosen if rule == "head_table"]
    chosen += [
        (rule, wc)
        for rule, wc in jobs
        if rule == "head_correlations" and any(set(wc.split(", ")) <= t for t in tables)
    ]
    drawn = {(TABLE_FIGURES[rule], wc) for rule, wc in chosen if rule in TABLE_FIGURES}
    return sorted(chosen + [job for job in jobs if job in drawn])


def float16_steps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float16 values lie between ``a`` and ``b`` (non-negative float16 arrays, whose bit
    patterns order like their values), element by element."""
    assert a.dtype == b.dtype == np.float16 and a.shape == b.shape
    assert not (np.signbit(a).any() or np.signbit(b).any()), "maps are non-negative"
    return np.abs(a.view(np.uint16).astype(np.int32) - b.view(np.uint16).astype(np.int32))


def derived_arrays(group: zarr.Group) -> dict[str, tuple[tuple, np.ndarray]]:
    """What a prompt group of an attention store derives from its stored maps, recomputed here
    from the stored maps alone, as ``{array: (index, values)}``: the head means of the kept heads
    (float32 sum in head order), the streamed metrics and singular values of every stored map
    (without kept heads: of the head mean only, ``index`` selects it), the head means' choices (in
    the capture's chunks of layers) and word maps, the same of the value-weighted maps. A store's
    arrays are a function of its maps exactly when ``array[index]`` equals ``values`` bit for bit.
    numpy's BLAS runs on one thread, as in the capture (a long dot product split over threads
    rounds differently)."""
    with threadpool_limits(1, "blas"):
        return _derived_arrays(group)


def _derived_arrays(group: zarr.Group) -> dict[str, tuple[tuple, np.ndarray]]:
    attrs, num_heads = group.attrs, group["metrics"].shape[1] - 1
    layout = streamed.MapLayout(
        np.array(attrs["token_shot"]), np.array(attrs["token_segment"]), group["cosine"][...]
    )
    n = attrs["n_tokens"]
    step = max(1, choices.CHUNK_VALUES // (n * n))
    words = store.word_membership_matrix(attrs["token_word"], attrs["map_words"])
    thesis_words = store.word_membership_matrix(attrs["thesis_token_word"], range(len(attrs["thesis_words"])))
    every, mean_only = (slice(None),), (slice(None), slice(num_heads, None))
    derived: dict[str, tuple[tuple, np.ndarray]] = {}
    for prefix in ("", "value_"):
        if f"{prefix}head_mean" not in group:
            continue
        head_mean = group[f"{prefix}head_mean"][...]
        heads = group[f"{prefix}attn"][...] if f"{prefix}attn" in group else None
        maps = head_mean[:, None] if heads is None else np.concatenate([heads, head_mean[:, None]], axis=1)
        kept = every if heads is not None else mean_only
        derived[f"{prefix}metrics"] = (
            kept,
            np.array([streamed.streamed_metrics(torch.from_numpy(layer), layout) for layer in maps]),
        )
        derived[f"{prefix}choices"] = (
            every,
            np.concatenate(
                [
                    choices.stored_choices(
                        head_mean[i : i + step], attrs["token_segment"], attrs["token_shot"]
                    )
                    for i in range(0, len(head_mean), step)
                ]
            ),
        )
        summed = np.stack([promptgroup.word_maps(m, words)[0] for m in head_mean])
        derived[f"{prefix}word_attn_sum"] = (every, summed)
        if prefix:
            continue
        derived["word_attn_mean_query"] = (
            every,
            np.stack([promptgroup.word_maps(m, words)[1] for m in head_mean]),
        )
        derived["thesis_word_attn_sum"] = (
            every,
            np.stack([promptgroup.word_maps(m, thesis_words)[0] for m in head_mean]),
        )
        head_spectra = heads is not None and not np.isnan(group["singular_values"][:, :num_heads]).all()
        spectra = maps if head_spectra else head_mean[:, None]  # the heads' only with attention.head_spectra
        singular = np.stack([promptgroup.singular_values(layer) for layer in spectra])
        derived["singular_values"] = (every if head_spectra else mean_only, singular)
        if heads is not None:
            total = heads[:, 0].astype(np.float32)
            for head in range(1, num_heads):
                total += heads[:, head]
            derived["head_mean"] = (every, (total / np.float32(num_heads)).astype(np.float16))
    return derived


def assert_derived_from_its_maps(group: zarr.Group) -> None:
    """Every array of a prompt group that derives from its maps is :func:`derived_arrays` bit for bit."""
    for name, (index, values) in derived_arrays(group).items():
        np.testing.assert_array_equal(group[name][index], values, err_msg=f"{group.path}/{name}")
