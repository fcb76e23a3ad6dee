"""Attention-map metrics on small constructed matrices, against hand-computed values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import pearsonr, rankdata, spearmanr

from attnscope import metrics, promptgroup, stats, theory
from tests.helpers import random_causal, uniform_causal


def singular_values(a: np.ndarray) -> np.ndarray:
    """One map's singular values as the capture computes them (promptgroup.singular_values)."""
    return promptgroup.singular_values(np.asarray(a, dtype=np.float64)[None])[0]


def block_uniform(blocks: int, size: int) -> np.ndarray:
    """``blocks`` diagonal blocks, each ``size`` × ``size`` with entries 1/size."""
    return np.kron(np.eye(blocks), np.full((size, size), 1 / size))


def layout(n: int, shot=None, segment=None, cosine=None) -> metrics.MapLayout:
    shot = np.zeros(n, int) if shot is None else np.asarray(shot)
    segment = np.array(["template"] * n) if segment is None else np.asarray(segment)
    cosine = np.eye(n, dtype=np.float16) if cosine is None else cosine
    return metrics.MapLayout(shot, segment, cosine)


def test_uniform_causal_map():
    a = uniform_causal(4)
    assert metrics.row_entropy(a) == pytest.approx(1.0)
    # rows 1..3 put 1/2, 1/3, 1/4 on the diagonal, the previous and the first token
    for mass in (metrics.self_mass, metrics.previous_mass, metrics.sink_mass):
        assert mass(a) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)


def test_identity_map():
    a = np.eye(5)
    assert metrics.row_entropy(a) == 0
    assert (metrics.self_mass(a), metrics.previous_mass(a), metrics.sink_mass(a)) == (1, 0, 0)
    assert metrics.stable_rank(a) == pytest.approx(5)
    sigma = singular_values(a)
    assert metrics.effective_rank(sigma) == pytest.approx(5)
    assert metrics.epsilon_rank(sigma, 0.1) == 5  # ‖I − I_r‖²_F = 5 − r ≤ 0.05 only for r = 5
    assert metrics.epsilon_rank(sigma, 0.5) == 4  # 5 − r ≤ 1.25
    # The strict triangle is all zero: no correlation is defined.
    assert np.isnan(
        metrics.cosine_correlations(a.astype(np.float16), layout(5, cosine=uniform_causal(5)).cosine_pairs)
    ).all()


def test_block_diagonal_ranks():
    a = block_uniform(3, 4)
    assert metrics.stable_rank(a) == pytest.approx(3)
    sigma = singular_values(a)
    assert np.allclose(sigma[:3], 1) and np.allclose(sigma[3:], 0, atol=1e-7)
    assert metrics.effective_rank(sigma) == pytest.approx(3)
    assert metrics.epsilon_rank(sigma, 0.1) == 3
    assert metrics.spectral_ranks(sigma, 0.1) == pytest.approx([3, 3])
    assert np.isnan(metrics.spectral_ranks(np.full(12, np.nan), 0.1)).all()  # a map not stored


def test_rank_one_map():
    a = np.full((6, 6), 1 / 6)
    assert metrics.stable_rank(a) == pytest.approx(1)
    assert metrics.effective_rank(singular_values(a)) == pytest.approx(1)


def test_row_entropy_by_hand_and_float16_path():
    a = np.array([[1, 0, 0], [0.5, 0.5, 0], [1, 0, 0]])
    assert metrics.row_entropy(a) == pytest.approx((1 + 0) / 2)  # row 1: log 2 / log 2; row 2: 0
    m = random_causal(np.random.default_rng(0), 40)
    rows = m.astype(np.float64)
    expected = np.mean(
        [-(r[r > 0] * np.log(r[r > 0])).sum() / np.log(i + 1) for i, r in enumerate(rows) if i]
    )
    assert metrics.row_entropy(m) == pytest.approx(expected, rel=1e-6)


def test_within_and_across_shot_mass():
    shot = [0, 1, 1, 2, 2]
    # Uniform causal attention: query 3 (shot 2) has keys 0..3: 1/4 own shot, 2/4 shot 1;
    # query 4 has keys 0..4: 2/5 own shot, 2/5 shot 1.
    within, across = metrics.shot_masses(uniform_causal(5), shot)
    assert within == pytest.approx((1 / 4 + 2 / 5) / 2)
    assert across == pytest.approx((2 / 4 + 2 / 5) / 2)
    # Block-diagonal: every token attends only inside its own shot.
    blocks = np.zeros((5, 5))
    for s in set(shot):
        idx = np.flatnonzero(np.array(shot) == s)
        blocks[np.ix_(idx, idx)] = np.tril(np.ones((len(idx), len(idx))))
    blocks /= blocks.sum(axis=1, keepdims=True)
    assert metrics.shot_masses(blocks, shot) == pytest.approx((1.0, 0.0))
    assert np.isnan(metrics.shot_masses(blocks, [0, 1, 1, 1, 1])).all()  # no shot ≥ 2


def test_clue_to_target_mass():
    lay = layout(4, segment=["template", "target", "generated", "generated"])
    # queries 2, 3 put 1/3 and 1/4 on the target token 1
    assert metrics.block_mass(uniform_causal(4), lay.clue_queries, lay.target_keys) == pytest.approx(7 / 24)
    assert np.isnan(metrics.block_mass(uniform_causal(4), np.array([], int), lay.target_keys))


def test_cosine_correlations_match_scipy_over_the_strict_triangle():
    rng = np.random.default_rng(1)
    n = 30
    a = random_causal(rng, n)
    cosine = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    pearson, spearman = metrics.cosine_correlations(a, layout(n, cosine=cosine).cosine_pairs)
    rows, cols = np.tril_indices(n, -1)
    x, y = a[rows, cols].astype(np.float64), cosine[rows, cols].astype(np.float64)
    assert pearson == pytest.approx(pearsonr(x, y).statistic, abs=1e-6)
    assert spearman == pytest.approx(spearmanr(x, y).statistic, abs=1e-9)
    # A map that equals the cosine on the triangle correlates perfectly.
    assert metrics.correlation(y, metrics._unit_centered(y)) == pytest.approx(1.0)


def test_word_cosine_correlations_take_word_and_clue_pairs_with_the_values_as_given():
    """Under the thesis's choice the pairs are those between word and clue tokens (j < i), the
    values unrenormalised: scipy on those pairs; a map that follows the cosine only between word
    tokens correlates perfectly there and not on the full triangle."""
    rng = np.random.default_rng(4)
    n = 24
    segment = np.array(["template", "instruction", "shot_word", "shot_clue", "template", "shot_word"] * 4)
    words = np.isin(segment, ["shot_word", "shot_clue"])
    a = random_causal(rng, n)
    cosine = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    lay = layout(n, segment=segment, cosine=cosine)
    rows, cols = np.tril_indices(n, -1)
    pick = words[rows] & words[cols]
    x, y = a[rows, cols][pick].astype(np.float64), cosine[rows, cols][pick].astype(np.float64)
    pearson, spearman = metrics.cosine_correlations(a, lay.word_cosine_pairs)
    assert pearson == pytest.approx(pearsonr(x, y).statistic, abs=1e-6)
    assert spearman == pytest.approx(spearmanr(x, y).statistic, abs=1e-9)
    # Built to follow the cosine between word tokens: an affine copy of it there, noise elsewhere.
    follows = a.astype(np.float64)
    follows[rows[pick], cols[pick]] = 0.01 + 0.004 * y
    follows = follows.astype(np.float16)
    assert metrics.cosine_correlations(follows, lay.word_cosine_pairs)[0] == pytest.approx(1.0, abs=1e-3)
    assert abs(metrics.cosine_correlations(follows, lay.cosine_pairs)[0]) < 0.5
    # Fewer than two pairs: nothing to correlate.
    no_words = layout(n, segment=np.array(["template"] * n), cosine=cosine)
    assert np.isnan(metrics.cosine_correlations(a, no_words.word_cosine_pairs)).all()


def test_average_ranks_of_float16_match_rankdata():
    rng = np.random.default_rng(2)
    values = np.concatenate([np.zeros(50), rng.exponential(1e-3, 500), [1.0, 1.0]]).astype(np.float16)
    assert np.array_equal(metrics.average_ranks(values), rankdata(values))
    negative = np.array([-1, 0.5, 0.5, 0], dtype=np.float16)
    assert np.array_equal(metrics.average_ranks(negative), rankdata(negative))


def test_ranks_agree_with_the_theory_module_and_the_svd():
    a = uniform_causal(12)
    sigma = singular_values(a)
    assert np.allclose(sigma, np.linalg.svd(a, compute_uv=False))
    for eps in (0.05, 0.1, 0.3):
        assert metrics.epsilon_rank(sigma, eps) == theory.epsilon_rank(a, eps)
    assert metrics.stable_rank(a) == pytest.approx((sigma**2).sum() / sigma[0] ** 2, rel=1e-5)


@pytest.mark.routes
def test_batched_singular_values_are_each_maps_svd():
    """Float16 maps [map, query, key] in groups of ``chunk_bytes``, on one to three threads:
    each map's SVD in float64, in the maps' order."""
    rng = np.random.default_rng(5)
    maps = np.stack([random_causal(rng, 30) for _ in range(5)])
    expected = np.stack([np.linalg.svd(a.astype(np.float64), compute_uv=False) for a in maps])
    for chunk_bytes in (1, 2 * 8 * 30 * 30, 1 << 24):  # one map, two maps, all at once per group
        for workers in (1, 2, 3):
            got = promptgroup.singular_values(torch.from_numpy(maps), workers, chunk_bytes)
            assert got.dtype == np.float64
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


def test_streamed_metrics_are_the_individual_metrics_in_order():
    rng = np.random.default_rng(3)
    n = 12
    a = random_causal(rng, n)
    shot = [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 0, 0]
    segment = ["template"] * 9 + ["target", "generated", "generated"]
    lay = layout(n, shot, segment, rng.uniform(-1, 1, (n, n)).astype(np.float16))
    row = dict(zip(metrics.STREAMED, metrics.streamed_metrics(a, lay)))
    assert row["row_entropy"] == metrics.row_entropy(a)
    assert row["sink_mass"] == pytest.approx(metrics.sink_mass(a.astype(np.float32)))
    assert (row["within_shot_mass"], row["across_shot_mass"]) == pytest.approx(metrics.shot_masses(a, shot))
    assert row["clue_target_mass"] == pytest.approx(metrics.block_mass(a, np.array([10, 11]), np.array([9])))
    assert (row["cosine_pearson"], row["cosine_spearman"]) == pytest.approx(
        metrics.cosine_correlations(a, lay.cosine_pairs)
    )
    assert (row["cosine_pearson_words"], row["cosine_spearman_words"]) == pytest.approx(
        metrics.cosine_correlations(a, lay.word_cosine_pairs), nan_ok=True
    )
    assert row["stable_rank"] == pytest.approx(metrics.stable_rank(a))


def test_summary_per_layer_across_prompts():
    rows = []
    for prompt, values in enumerate([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]):
        for layer, value in enumerate(values):
            for head in (-1, 0, 1):
                rows.append(
                    {"prompt_index": prompt, "layer": layer, "head": head}
                    | {m: value + (head + 1) * 10 for m in metrics.METRICS}
                )
    summary = metrics.summarize(pd.DataFrame(rows))
    mean0 = summary[(summary["maps"] == "head_mean") & (summary["layer"] == 0)].set_index("metric")
    assert list(mean0.index) == list(metrics.METRICS)
    entropy = mean0.loc["row_entropy"]
    assert (entropy["n"], entropy["mean"], entropy["median"], entropy["min"], entropy["max"]) == (
        3,
        3,
        3,
        1,
        5,
    )
    assert entropy["std"] == pytest.approx(2.0)
    assert (entropy["q25"], entropy["q75"]) == (2.0, 4.0)
    heads1 = (
        summary[(summary["maps"] == "heads") & (summary["layer"] == 1)].set_index("metric").loc["self_mass"]
    )
    assert heads1["n"] == 6 and heads1["mean"] == pytest.approx((12 + 14 + 16 + 22 + 24 + 26) / 6)
    markdown = metrics.summary_markdown(summary, "title")
    assert markdown.startswith("# title") and "3 ± 2" in markdown


def test_layer_intervals_pool_replicates_by_target():
    """Mean and interval per layer and metric: the mean of all rows; two identical shot-seed
    replicates of each target give the same interval as one (targets are the clusters)."""
    rng = np.random.default_rng(4)
    one = pd.DataFrame(
        [{"layer": layer, "target": f"t{t}", "row_entropy": rng.normal(0.5 + 0.1 * layer, 0.05)}
         for t in range(20) for layer in range(3)]
    )  # fmt: skip
    table = metrics.layer_intervals(one, ["row_entropy"])
    assert list(table["layer"]) == [0, 1, 2] and (table["n"] == 20).all()
    for layer, row in table.set_index("layer").iterrows():
        values = one.loc[one["layer"] == layer, "row_entropy"]
        direct = stats.cluster_mean_interval(values.to_numpy(), one.loc[one["layer"] == layer, "target"])
        assert row["mean"] == pytest.approx(values.mean())
        assert (row["low"], row["high"]) == pytest.approx((direct.low, direct.high))
        assert row["low"] < row["mean"] < row["high"]
    twice = metrics.layer_intervals(pd.concat([one, one]), ["row_entropy"])
    assert (twice["n"] == 40).all()
    assert np.allclose(twice["high"] - twice["low"], table["high"] - table["low"], rtol=0.1)
