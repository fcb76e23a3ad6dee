"""The head table: OV-circuit norms against dense products on a tiny GQA model, the join of its
sources (one row per layer × head, values as in the sources), and the rank correlations on
tables built to correlate perfectly or not at all."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from attnscope import architecture, circuits, headtable, headtypes
from attnscope.plots import plot_head_correlations
from attnscope.stats import CONFIDENCE, paired_bootstrap


@pytest.fixture(scope="module")
def gained_mistral(tiny_mistral):
    """The tiny Mistral (4 query heads, 2 KV heads) with a seeded non-trivial input-norm gain."""
    model = copy.deepcopy(tiny_mistral[0])
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for block in architecture.decoder_layers(model):
            gain = block.input_layernorm.weight
            gain.copy_(0.5 + torch.rand(gain.shape, generator=generator))
    return model


def dense_ov(model: torch.nn.Module, pairing) -> pd.DataFrame:
    """The OV statistics from the hidden × hidden product W_O,h W_V,g diag(γ) and its full SVD;
    ``pairing(h, n_heads, n_kv)`` gives query head h's KV head."""
    n_heads, n_kv, d = architecture.attention_shape(model.config)
    rows = []
    for layer, block in enumerate(architecture.decoder_layers(model)):
        v = block.self_attn.v_proj.weight.detach().double()
        o = block.self_attn.o_proj.weight.detach().double()
        gain = block.input_layernorm.weight.detach().double()
        for form, scale in (("raw", torch.ones_like(gain)), ("folded", gain)):
            for h in range(n_heads):
                g = pairing(h, n_heads, n_kv)
                ov = o[:, h * d : (h + 1) * d] @ v[g * d : (g + 1) * d] @ torch.diag(scale)
                sigma = torch.linalg.svdvals(ov)
                rows.append(
                    {
                        "layer": layer,
                        "head": h,
                        "form": form,
                        "trace": torch.trace(ov).item(),
                        "frobenius_norm": torch.linalg.matrix_norm(ov).item(),
                        "sigma_max": sigma[0].item(),
                        "stable_rank": (sigma.square().sum() / sigma[0] ** 2).item(),
                    }
                )
    return pd.DataFrame(rows)


STATS = ["trace", "frobenius_norm", "sigma_max", "stable_rank"]


def test_ov_circuits_equal_dense_products_with_grouped_query_pairing(gained_mistral):
    got = circuits.ov_circuits(gained_mistral)
    n_heads, n_kv, _ = architecture.attention_shape(gained_mistral.config)
    assert n_kv < n_heads  # the fixture has grouped-query attention
    assert len(got) == 2 * 2 * n_heads and set(got["form"]) == {"raw", "folded"}
    expected = dense_ov(gained_mistral, lambda h, n, k: h // (n // k))
    merged = got.merge(expected, on=["layer", "head", "form"], suffixes=("", "_dense"))
    assert len(merged) == len(got)
    for stat in STATS:
        np.testing.assert_allclose(merged[stat], merged[f"{stat}_dense"], rtol=1e-5, atol=1e-8)
    assert (got["kv_head"] == got["head"] // (n_heads // n_kv)).all()
    # the folded form differs from the raw one (the gain is not 1), and so would a wrong pairing
    raw, folded = (got[got["form"] == f].reset_index() for f in ("raw", "folded"))
    assert not np.allclose(raw["frobenius_norm"], folded["frobenius_norm"], rtol=1e-3)
    wrong = dense_ov(gained_mistral, lambda h, n, k: h % k)
    merged = got.merge(wrong, on=["layer", "head", "form"], suffixes=("", "_wrong"))
    assert not np.allclose(merged["frobenius_norm"], merged["frobenius_norm_wrong"], rtol=1e-3)


def sources(model: torch.nn.Module, n_prompts: int = 3, seed: int = 0):
    """The QK and OV tables of ``model``, a head-types table and a metrics table of ``n_prompts``
    prompts (rows per prompt × layer × head, head −1 the head mean) with seeded random values."""
    rng = np.random.default_rng(seed)
    n_heads, n_kv, _ = architecture.attention_shape(model.config)
    n_layers = model.config.num_hidden_layers
    kv = architecture.kv_head_index(n_heads, n_kv).tolist()
    types = headtypes.head_types_table(rng.random((2, 3, n_layers, n_heads)), kv)
    rows = []
    for p in range(n_prompts):
        for layer in range(n_layers):
            for head in [*range(n_heads), -1]:
                values = {m: rng.random() for m in headtable.BEHAVIOUR_METRICS}
                rows.append({"prompt_id": f"e/{p:03d}", "layer": layer, "head": head, **values})
    return circuits.qk_circuits(model), circuits.ov_circuits(model), types, pd.DataFrame(rows)


def test_the_table_has_one_row_per_head_with_the_sources_values(gained_mistral):
    qk, ov, types, metrics = sources(gained_mistral)
    halves = [metrics[metrics["prompt_id"] != "e/002"], metrics[metrics["prompt_id"] == "e/002"]]
    values = metrics.assign(**{m: metrics[m] * 2 + 1 for m in headtable.BEHAVIOUR_METRICS})  # built to differ
    table = headtable.head_table(qk, ov, types, halves, [values], 0.4)  # two experiments' tables, pooled
    n_heads = architecture.attention_shape(gained_mistral.config)[0]
    assert list(table.columns) == list(headtable.COLUMNS)
    assert len(table) == 2 * n_heads and not table.duplicated(["layer", "head"]).any()
    assert (table["n_prompts"] == 3).all()
    for row in table.itertuples():
        q = qk[(qk["form"] == "folded") & (qk["layer"] == row.layer) & (qk["head"] == row.head)].iloc[0]
        o = ov[(ov["form"] == "folded") & (ov["layer"] == row.layer) & (ov["head"] == row.head)].iloc[0]
        t = types[(types["layer"] == row.layer) & (types["head"] == row.head)].iloc[0]
        assert (row.qk_sigma_max, row.qk_stable_rank, row.qk_trace) == (q.sigma_max, q.stable_rank, q.trace)
        assert (row.ov_frobenius_norm, row.ov_sigma_max) == (o.frobenius_norm, o.sigma_max)
        assert (row.induction, row.kv_head) == (t.induction, t.kv_head)
        best = max(headtypes.SCORES, key=lambda score: t[score])  # the type, typed at 0.4 here
        assert row.head_type == (best if t[best] >= 0.4 else headtypes.NO_TYPE)
        for metric in headtable.BEHAVIOUR_METRICS:
            values = [
                r[metric]
                for _, r in metrics.iterrows()
                if r["layer"] == row.layer and r["head"] == row.head  # never the head mean (−1)
            ]
            assert getattr(row, metric) == pytest.approx(sum(values) / len(values), abs=1e-12)
            assert getattr(row, f"value_{metric}") == pytest.approx(2 * getattr(row, metric) + 1, abs=1e-12)


def test_a_head_missing_from_a_source_is_refused(gained_mistral):
    qk, ov, types, metrics = sources(gained_mistral)
    with pytest.raises(ValueError, match="heads missing"):
        headtable.head_table(qk, ov, types.iloc[1:], [metrics], [metrics], 0.4)
    without_head = metrics[~((metrics["layer"] == 1) & (metrics["head"] == 2))]
    with pytest.raises(ValueError, match="heads missing"):
        headtable.head_table(qk, ov, types, [without_head], [metrics], 0.4)
    with pytest.raises(ValueError, match="heads missing"):
        headtable.head_table(qk, ov, types, [metrics], [without_head], 0.4)


def constructed(n: int = 270, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    behaviour = rng.random(n)
    layer = np.arange(n) // 9  # 30 layers of 9 heads
    return pd.DataFrame(
        {
            "layer": layer,
            "deep": layer + 0.5 * rng.random(n),  # depth plus noise unrelated to the behaviour
            "depth_driven": layer + 0.5 * rng.random(n),
            "entropy": behaviour,
            "monotone": np.exp(-3 * behaviour),  # decreasing: ρ = −1
            "increasing": behaviour**3 + 2,  # ρ = 1
            "shuffled": rng.permutation(behaviour),
            "constant": np.ones(n),
        }
    )


def test_rank_correlation_of_monotone_shuffled_and_constant_columns():
    table = constructed()
    both = headtable.weight_behaviour_correlations(
        table, ["increasing", "monotone", "shuffled", "constant"], ["entropy"], n_resamples=500
    )
    assert list(both.columns) == list(headtable.CORRELATION_COLUMNS)
    got = both[both["scope"] == "heads"].set_index("weight")
    assert got.loc["increasing", "rho"] == pytest.approx(1.0)
    assert got.loc["increasing", ["low", "high"]].tolist() == pytest.approx([1.0, 1.0])
    assert got.loc["monotone", "rho"] == pytest.approx(-1.0)
    shuffled = got.loc["shuffled"]
    assert abs(shuffled["rho"]) < 0.15 and shuffled["low"] < shuffled["rho"] < shuffled["high"]
    assert shuffled["low"] < 0 < shuffled["high"]
    assert np.isnan(got.loc["constant", ["rho", "low", "high"]].astype(float)).all()
    assert (got["n_heads"] == 270).all()
    rho = headtable.rank_correlation(table["shuffled"], table["entropy"], n_resamples=100)[0]
    assert rho == pytest.approx(stats.spearmanr(table["shuffled"], table["entropy"]).statistic, abs=1e-12)
    within = both[both["scope"] == "within_layer"].set_index("weight")
    assert within.loc["increasing", "rho"] == pytest.approx(1.0)  # monotone in every layer too
    assert abs(within.loc["shuffled", "rho"]) < 0.15


def rankdata_correlation(x, y, n_resamples: int, seed: int) -> tuple[float, float, float]:
    """The former route: the pairs themselves through the paired bootstrap, every resample ranked
    by ``scipy.stats.rankdata``."""

    def spearman(x, y, axis=-1):
        rx, ry = stats.rankdata(x, axis=axis), stats.rankdata(y, axis=axis)
        rx = rx - rx.mean(axis=axis, keepdims=True)
        ry = ry - ry.mean(axis=axis, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (rx * ry).sum(axis=axis) / np.sqrt((rx * rx).sum(axis=axis) * (ry * ry).sum(axis=axis))

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    rho = float(spearman(x, y)) if len(x) > 2 else np.nan
    if not np.isfinite(rho):
        return np.nan, np.nan, np.nan
    return (rho, *paired_bootstrap((x, y), spearman, CONFIDENCE, n_resamples, seed))


def test_average_ranks_equal_rankdata_on_many_ties():
    """Resamples, the jackknife, the sample itself and a batch of batches of values with many
    ties, none, one value, and -0 against 0."""
    rng = np.random.default_rng(3)
    for n, levels in ((50, 4), (30, 30), (7, 2), (3, 1), (6, 0)):
        values = rng.integers(0, levels, n).astype(float) if levels else np.array([0.0, -0.0, 1, -0.0, 2, 0])
        codes = np.unique(values, return_inverse=True)[1]
        jackknife = np.array([np.delete(np.arange(n), k) for k in range(n)])
        for indices in (np.arange(n), rng.integers(0, n, (200, n)), jackknife, rng.integers(0, n, (2, 3, 5))):
            got = headtable.average_ranks(codes, indices)
            np.testing.assert_array_equal(got, stats.rankdata(values[indices], axis=-1))
            assert got.dtype == np.float64


@pytest.mark.routes
@pytest.mark.parametrize("block", [headtable.RANK_BLOCK, 50])
def test_the_index_bootstrap_gives_the_rankdata_routes_bits(block, monkeypatch):
    """Ties, NaN pairs, constant sides, a side constant once resampled, small samples: (ρ, low,
    high) bit for bit as the former route's (the same resamples, jackknife and ranks), whether
    the resamples are ranked in one block or one or two at a time."""
    monkeypatch.setattr(headtable, "RANK_BLOCK", block)
    rng = np.random.default_rng(5)
    cases = []
    for n in (3, 5, 8, 12, 20, 60):
        x, y = rng.integers(0, 4, n).astype(float), rng.normal(size=n).round(1)
        cases += [(x, y), (y, x), (x, -x + rng.integers(0, 2, n)), (x, np.ones(n))]
    x, y = rng.normal(size=40), rng.integers(0, 3, 40).astype(float)
    x[[2, 9]], y[[9, 30]] = np.nan, np.nan
    cases += [(x, y), (x, -np.exp(x)), (np.array([1.0, np.nan, 2.0, 3.0]), np.array([2.0, 1.0, np.nan, 1.0]))]
    cases += [(np.array([0.0, 1.0, 2.0, 3.0, 4.0]), np.array([0.0, 0.0, 0.0, 0.0, 1.0]))]
    bounded = 0
    for seed, (x, y) in enumerate(cases):
        got = headtable.rank_correlation(x, y, n_resamples=300, seed=seed)
        expected = rankdata_correlation(x, y, 300, seed)
        assert np.array_equal(got, expected, equal_nan=True), (seed, got, expected)
        bounded += np.isfinite(got[1])
    assert bounded >= 10  # small samples have none (a constant resample has no ρ)


def test_within_layer_ranks_take_depth_out():
    """Two columns driven by depth correlate over all heads, not among the heads of a layer."""
    got = headtable.weight_behaviour_correlations(
        constructed(), ["deep"], ["depth_driven"], n_resamples=300
    ).set_index("scope")
    assert got.loc["heads", "rho"] > 0.95 and got.loc["heads", "low"] > 0.9
    assert abs(got.loc["within_layer", "rho"]) < 0.15
    assert got.loc["within_layer", "low"] < 0 < got.loc["within_layer", "high"]


def test_the_correlation_figure_draws_a_panel_per_variant():
    table = constructed(40)
    correlations = pd.concat(
        [
            headtable.weight_behaviour_correlations(
                table, ["increasing", "shuffled"], ["entropy"], n_resamples=50
            ).assign(variant=v)
            for v in ("trained", "random-s0")
        ]
    )
    fig = plot_head_correlations(correlations, "test")
    titles = [ax.get_title() for ax in fig.axes[:4]]
    assert titles == [
        "trained · heads",
        "trained · within layer",
        "random-s0 · heads",
        "random-s0 · within layer",
    ]
