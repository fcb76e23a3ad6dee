"""Head types: the probe, the scores against hand loops on constructed attention patterns, and a
tiny Llama whose RoPE weights make chosen heads attend at fixed offsets, typed through the model's
own forward pass; a random tiny model is typed as nothing."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from attnscope import architecture, headtypes
from attnscope.plots import plot_head_types

LENGTH, COUNT, SEED, THRESHOLD = 24, 3, 0, 0.4


def hand_targets(ids: list[int], score: str, i: int, bos: bool = True) -> list[int]:
    """The target keys of query i, from the definitions in words; with ``bos`` never key 0."""
    if score == "previous_token":
        targets = [i - 1] if i >= 1 else []
    elif score == "duplicate_token":
        targets = [j for j in range(i) if ids[j] == ids[i]]
    else:
        targets = [j for j in range(1, i + 1) if ids[j - 1] == ids[i] and j - 1 < i]
    return [j for j in targets if not (bos and j == 0)]


def hand_score(a: np.ndarray, ids: list[int], score: str, bos: bool = True) -> float:
    """Mean over the queries with a target key of the attention on the target keys, by loops."""
    masses = [sum(a[i, j] for j in hand_targets(ids, score, i, bos)) for i in range(len(ids))]
    rows = [m for i, m in enumerate(masses) if hand_targets(ids, score, i, bos)]
    return sum(rows) / len(rows)


def causal_maps(rng: np.random.Generator, shape: tuple[int, ...], n: int) -> np.ndarray:
    a = np.tril(rng.random((*shape, n, n)) ** 3)
    return a / a.sum(axis=-1, keepdims=True)


def built_map(ids: list[int], score: str) -> np.ndarray:
    """A map that puts every row's attention on its target keys (uniformly), else on itself."""
    n = len(ids)
    a = np.zeros((n, n))
    for i in range(n):
        targets = hand_targets(ids, score, i) or [i]
        a[i, targets] = 1 / len(targets)
    return a


IDS = [1, 5, 7, 5, 9, 9, 3, 5, 9, 5, 7, 1]  # repeats inside and across "copies", a token twice in a row


@pytest.mark.parametrize("bos", [True, False])
def test_scores_equal_hand_loops_on_random_maps(bos):
    """Token 1 first and last: with ``bos`` it is BOS and no key 0 is a target (the duplicate-token
    target of the last query is gone), without it key 0 is an ordinary key."""
    a = causal_maps(np.random.default_rng(0), (2, 3), len(IDS))
    targets = headtypes.patterns(IDS, bos)
    for s, score in enumerate(headtypes.SCORES):
        got = headtypes.pattern_score(a, targets[s])
        expected = [[hand_score(a[layer, head], IDS, score, bos) for head in range(3)] for layer in range(2)]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert targets[:, :, 0].any() != bos


def test_attention_on_bos_is_no_previous_token_attention():
    """A head that parks a share s of every row on BOS and the rest on the previous token: counting
    query 1 → BOS as previous-token attention (the score without ``bos``) lifts it over the threshold
    though no row but query 1 gives the previous token ≥ 1 − s; a pure sink scores 0, a true
    previous-token head still 1."""
    ids = headtypes.probe_ids(np.arange(100, 200), LENGTH, 1, SEED, bos=1)[0].tolist()
    n = len(ids)
    sink = np.zeros((n, n))
    sink[:, 0] = 1.0
    share = 0.61
    mixed = share * sink + (1 - share) * np.eye(n, k=-1)
    mixed[0, 0] = 1.0
    previous = built_map(ids, "previous_token")
    maps = np.stack([sink, mixed, previous])
    table = headtypes.head_types_table(
        np.stack([headtypes.pattern_score(maps, p) for p in headtypes.patterns(ids, True)])[None, :, None],
        [0, 0, 0],
    )
    assert table["previous_token"].tolist() == pytest.approx([0.0, 1 - share, 1.0])
    assert headtypes.head_types(table, THRESHOLD).tolist() == ["none", "none", "previous_token"]
    counted = headtypes.pattern_score(maps, headtypes.patterns(ids, False)[0])  # the case built to be wrong
    assert counted[0] == pytest.approx(1 / (n - 1)) and counted[1] >= THRESHOLD


@pytest.mark.parametrize("built", headtypes.SCORES)
def test_a_map_built_for_one_score_gets_it_and_not_the_others(built):
    vocabulary = np.arange(100, 200)
    ids = headtypes.probe_ids(vocabulary, LENGTH, 1, SEED, bos=1)[0].tolist()
    a = built_map(ids, built)
    targets = headtypes.patterns(ids, True)
    scores = {score: headtypes.pattern_score(a, targets[s]) for s, score in enumerate(headtypes.SCORES)}
    assert scores[built] == pytest.approx(1.0)
    assert all(v == pytest.approx(0.0) for score, v in scores.items() if score != built)


def test_the_probe_repeats_distinct_ordinary_tokens_after_bos(tiny_llama):
    model, tokenizer = tiny_llama
    vocabulary = headtypes.probe_vocabulary(tokenizer, model.get_input_embeddings().num_embeddings)
    probes = headtypes.probe_ids(vocabulary, LENGTH, COUNT, SEED, tokenizer.bos_token_id)
    assert probes.shape == (COUNT, 1 + 2 * LENGTH)
    assert (probes[:, 0] == tokenizer.bos_token_id).all()
    first, second = probes[:, 1 : 1 + LENGTH], probes[:, 1 + LENGTH :]
    assert (first == second).all()
    assert all(len(set(row)) == LENGTH for row in first)
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    assert special and not special & set(first.ravel().tolist())
    assert (headtypes.probe_ids(vocabulary, LENGTH, COUNT, SEED, 1) == probes).all()
    assert not (headtypes.probe_ids(vocabulary, LENGTH, COUNT, SEED + 1, 1) == probes).all()
    with pytest.raises(ValueError, match="heads.probe_length"):
        headtypes.probe_ids(vocabulary[:10], 11, 1, SEED, None)


# (layer, head) → the key offset i − j it attends to; every other head attends to itself.
OFFSETS = {(0, 0): 1, (1, 3): LENGTH, (1, 4): LENGTH - 1}
EXPECTED = {(0, 0): "previous_token", (1, 3): "duplicate_token", (1, 4): "induction"}


def offset_heads(model: torch.nn.Module, offsets: dict[tuple[int, int], int], sharpness: float = 400.0):
    """A copy whose head (l, h) attends to key i − offsets[l, h] through RoPE.

    Every token embeds as the same vector of ones, and o_proj and down_proj are zero, so every
    layer's normalised input is that vector at every position. Each KV head's key is (1, 0) in
    every rotary pair m of frequency θ_m; a query of angle −d·θ_m in pair m gives the logit
    Σ_m s·cos((i − j − d)·θ_m) after RoPE rotates queries by i·θ_m and keys by j·θ_m: largest at
    i − j = d, by at least s·Σ_m (1 − cos θ_m) at any other offset."""
    edited = copy.deepcopy(model)
    config = edited.config
    num_heads, num_kv_heads, head_dim = architecture.attention_shape(config)
    half = head_dim // 2
    frequencies = edited.model.rotary_emb.inv_freq.double()
    ones = torch.full((1, config.hidden_size), 1.0 / config.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        edited.model.embed_tokens.weight.fill_(1.0)
        for layer, block in enumerate(architecture.decoder_layers(edited)):
            attn = block.self_attn
            attn.o_proj.weight.zero_()
            block.mlp.down_proj.weight.zero_()
            key = torch.zeros(num_kv_heads, head_dim, dtype=torch.float64)
            key[:, :half] = 1.0
            query = torch.zeros(num_heads, head_dim, dtype=torch.float64)
            for head in range(num_heads):
                angle = -offsets.get((layer, head), 0) * frequencies
                query[head, :half] = sharpness * torch.cos(angle)
                query[head, half:] = sharpness * torch.sin(angle)
            attn.k_proj.weight.copy_(key.reshape(-1, 1) @ ones)
            attn.q_proj.weight.copy_(query.reshape(-1, 1) @ ones)
    return edited.eval()


def test_heads_built_to_attend_at_offsets_are_typed_by_their_offset(tiny_llama):
    model, tokenizer = tiny_llama
    table = headtypes.measure_head_types(offset_heads(model, OFFSETS), tokenizer, LENGTH, COUNT, SEED)
    assert list(table.columns) == list(headtypes.COLUMNS)
    types = headtypes.head_types(table, THRESHOLD)
    for row, head_type in zip(table.itertuples(), types):
        built = EXPECTED.get((row.layer, row.head))
        for score in headtypes.SCORES:
            value = getattr(row, score)
            assert value > 0.99 if score == built else value < 0.01, (row.layer, row.head, score, value)
        assert head_type == (built or headtypes.NO_TYPE)


def test_a_random_tiny_model_has_no_typed_head(tiny_llama):
    model, tokenizer = tiny_llama
    table = headtypes.measure_head_types(model, tokenizer, LENGTH, COUNT, SEED)
    assert (headtypes.head_types(table, THRESHOLD) == headtypes.NO_TYPE).all()
    assert table["previous_token"].max() < 0.2


def test_head_type_is_the_highest_score_at_the_threshold():
    scores = np.zeros((2, 3, 1, 3))  # [probe, score, layer, head]
    scores[:, 0, 0, 0] = [0.3, 0.5]  # previous-token mean 0.4: at the threshold
    scores[:, 2, 0, 1] = 0.39  # induction just below
    scores[:, 1, 0, 2], scores[:, 2, 0, 2] = 0.6, 0.7  # both above: the higher wins
    table = headtypes.head_types_table(scores, [0, 0, 1])
    assert list(table.columns) == list(headtypes.COLUMNS)  # scores only: the threshold types them
    assert headtypes.head_types(table, THRESHOLD).tolist() == ["previous_token", "none", "induction"]
    assert headtypes.head_types(table, 0.65).tolist() == ["none", "none", "induction"]
    assert table["kv_head"].tolist() == [0, 0, 1]
    fig = plot_head_types(table, THRESHOLD, "constructed")
    dots = [sum(len(line.get_xdata()) for line in ax.get_lines()) for ax in fig.axes[: len(headtypes.SCORES)]]
    assert dots == [1, 0, 1]
    fig = plot_head_types(table, 0.65, "stricter")  # the figure types at its own threshold
    dots = [sum(len(line.get_xdata()) for line in ax.get_lines()) for ax in fig.axes[: len(headtypes.SCORES)]]
    assert dots == [0, 0, 1]
