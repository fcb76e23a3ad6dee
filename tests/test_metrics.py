"""Attention-map metrics on small constructed matrices, against hand-computed values, and the
streamed metrics (torch, on the maps' device) against the numpy route they replaced
(tests/helpers.py: ``np_streamed_metrics``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import entr
from scipy.stats import pearsonr, rankdata, spearmanr

from attnscope import metrics, promptgroup, stats, store, streamed, theory
from tests.helpers import (
    REFERENCE_TOLERANCES,
    np_layout,
    np_streamed_metrics,
    random_causal,
    reference_differences,
    uniform_causal,
)


def singular_values(a: np.ndarray) -> np.ndarray:
    """One map's singular values as the capture computes them (promptgroup.singular_values)."""
    return promptgroup.singular_values(np.asarray(a, dtype=np.float64)[None])[0]


def block_uniform(blocks: int, size: int) -> np.ndarray:
    """``blocks`` diagonal blocks, each ``size`` × ``size`` with entries 1/size."""
    return np.kron(np.eye(blocks), np.full((size, size), 1 / size))


def one(metric, a: np.ndarray, *args):
    """A batched metric of one map (as a CPU tensor): its value (or values, for a metric with several)."""
    values = metric(torch.as_tensor(np.asarray(a))[None], *args)
    return tuple(float(v[0]) for v in values) if isinstance(values, tuple) else float(values[0])


def layout(n: int, shot=None, segment=None, cosine=None) -> streamed.MapLayout:
    shot = np.zeros(n, int) if shot is None else np.asarray(shot)
    segment = np.array(["template"] * n) if segment is None else np.asarray(segment)
    cosine = np.eye(n, dtype=np.float16) if cosine is None else cosine
    return streamed.MapLayout(shot, segment, cosine)


def test_uniform_causal_map():
    a = uniform_causal(4)
    assert one(streamed.row_entropy, a) == pytest.approx(1.0)
    # rows 1..3 put 1/2, 1/3, 1/4 on the diagonal, the previous and the first token
    for mass in (streamed.self_mass, streamed.previous_mass, streamed.sink_mass):
        assert one(mass, a) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)


def test_identity_map():
    a = np.eye(5)
    assert one(streamed.row_entropy, a) == 0
    masses = (streamed.self_mass, streamed.previous_mass, streamed.sink_mass)
    assert [one(mass, a) for mass in masses] == [1, 0, 0]
    assert one(streamed.stable_rank, a) == pytest.approx(5)
    sigma = singular_values(a)
    assert metrics.effective_rank(sigma) == pytest.approx(5)
    assert metrics.epsilon_rank(sigma, 0.1) == 5  # ‖I − I_r‖²_F = 5 − r ≤ 0.05 only for r = 5
    assert metrics.epsilon_rank(sigma, 0.5) == 4  # 5 − r ≤ 1.25
    # The strict triangle is all zero: no correlation is defined.
    pairs = layout(5, cosine=uniform_causal(5)).cosine_pairs
    assert np.isnan(one(streamed.cosine_correlations, a.astype(np.float16), pairs)).all()


def test_block_diagonal_ranks():
    a = block_uniform(3, 4)
    assert one(streamed.stable_rank, a) == pytest.approx(3)
    sigma = singular_values(a)
    assert np.allclose(sigma[:3], 1) and np.allclose(sigma[3:], 0, atol=1e-7)
    assert metrics.effective_rank(sigma) == pytest.approx(3)
    assert metrics.epsilon_rank(sigma, 0.1) == 3
    assert metrics.spectral_ranks(sigma, 0.1) == pytest.approx([3, 3])
    assert np.isnan(metrics.spectral_ranks(np.full(12, np.nan), 0.1)).all()  # a map not stored


def test_rank_one_map():
    a = np.full((6, 6), 1 / 6)
    assert one(streamed.stable_rank, a) == pytest.approx(1)
    assert metrics.effective_rank(singular_values(a)) == pytest.approx(1)


def test_row_entropy_by_hand_and_float16_path():
    a = np.array([[1, 0, 0], [0.5, 0.5, 0], [1, 0, 0]])
    assert one(streamed.row_entropy, a) == pytest.approx((1 + 0) / 2)  # row 1: log 2 / log 2; row 2: 0
    m = random_causal(np.random.default_rng(0), 40)
    rows = m.astype(np.float64)
    expected = np.mean(
        [-(r[r > 0] * np.log(r[r > 0])).sum() / np.log(i + 1) for i, r in enumerate(rows) if i]
    )
    assert one(streamed.row_entropy, m) == pytest.approx(expected, rel=1e-6)


def test_within_and_across_shot_mass():
    shot = [0, 1, 1, 2, 2]
    # Uniform causal attention: query 3 (shot 2) has keys 0..3: 1/4 own shot, 2/4 shot 1;
    # query 4 has keys 0..4: 2/5 own shot, 2/5 shot 1.
    within, across = one(streamed.shot_masses, uniform_causal(5), shot)
    assert within == pytest.approx((1 / 4 + 2 / 5) / 2)
    assert across == pytest.approx((2 / 4 + 2 / 5) / 2)
    # Block-diagonal: every token attends only inside its own shot.
    blocks = np.zeros((5, 5))
    for s in set(shot):
        idx = np.flatnonzero(np.array(shot) == s)
        blocks[np.ix_(idx, idx)] = np.tril(np.ones((len(idx), len(idx))))
    blocks /= blocks.sum(axis=1, keepdims=True)
    assert one(streamed.shot_masses, blocks, shot) == pytest.approx((1.0, 0.0))
    assert np.isnan(one(streamed.shot_masses, blocks, [0, 1, 1, 1, 1])).all()  # no shot ≥ 2


def test_clue_to_target_mass():
    lay = layout(4, segment=["template", "target", "generated", "generated"])
    # queries 2, 3 put 1/3 and 1/4 on the target token 1
    mass = one(streamed.block_mass, uniform_causal(4), lay.clue_queries, lay.target_keys)
    assert mass == pytest.approx(7 / 24)
    assert np.isnan(one(streamed.block_mass, uniform_causal(4), np.array([], int), lay.target_keys))


def test_cosine_correlations_match_scipy_over_the_strict_triangle():
    rng = np.random.default_rng(1)
    n = 30
    a = random_causal(rng, n)
    cosine = rng.uniform(-1, 1, (n, n)).astype(np.float16)
    pearson, spearman = one(streamed.cosine_correlations, a, layout(n, cosine=cosine).cosine_pairs)
    rows, cols = np.tril_indices(n, -1)
    x, y = a[rows, cols].astype(np.float64), cosine[rows, cols].astype(np.float64)
    assert pearson == pytest.approx(pearsonr(x, y).statistic, abs=1e-6)
    assert spearman == pytest.approx(spearmanr(x, y).statistic, abs=1e-9)
    # A map that equals the cosine on the triangle correlates perfectly.
    assert float(streamed.correlation(y[None], streamed._unit_centered(y))[0]) == pytest.approx(1.0)


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
    pearson, spearman = one(streamed.cosine_correlations, a, lay.word_cosine_pairs)
    assert pearson == pytest.approx(pearsonr(x, y).statistic, abs=1e-6)
    assert spearman == pytest.approx(spearmanr(x, y).statistic, abs=1e-9)
    # Built to follow the cosine between word tokens: an affine copy of it there, noise elsewhere.
    follows = a.astype(np.float64)
    follows[rows[pick], cols[pick]] = 0.01 + 0.004 * y
    follows = follows.astype(np.float16)
    assert one(streamed.cosine_correlations, follows, lay.word_cosine_pairs)[0] == pytest.approx(
        1.0, abs=1e-3
    )
    assert abs(one(streamed.cosine_correlations, follows, lay.cosine_pairs)[0]) < 0.5
    # Fewer than two pairs: nothing to correlate.
    no_words = layout(n, segment=np.array(["template"] * n), cosine=cosine)
    assert np.isnan(one(streamed.cosine_correlations, a, no_words.word_cosine_pairs)).all()


def test_average_ranks_of_float16_match_rankdata():
    """Row by row as scipy's, exactly: the histogram's (rows of at least ``HISTOGRAM_PAIRS``
    non-negative float16, ties and zeros), and the sort's for shorter rows and for a batch with a
    negative value, a NaN (its row all NaN, as scipy's), −0 (equal to 0) or of another dtype."""
    rng = np.random.default_rng(2)
    length = streamed.HISTOGRAM_PAIRS + 50
    values = np.stack(
        [
            np.concatenate([np.zeros(50), rng.exponential(1e-3, length - 52), [1.0, 1.0]]),
            np.concatenate([np.full(100, 0.5), rng.exponential(1e-2, length - 102), [0.0, 1.0]]),
            np.concatenate([[-1.0, 0.5, 0.5, -0.0, 0.0], rng.uniform(-1, 1, length - 5)]),
            np.concatenate([[np.nan], rng.uniform(0, 1, length - 1)]),
        ]
    ).astype(np.float16)
    expected = rankdata(values, axis=1)
    assert np.isnan(expected[3]).all()

    def ranks(v: np.ndarray) -> np.ndarray:
        got = streamed.average_ranks(torch.from_numpy(v))
        assert got.dtype == torch.float64
        return got.numpy()

    np.testing.assert_array_equal(ranks(values), expected)
    np.testing.assert_array_equal(ranks(values[:2]), expected[:2])  # the histogram
    np.testing.assert_array_equal(ranks(values[:2, :500]), rankdata(values[:2, :500], axis=1))  # the sort
    np.testing.assert_array_equal(ranks(values[2:3]), expected[2:3])  # the sort
    np.testing.assert_array_equal(ranks(values.astype(np.float32)), expected)
    many_ties = rng.integers(0, 5, (3, 20000)).astype(np.float16) / 8  # long runs of equal values
    np.testing.assert_array_equal(ranks(many_ties), rankdata(many_ties, axis=1))
    np.testing.assert_array_equal(ranks(many_ties.astype(np.float32)), rankdata(many_ties, axis=1))


def test_ranks_agree_with_the_theory_module_and_the_svd():
    a = uniform_causal(12)
    sigma = singular_values(a)
    assert np.allclose(sigma, np.linalg.svd(a, compute_uv=False))
    for eps in (0.05, 0.1, 0.3):
        assert metrics.epsilon_rank(sigma, eps) == theory.epsilon_rank(a, eps)
    assert one(streamed.stable_rank, a) == pytest.approx((sigma**2).sum() / sigma[0] ** 2, rel=1e-5)


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
    a = torch.from_numpy(np.stack([random_causal(rng, n) for _ in range(3)]))
    shot = [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 0, 0]
    segment = ["template"] * 9 + ["target", "generated", "generated"]
    lay = layout(n, shot, segment, rng.uniform(-1, 1, (n, n)).astype(np.float16))
    expected = torch.stack(
        [
            streamed.row_entropy(a),
            streamed.self_mass(a),
            streamed.previous_mass(a),
            streamed.sink_mass(a),
            *streamed.shot_masses(a, shot),
            streamed.block_mass(a, np.array([10, 11]), np.array([9])),
            *streamed.cosine_correlations(a, lay.cosine_pairs),
            *streamed.cosine_correlations(a, lay.word_cosine_pairs),
            streamed.stable_rank(a),
        ],
        dim=1,
    ).numpy()
    got = streamed.streamed_metrics(a, lay)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    assert np.array_equal(got, expected, equal_nan=True)
    assert np.array_equal(
        streamed.streamed_metrics(a.numpy(), lay), got, equal_nan=True
    )  # numpy: CPU tensors


def bits(values: np.ndarray) -> np.ndarray:
    """float64 values as their bit patterns, every NaN as one pattern (equal bits: equal values,
    the sign of zero included)."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isnan(values), np.nan, values).view(np.uint64)


def reference_metrics(a: np.ndarray, shot: np.ndarray, segment: np.ndarray, cosine: np.ndarray) -> dict:
    """The streamed metrics of one map from their definitions (scipy and numpy's SVD, float64)."""
    x, n = a.astype(np.float64), len(a)
    rows = range(1, n)
    queries = np.flatnonzero(shot >= 2)
    clue, target = np.flatnonzero(segment == "generated"), np.flatnonzero(segment == "target")
    words = np.isin(segment, store.WORD_SEGMENTS)

    def correlations(pick: np.ndarray) -> tuple[float, float]:
        i, j = np.tril_indices(n, -1)
        i, j = i[pick[i] & pick[j]], j[pick[i] & pick[j]]
        values, cos = x[i, j], cosine[i, j].astype(np.float64)
        if len(values) < 2 or np.ptp(values) == 0 or np.ptp(cos) == 0:
            return np.nan, np.nan
        return pearsonr(values, cos).statistic, spearmanr(values, cos).statistic

    def mean(values) -> float:
        return float(np.mean(values)) if len(values) else np.nan

    sigma = np.linalg.svd(x, compute_uv=False)
    return {
        "row_entropy": mean([entr(x[i, : i + 1]).sum() / np.log(i + 1) for i in rows]),
        "self_mass": mean([x[i, i] for i in rows]),
        "previous_mass": mean([x[i, i - 1] for i in rows]),
        "sink_mass": mean([x[i, 0] for i in rows]),
        "within_shot_mass": mean([x[q, shot == shot[q]].sum() for q in queries]),
        "across_shot_mass": mean([x[q, (shot != shot[q]) & (shot >= 1)].sum() for q in queries]),
        "clue_target_mass": mean(x[np.ix_(clue, target)].sum(axis=1)) if len(target) else np.nan,
        **dict(zip(["cosine_pearson", "cosine_spearman"], correlations(np.ones(n, bool)))),
        **dict(zip(["cosine_pearson_words", "cosine_spearman_words"], correlations(words))),
        "stable_rank": (sigma**2).sum() / sigma[0] ** 2 if sigma[0] > 0 else np.nan,
    }


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def metric_cases(rng: np.random.Generator, sizes=(1, 2, 7, 40, 130)) -> list[tuple]:
    """(n, token_shot, token_segment, cosine, maps [5, n, n] float16) of each size under three
    layouts: shots and a clue; no shot ≥ 2 and no clue; no word pairs. The maps: random causal
    ones (ties and zeros from float16; peaked with a row of zeros, as a value-weighted map can
    have; flat), the uniform causal map and the identity."""
    segments = ["template", "instruction", "shot_word", "shot_clue", "target", "generated"]
    cases = []
    for n in sizes:
        shot = rng.integers(0, 4, n)
        segment = rng.choice(segments, n)
        cosine = rng.uniform(-1, 1, (n, n)).astype(np.float16)
        no_clue = np.where(segment == "generated", "template", segment)
        maps = np.stack(
            [random_causal(rng, n), random_causal(rng, n, scale=12.0), uniform_causal(n), np.eye(n),
             random_causal(rng, n, scale=0.1)]
        ).astype(np.float16)  # fmt: skip
        maps[1, n // 2] = 0  # a row of zeros
        for labels in [(shot, segment), (np.minimum(shot, 1), no_clue), (shot, np.full(n, "template"))]:
            cases.append((n, *labels, cosine, maps))
    return cases


def test_row_entropy_over_the_causal_keys_is_the_sum_over_whole_rows_bit_for_bit():
    """The entropy's rows, computed in blocks over the keys up to each block's last row, equal
    bit for bit the float64 sums over whole rows of the float32 terms a·log a (how they were
    computed before), for float16 maps of any length: peaked, flat, with values of one float16
    step, rows of zeros (a value-weighted map's), and maps with values above the diagonal (whose
    blocks take whole rows)."""
    rng = np.random.default_rng(11)
    for n in (2, 3, 9, 40, 129, 330):
        maps = np.stack([random_causal(rng, n, scale=scale) for scale in (0.3, 3.0, 30.0)])
        maps[0, n // 2 :, : n // 3] = 2.0**-24  # one float16 step, left of the peaks
        maps[1, n - 1] = 0.0  # a row of zeros
        maps = np.concatenate([maps, np.full((1, n, n), 1 / n)]).astype(np.float16)  # not causal
        a32 = torch.from_numpy(maps).float()
        terms = streamed._xlogx(a32[:, 1:])  # [map, row i ≥ 1, key]: whole rows
        whole = -terms.double().sum(dim=-1)
        log_rows = torch.from_numpy(np.log(np.arange(2, n + 1, dtype=np.float64)))
        expected = (whole / log_rows).sum(dim=-1) / (n - 1)
        for got in (streamed.row_entropy(a32), streamed.row_entropy(torch.from_numpy(maps))):
            assert torch.equal(got, expected), n


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_batched_metrics_are_each_maps_own(dtype):
    """A batch of maps [map, query, key] gets, map by map, bit for bit what each map gets in a
    batch of its own, whether the caller runs torch on one thread or two (so the capture's
    stores are those of one map at a time, and the store pass recomputes them exactly), and
    the values of the metrics' definitions: maps with ties, zeros (whole rows of them, as a
    value-weighted map's), a one-token map, prompts without shots ≥ 2, without a clue,
    without word pairs."""
    cases = metric_cases(np.random.default_rng(6))
    total = 0
    for n, shot, segment, cosine, maps16 in cases:
        maps = torch.from_numpy(maps16).to(dtype)
        lay = streamed.MapLayout(shot, segment, cosine)
        batched = streamed.streamed_metrics(maps, lay)
        alone = np.concatenate([streamed.streamed_metrics(m[None], lay) for m in maps])
        assert batched.shape == (len(maps), len(metrics.STREAMED))
        assert np.array_equal(bits(batched), bits(alone)), (n, dtype)
        with torch_threads(1):
            assert np.array_equal(bits(streamed.streamed_metrics(maps, lay)), bits(batched)), (n, dtype)
        for a, row in zip(maps16, batched):
            expected = reference_metrics(a, shot, segment, cosine)
            for name, value in zip(metrics.STREAMED, row):
                # power iteration stops at a relative change of 1e-6: slow on near-equal σ₁, σ₂
                tolerance = 1e-3 if name == "stable_rank" else 2e-6
                expect = pytest.approx(expected[name], rel=tolerance, abs=tolerance, nan_ok=True)
                assert value == expect, (n, name)
        total += batched.size
    assert total == len(cases) * 5 * len(metrics.STREAMED)


def test_streamed_metrics_in_batches_of_batch_bytes(monkeypatch):
    """Maps beyond ``BATCH_BYTES`` of float32 are measured batch by batch: the same values."""
    rng = np.random.default_rng(7)
    n = 20
    maps = np.stack([random_causal(rng, n) for _ in range(5)])
    lay = layout(n, rng.integers(0, 4, n), cosine=rng.uniform(-1, 1, (n, n)).astype(np.float16))
    whole = streamed.streamed_metrics(maps, lay)
    monkeypatch.setattr(streamed, "BATCH_BYTES", 2 * 4 * n * n)  # two maps a batch
    assert np.array_equal(bits(streamed.streamed_metrics(maps, lay)), bits(whole))


def constructed_maps() -> list[tuple[np.ndarray, streamed.MapLayout]]:
    """The maps built above with their layouts, as float16 (as the capture stores maps)."""
    rng = np.random.default_rng(8)
    shot = [0, 1, 1, 2, 2]
    blocks = np.zeros((5, 5))
    for s in set(shot):
        idx = np.flatnonzero(np.array(shot) == s)
        blocks[np.ix_(idx, idx)] = np.tril(np.ones((len(idx), len(idx))))
    blocks /= blocks.sum(axis=1, keepdims=True)
    segment = np.array(["template", "instruction", "shot_word", "shot_clue", "template", "shot_word"] * 4)
    cosine30, cosine24 = (rng.uniform(-1, 1, (n, n)).astype(np.float16) for n in (30, 24))
    follows = random_causal(rng, 24).astype(np.float64)
    rows, cols = np.tril_indices(24, -1)
    follows[rows, cols] = 0.01 + 0.004 * cosine24[rows, cols]
    cases = [
        (uniform_causal(4), layout(4, segment=["template", "target", "generated", "generated"])),
        (np.eye(5), layout(5, cosine=uniform_causal(5).astype(np.float16))),
        (block_uniform(3, 4), layout(12, rng.integers(0, 4, 12))),
        (np.full((6, 6), 1 / 6), layout(6)),
        (np.array([[1, 0, 0], [0.5, 0.5, 0], [1, 0, 0]]), layout(3)),
        (random_causal(rng, 40), layout(40, rng.integers(0, 5, 40))),
        (uniform_causal(5), layout(5, shot)),
        (blocks, layout(5, shot)),
        (random_causal(rng, 30), layout(30, cosine=cosine30)),
        (random_causal(rng, 24), layout(24, segment=segment, cosine=cosine24)),
        (follows, layout(24, segment=segment, cosine=cosine24)),
        (uniform_causal(12), layout(12)),
    ]
    return [(np.asarray(a).astype(np.float16), lay) for a, lay in cases]


def test_streamed_metrics_match_the_numpy_route_on_the_constructed_maps():
    """Every metric of the maps above within its tolerance (tests/helpers.py) of the numpy route's."""
    differences = []
    for a, lay in constructed_maps():
        got = streamed.streamed_metrics(torch.from_numpy(a[None]), lay)
        expected = np_streamed_metrics(a[None], np_layout(lay.token_shot, lay.token_segment, lay.cosine))
        differences.append(reference_differences(got, expected))
    print({name: max(d[name] for d in differences) for name in metrics.STREAMED})


def test_streamed_metrics_match_the_numpy_route_on_random_maps():
    """Random causal float16 maps of n = 2 … 300 (ties, zeros, a row of zeros, the uniform map and
    the identity; shots, clue and word pairs or none): every metric within its tolerance of the
    numpy route's, in the capture's batches (five maps at once)."""
    cases = metric_cases(np.random.default_rng(9), (*range(2, 33), 47, 64, 100, 150, 181, 256, 300))
    differences = []
    for _, shot, segment, cosine, maps in cases:
        got = streamed.streamed_metrics(torch.from_numpy(maps), streamed.MapLayout(shot, segment, cosine))
        expected = np_streamed_metrics(maps, np_layout(shot, segment, cosine))
        differences.append(reference_differences(got, expected))
    largest = {name: max(d[name] for d in differences) for name in metrics.STREAMED}
    print(largest)
    assert largest["self_mass"] == largest["clue_target_mass"] == (0.0, 0.0)
    assert set(REFERENCE_TOLERANCES) == set(metrics.STREAMED)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_streamed_metrics_on_cuda_match_the_cpu():
    """The same code on the GPU (maps, layout tensors and every step on the device): the CPU's
    values within the tolerances of the numpy reference (both are sums in other orders)."""
    cases = metric_cases(np.random.default_rng(10), (2, 7, 40, 130, 300))
    for _, shot, segment, cosine, maps in cases:
        lay = streamed.MapLayout(shot, segment, cosine)
        cpu = streamed.streamed_metrics(torch.from_numpy(maps), lay)
        cuda = streamed.streamed_metrics(torch.from_numpy(maps).cuda(), lay)
        assert lay.on("cuda").log_rows.is_cuda and cuda.dtype == np.float64
        reference_differences(cuda, cpu)


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
