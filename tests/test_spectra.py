"""Weight spectra, base alignment and the learned-vs-random table (attnscope.spectra)."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM
from transformers.models.llama.modeling_llama import repeat_kv

from attnscope import architecture, circuits, comparison, io, matrices, models, spectra, spectrastore


def tiny_llama(seed: int = 0, tied: bool = False, layers: int = 2, **overrides) -> LlamaForCausalLM:
    """A tiny random Llama with grouped-query attention (4 query heads, 2 KV heads)."""
    kwargs = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=0.02,
        tie_word_embeddings=tied,
    )
    kwargs.update(overrides)
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**kwargs)).eval()


def random_groups(seed: int = 0) -> list[spectra.WeightGroup]:
    """Same-shaped float32 matrices of three shapes (tall, wide, square), three of each."""
    gen = torch.Generator().manual_seed(seed)
    shapes = {"tall": (90, 40), "wide": (30, 70), "square": (50, 50)}
    return [
        spectra.WeightGroup(
            name, (0, 1, 2), tuple(torch.randn(*shape, generator=gen) * 0.1 for _ in range(3))
        )
        for name, shape in shapes.items()
    ]


# --- decompositions ----------------------------------------------------------------------


@pytest.mark.parametrize("method", ["gram64", "svd32", "svd64", "auto"])
@pytest.mark.parametrize("batched", [False, True])
def test_sigma2_matches_numpy_svd(method, batched):
    groups = random_groups()
    got = spectra.sigma2_groups(groups, method=method, threads=2, batched=batched, max_batch_mb=0.02)
    rtol = 1e-4 if method == "svd32" else 1e-9
    for group in groups:
        assert got[group.matrix].shape == (3, min(group.shape))
        for i, weight in enumerate(group.weights):
            expected = np.linalg.svd(weight.double().numpy(), compute_uv=False) ** 2
            assert np.all(np.diff(got[group.matrix][i]) <= 0), "σ² must be descending"
            np.testing.assert_allclose(got[group.matrix][i], expected, rtol=rtol, atol=1e-12 * expected[0])


@pytest.mark.parametrize("batched", [False, True])
def test_shuffled_spectra_are_those_of_each_matrix_shuffled_with_its_own_seed(batched):
    groups = random_groups()
    got = spectra.sigma2_groups(groups, threads=2, batched=batched, max_batch_mb=0.02, shuffle_seed=3)
    plain = spectra.sigma2_groups(groups, threads=2)
    for group in groups:
        for i, layer in enumerate(group.layers):
            shuffled = spectra.shuffle_entries(
                group.weights[i].double(), spectra.entry_seed(3, group.matrix, layer)
            )
            expected = np.linalg.svd(shuffled.numpy(), compute_uv=False) ** 2
            np.testing.assert_allclose(got[group.matrix][i], expected, rtol=1e-9, atol=1e-12 * expected[0])
            assert got[group.matrix][i].sum() == pytest.approx(plain[group.matrix][i].sum(), rel=1e-12)
            assert not np.allclose(got[group.matrix][i], plain[group.matrix][i], rtol=1e-3)
    seeds = {spectra.entry_seed(3, g.matrix, layer) for g in groups for layer in g.layers}
    assert len(seeds) == 9 and spectra.entry_seed(4, "tall", 0) != spectra.entry_seed(3, "tall", 0)


def folded_like(group: spectra.WeightGroup, gains: list[float]) -> spectra.WeightGroup:
    """``group`` folded with a constant gain per layer (its weight tensors shared)."""
    scales = tuple(torch.full((group.shape[1],), gain, dtype=torch.float64) for gain in gains)
    return spectra.WeightGroup(group.matrix, group.layers, group.weights, scales)


def count_decompositions(monkeypatch) -> list[int]:
    """Patch both decomposition routes to record how many matrices each call decomposes."""
    counts: list[int] = []
    numpy_route, torch_route = spectra._sigma2_numpy, spectra._sigma2_torch

    def on_numpy(weight):
        counts.append(1)
        return numpy_route(weight)

    def on_torch(batch, method):
        counts.append(batch.shape[0])
        return torch_route(batch, method)

    monkeypatch.setattr(spectra, "_sigma2_numpy", on_numpy)
    monkeypatch.setattr(spectra, "_sigma2_torch", on_torch)
    return counts


@pytest.mark.routes
@pytest.mark.parametrize("shuffle_seed", [None, 3])
@pytest.mark.parametrize("batched", [False, True])
def test_a_folded_group_with_unit_gains_is_not_decomposed_again(monkeypatch, batched, shuffle_seed):
    raw = random_groups()
    unit = folded_like(raw[0], [1.0, 1.0, 1.0])
    scaled = folded_like(raw[1], [1.0, 0.5, 1.0])  # one layer's gain is not one: decomposed
    options = {"threads": 2, "batched": batched, "max_batch_mb": 0.02, "shuffle_seed": shuffle_seed}
    alone = {g.key: spectra.sigma2_groups([g], **options)[g.key] for g in (unit, scaled)}
    counts = count_decompositions(monkeypatch)
    got = spectra.sigma2_groups([*raw, unit, scaled], **options)
    assert sum(counts) == 3 * 3 + 3 and list(got) == ["tall", "wide", "square", "tall_folded", "wide_folded"]
    np.testing.assert_array_equal(got["tall_folded"], alone["tall_folded"])
    np.testing.assert_array_equal(got["tall_folded"], got["tall"])
    np.testing.assert_array_equal(got["wide_folded"], alone["wide_folded"])
    np.testing.assert_allclose(got["wide_folded"][1], got["wide"][1] * 0.25, rtol=1e-9)
    assert got["tall_folded"] is not got["tall"]


def test_a_folded_group_is_decomposed_where_its_raw_group_is_not_the_same_weights(monkeypatch):
    raw = random_groups()
    other = random_groups(seed=1)[0]
    unit = folded_like(other, [1.0, 1.0, 1.0])
    counts = count_decompositions(monkeypatch)
    got = spectra.sigma2_groups([raw[0], unit], threads=2)
    assert sum(counts) == 6
    assert not np.allclose(got["tall_folded"], got["tall"])


def test_unknown_method_is_an_error():
    with pytest.raises(ValueError, match="spectra.method"):
        spectra.sigma2_groups(random_groups(), method="lanczos")


def test_weight_groups_cover_every_matrix_and_tied_embedding_once():
    model = tiny_llama(tied=True)
    groups = {g.matrix: g for g in spectra.weight_groups(model, include_embeddings=True)}
    assert list(groups) == ["embed", *matrices.MATRIX_TYPES]
    assert (
        groups["q"].shape == (64, 64) and groups["k"].shape == (32, 64) and groups["down"].shape == (64, 96)
    )
    assert groups["embed"].layers == (-1,) and groups["up"].layers == (0, 1)
    untied = {g.matrix: g for g in spectra.weight_groups(tiny_llama(tied=False), include_embeddings=True)}
    assert untied["lm_head"].layers == (2,)
    assert "embed" not in {g.matrix for g in spectra.weight_groups(model)}


# --- Marchenko–Pastur edge and spikes ----------------------------------------------------


def test_mp_edge_formula_and_weightwatcher_normalisation():
    n, m, s = 2000, 500, 0.02
    edge = spectra.mp_edge(n, m, s)
    assert edge == pytest.approx(s**2 * (math.sqrt(n) + math.sqrt(m)) ** 2)
    assert edge / n == pytest.approx(s**2 * (1 + 1 / math.sqrt(n / m)) ** 2)  # X = WᵀW / N
    assert spectra.mp_edge(m, n, s) == edge  # orientation does not matter


def _shuffled_evals(w: np.ndarray) -> np.ndarray:
    return np.linalg.svd(spectra.shuffle_entries(torch.from_numpy(w), 0).numpy(), compute_uv=False) ** 2


def test_pure_noise_reaches_the_edge_and_planted_spikes_are_counted():
    n, m, s, planted = 2000, 400, 0.05, 5
    rng = np.random.default_rng(1)
    noise = rng.normal(0.0, s, size=(n, m))
    edge = spectra.mp_edge(n, m, s)
    shuffled = _shuffled_evals(noise)
    noise_stats = spectra.spectrum_stats(np.linalg.svd(noise, compute_uv=False) ** 2, n, m, s, shuffled)
    assert noise_stats["lambda_max"] == pytest.approx(edge, rel=0.03)
    assert noise_stats["num_spikes_init"] <= 2
    assert noise_stats["num_spikes"] == 0
    assert noise_stats["sum_sigma2"] == pytest.approx(n * m * s**2, rel=0.01)
    u, _ = np.linalg.qr(rng.normal(size=(n, planted)))
    v, _ = np.linalg.qr(rng.normal(size=(m, planted)))
    strengths = np.sqrt(edge) * np.linspace(2.0, 4.0, planted)
    spiked = noise + (u * strengths) @ v.T
    sigma2 = spectra.sigma2_groups([spectra.WeightGroup("w", (0,), (torch.from_numpy(spiked),))])["w"][0]
    row = spectra.spectrum_stats(sigma2, n, m, s, _shuffled_evals(spiked))
    assert row["num_spikes_init"] == planted
    assert row["num_spikes"] == planted  # against the fitted bulk edge
    assert row["lambda_plus"] == pytest.approx(edge)
    assert row["top10_sigma2"][planted] < edge < row["top10_sigma2"][planted - 1]


def test_table_columns_follow_their_definitions():
    model = tiny_llama()
    result = spectra.compute_spectra(model, init_std=0.02, include_embeddings=True, threads=2)
    assert list(result.table.columns) == spectra.SPECTRA_COLUMNS
    assert result.table["form"].tolist() == ["raw"] * (2 * 7 + 2) + ["folded"] * (2 * 5)
    table = result.table[result.table["form"] == "raw"]
    assert (
        len(table) == 2 * 7 + 2
        and table["layer"].tolist()[:2] == [-1, 0]
        and table["matrix"].iloc[-1] == "lm_head"
    )
    row = table[(table.layer == 1) & (table.matrix == "down")].iloc[0]
    w = model.model.layers[1].mlp.down_proj.weight.detach().double()
    frob2 = float(w.square().sum())
    spec2 = float(torch.linalg.matrix_norm(w, ord=2)) ** 2
    assert (row.rows, row.cols, row.N, row.M, row.Q) == (64, 96, 96, 64, 1.5)
    assert row.sum_sigma2 == pytest.approx(frob2) and row.lambda_max == pytest.approx(spec2)
    assert row.stable_rank == pytest.approx(frob2 / spec2) and row.log_norm == pytest.approx(
        math.log10(frob2)
    )
    assert row.log_spectral_norm == pytest.approx(math.log10(spec2)) and row.sv_max == pytest.approx(
        spec2**0.5
    )
    assert row.sum_sigma2_init == pytest.approx(96 * 64 * 0.02**2)
    assert len(row.top10_sigma2) == 10 and row.top10_sigma2[0] == pytest.approx(spec2)
    assert row.sigma2_mean == pytest.approx(frob2 / 64)


def assert_matches_weightwatcher(
    model, layers: tuple[int, ...], embeddings: bool = True, mp_fit: bool = True
) -> int:
    """Our raw rows against ``analyze(mp_fit=True, randomize=True)`` on the decoder layers ``layers``
    (and with ``embeddings`` the embedding and an untied LM head); returns the number of matrices
    compared. Without ``mp_fit`` WeightWatcher fits no Marchenko–Pastur density and shuffles no
    matrix (its brute-force fits take 9 of every 10 s of the comparison): the spectra, norms and
    power-law columns are compared, not the MP spikes, softrank and randomised distance."""
    weightwatcher = pytest.importorskip("weightwatcher")
    logging.getLogger("weightwatcher").setLevel(logging.WARNING)
    init_std = float(model.config.initializer_range)
    ours = spectra.compute_spectra(model, init_std, include_embeddings=True, threads=2, folded=False)
    decoder = architecture.family(model.config)
    names = {
        f"model.layers.{layer}.{decoder.attention if m in matrices.ATTENTION_TYPES else decoder.mlp}."
        f"{getattr(decoder, m)}": (m, layer)
        for layer in layers
        for m in matrices.MATRIX_TYPES
    }
    if embeddings:
        names["model.embed_tokens"] = ("embed", -1)
    if embeddings and "lm_head" in ours.layers:
        names["lm_head"] = ("lm_head", ours.layers["lm_head"][0])
    watcher = weightwatcher.WeightWatcher(model=model)
    ids = [int(r.layer_id) for r in watcher.describe().itertuples() if r.longname in names]
    details = watcher.analyze(layers=ids, mp_fit=mp_fit, randomize=mp_fit)
    assert set(details["longname"]) == set(names)
    table = ours.table.set_index(["matrix", "layer"])
    for row in details.itertuples():
        key = names[row.longname]
        sigma2 = ours.sigma2[key[0]][ours.layers[key[0]].index(key[1])]
        reference = np.sort(np.asarray(watcher.get_ESD(layer=int(row.layer_id)), dtype=float))[::-1]
        np.testing.assert_allclose(sigma2, reference, rtol=1e-9, atol=1e-12 * reference[0])
        ours_row = table.loc[key]
        assert (ours_row.N, ours_row.M) == (row.N, row.M) and ours_row.Q == pytest.approx(row.Q)
        for column in ("lambda_max", "sv_max", "log_norm", "log_spectral_norm", "stable_rank"):
            assert ours_row[column] == pytest.approx(getattr(row, column), rel=1e-9), column
        # WeightWatcher's shape metrics (attnscope.shape): the fits are deterministic, so equal up to
        # float noise; entropy differs in the 4th decimal (WW's float32 rank tolerance);
        # rand_distance compares two different random shuffles (both ≈ 0.01-0.03 for iid weights)
        fitted = ("num_spikes", "sigma_mp", "mp_softrank") if mp_fit else ()
        for column in (*fitted, "alpha", "xmin", "D", "alpha_weighted"):
            assert ours_row[column] == pytest.approx(getattr(row, column), rel=1e-6), (key, column)
        assert ours_row["log_alpha_norm"] == pytest.approx(row.log_alpha_norm, rel=1e-6), key
        assert ours_row["entropy"] == pytest.approx(row.entropy, abs=1e-3), key
        if mp_fit:
            assert ours_row["rand_distance"] == pytest.approx(row.rand_distance, abs=0.02), key
    return len(details)


@pytest.mark.parametrize("mp_fit", [False, pytest.param(True, marks=pytest.mark.integration)])
def test_matches_weightwatcher_on_a_tiny_model(tmp_path, monkeypatch, mp_fit):
    """Every matrix kind, embeddings and LM head included; the MP fits (17 s of CPU) in the
    integration tier, which CI runs too."""
    monkeypatch.chdir(tmp_path)
    assert assert_matches_weightwatcher(tiny_llama(layers=1), layers=(0,), mp_fit=mp_fit) == 9


@pytest.mark.integration
def test_matches_weightwatcher_on_the_embedded_model(embedded_model_dir, tmp_path, monkeypatch):
    """The first and the last layer of SmolLM2, 7 matrices each (WW's randomisation of the
    49152 × 576 embedding takes minutes; the tiny model's test covers embeddings)."""
    monkeypatch.chdir(tmp_path)
    model = models.load_model(embedded_model_dir, variant="trained", device="cpu", dtype="float32").model
    assert assert_matches_weightwatcher(model, layers=(0, 29), embeddings=False) == 14


# --- base alignment ----------------------------------------------------------------------


def test_kv_head_index_follows_repeat_kv():
    n_heads, n_kv = 6, 2
    kv = torch.arange(n_kv, dtype=torch.float32).view(1, n_kv, 1, 1)
    expanded = repeat_kv(kv, n_heads // n_kv).flatten().long()
    assert architecture.kv_head_index(n_heads, n_kv).tolist() == expanded.tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="multiple"):
        architecture.kv_head_index(6, 4)


def test_trace_pairs_each_query_head_with_its_kv_head():
    model = tiny_llama(layers=1)
    attn = model.model.layers[0].self_attn
    hd, hidden = 16, 64
    patterns = torch.zeros(2, hd, hidden)
    patterns[0, :, :hd] = torch.eye(hd)  # KV head 0 reads input dims 0..15, KV head 1 dims 16..31
    patterns[1, :, hd : 2 * hd] = torch.eye(hd)
    with torch.no_grad():
        attn.k_proj.weight.copy_(patterns.reshape(2 * hd, hidden))
        # query head h = (h + 1) × the pattern of KV head h // 2; any other pairing gives 0
        attn.q_proj.weight.copy_(torch.cat([(h + 1) * patterns[h // 2] for h in range(4)]))
    table = spectra.base_alignment(model, init_std=0.02)
    heads = table[table.scope == "head"]
    assert heads["kv_head"].tolist() == [0, 0, 1, 1]
    assert heads["trace"].tolist() == pytest.approx([16.0, 32.0, 48.0, 64.0])
    assert heads["cosine"].tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert heads["frobenius_norm"].tolist() == pytest.approx([4.0 * (h + 1) for h in range(4)])
    layer = table[table.scope == "layer"].iloc[0]
    assert layer.trace == pytest.approx(160.0) and layer.n_terms == 4 * hd * hidden
    assert layer.z_score == pytest.approx(160.0 / (math.sqrt(4 * hd * hidden) * 0.02**2))


def test_trace_equals_hf_attention_scores_at_zero_offset():
    """Tr(W_qᵀ W_k) = Σᵢ q_h(eᵢ)·k_h(eᵢ) with HF's own head split and repeat_kv."""
    model = tiny_llama(seed=3, layers=1)
    attn = model.model.layers[0].self_attn
    eye = torch.eye(64).unsqueeze(0)  # 64 "tokens", token i = basis vector eᵢ
    with torch.no_grad():
        q = attn.q_proj(eye).view(1, 64, -1, 16).transpose(1, 2)
        k = repeat_kv(attn.k_proj(eye).view(1, 64, -1, 16).transpose(1, 2), attn.num_key_value_groups)
    expected = (q * k).sum(dim=(0, 2, 3)).double()
    heads = spectra.base_alignment(model, 0.02).query("scope == 'head'")
    np.testing.assert_allclose(heads["trace"], expected.numpy(), rtol=1e-5, atol=1e-7)


def test_z_scores_are_standard_normal_at_random_init():
    model = tiny_llama(seed=7, layers=48, hidden_size=32, num_attention_heads=4, num_key_value_heads=2)
    table = spectra.base_alignment(model, init_std=model.config.initializer_range)
    z = table.loc[table.scope == "head", "z_score"].to_numpy()
    assert len(z) == 192
    assert abs(z.mean()) < 4 / math.sqrt(len(z))
    assert 0.85 < z.std() < 1.15
    assert stats.kstest(z, "norm").pvalue > 1e-3
    layer_z = table.loc[table.scope == "layer", "z_score"].to_numpy()
    assert 0.7 < layer_z.std() < 1.3
    ratio2 = (table["frobenius_norm"] / table["frobenius_norm_init"]) ** 2  # E[‖AᵀB‖²] / init formula
    assert ratio2[table.scope == "head"].mean() == pytest.approx(1.0, abs=0.03)
    assert ratio2[table.scope == "layer"].mean() == pytest.approx(1.0, abs=0.05)


def test_alignment_on_mistral_gqa_model():
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=64,
        hidden_size=48,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=6,
        num_key_value_heads=3,
        head_dim=8,
    )
    table = spectra.base_alignment(MistralForCausalLM(config), 0.02)
    assert table.loc[table.scope == "head", "kv_head"].tolist() == [0, 0, 1, 1, 2, 2]
    assert table.loc[table.scope == "head", "n_terms"].unique().tolist() == [8 * 48]


# --- learned vs random -------------------------------------------------------------------


def fake_spectra(sum_sigma2: dict[str, float], sv_max: dict[str, float], layers: int = 3) -> pd.DataFrame:
    rows = []
    for matrix in matrices.MATRIX_TYPES:
        for layer in range(layers):
            s, sv = sum_sigma2.get(matrix, 100.0), sv_max.get(matrix, 1.0)
            rows.append(
                {
                    "layer": layer,
                    "matrix": matrix,
                    "form": "raw",
                    "sum_sigma2": s * (1 + 0.1 * (layer - 1)),
                    "lambda_max": sv**2,
                    "sv_max": sv,
                    "stable_rank": s / sv**2,
                    "num_spikes_init": 0,
                    "num_spikes": 0,
                    "alpha": 4.0,
                    "rand_distance": 0.02,
                }
            )
    return pd.DataFrame(rows)


def test_comparison_verdicts_follow_the_ratios():
    random = fake_spectra({}, {})
    thesis_like = fake_spectra({"q": 8.0, "k": 6.0, "v": 100.0}, {"q": 1.8, "k": 1.6, "v": 1.2})
    df = comparison.compare_learned_random(thesis_like, random)
    assert list(df.columns) == comparison.COMPARISON_COLUMNS
    obs = df[df.row_type == "observation"].set_index(["matrix", "statement"])
    assert obs["holds"].all() and obs["in_thesis_range"].all()
    q_sum = df[(df.row_type == "measure") & (df.matrix == "q") & (df.statement.str.contains("Σσ²"))].iloc[0]
    assert q_sum.ratio == pytest.approx(0.08) and q_sum.trained == pytest.approx(8.0)
    opposite = fake_spectra({"q": 900.0, "k": 900.0, "v": 10.0}, {"q": 0.5, "k": 0.5, "v": 0.5})
    observed = comparison.compare_learned_random(opposite, random).query("row_type == 'observation'")
    assert not observed["holds"].any()
    markdown = comparison.comparison_markdown(df, "test")
    assert markdown.count("**yes**") == 6 and "| q | raw | mean Σσ² (‖W‖_F²) |" in markdown
    # a ratio over a zero random mean (no spikes at init) is undefined and shown as such
    assert "| q | raw | mean spikes above the fitted MP bulk (WW) | 0 | 0 | – |" in markdown
    assert "nan" not in markdown


# --- storage -----------------------------------------------------------------------------


def test_zarr_round_trip_is_byte_identical(tmp_path: Path):
    result = spectra.compute_spectra(tiny_llama(), 0.02, include_embeddings=True, threads=2)
    paths = [tmp_path / "a.zarr", tmp_path / "b.zarr"]
    for path in paths:
        with io.atomic_path(path) as tmp:
            spectrastore.write_singular_values(result, tmp, {"model": "tiny", "variant": "trained"})
    back = spectrastore.read_singular_values(paths[0])
    assert set(back) == {
        "embed",
        "lm_head",
        *matrices.MATRIX_TYPES,
        *(f"{m}_folded" for m in architecture.READS_NORM),
    }
    np.testing.assert_array_equal(back["k"], np.sqrt(result.sigma2["k"]))
    files = sorted(p.relative_to(paths[0]) for p in paths[0].rglob("*") if p.is_file())
    assert files and all((paths[0] / f).read_bytes() == (paths[1] / f).read_bytes() for f in files)
    assert files == sorted(p.relative_to(paths[1]) for p in paths[1].rglob("*") if p.is_file())


def test_results_do_not_depend_on_thread_count():
    model = tiny_llama()
    one = spectra.compute_spectra(model, 0.02, threads=1)
    two = spectra.compute_spectra(model, 0.02, threads=2)
    pd.testing.assert_frame_equal(one.table, two.table, check_exact=True)


# --- RMSNorm folding and QK circuits -------------------------------------------------------


def with_random_norms(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """``model`` with every RMSNorm γ drawn from [0.5, 2) (a trained model's γ is not 1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                param.copy_(0.5 + 1.5 * torch.rand(param.shape, generator=generator))
    return model


def test_folding_the_norms_keeps_the_models_outputs():
    model = with_random_norms(tiny_llama())
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(ids).logits
        circuits.fold_norms(model)
        after = model(ids).logits
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    assert all(float(block.input_layernorm.weight.sub(1).abs().max()) == 0 for block in model.model.layers)


def test_folded_spectra_are_those_of_w_diag_gamma():
    model = with_random_norms(tiny_llama())
    table = spectra.compute_spectra(model, init_std=0.02, threads=2).table.set_index(
        ["form", "matrix", "layer"]
    )
    block = model.model.layers[1]
    for matrix, module, norm in (
        ("k", block.self_attn.k_proj, block.input_layernorm),
        ("up", block.mlp.up_proj, block.post_attention_layernorm),
    ):
        w = module.weight.detach().double()
        folded = w * norm.weight.detach().double()
        assert table.loc[("folded", matrix, 1), "sum_sigma2"] == pytest.approx(float(folded.square().sum()))
        assert table.loc[("raw", matrix, 1), "sum_sigma2"] == pytest.approx(float(w.square().sum()))
        assert table.loc[("folded", matrix, 1), "sum_sigma2"] != pytest.approx(float(w.square().sum()))
    assert ("folded", "o", 1) not in table.index and ("folded", "down", 1) not in table.index
    # γ = 1 (a freshly initialised model, the random variant): folded rows equal the raw ones
    plain = spectra.compute_spectra(tiny_llama(), init_std=0.02, threads=2).table
    raw, folded = (plain[plain["form"] == form].set_index(["matrix", "layer"]) for form in ("raw", "folded"))
    pd.testing.assert_frame_equal(folded.drop(columns="form"), raw.loc[folded.index].drop(columns="form"))


@pytest.mark.routes
def test_unit_gain_folded_rows_equal_those_computed_from_scratch(monkeypatch):
    """A random model's folded rows reuse the raw σ² and statistics; they equal the statistics of
    the folded matrices decomposed on their own (no raw group beside them), and each distinct
    matrix's statistics are computed once."""
    model = tiny_llama()
    calls = []
    stats_of = spectra.spectrum_stats
    monkeypatch.setattr(spectra, "spectrum_stats", lambda *a: calls.append(a) or stats_of(*a))
    table = spectra.compute_spectra(model, init_std=0.02, threads=2, seed=5).table
    assert len(calls) == 2 * 7 and len(table) == 2 * (7 + 5)
    folded = [g for g in spectra.weight_groups(model, folded=True) if g.scales is not None]
    assert len(folded) == 5 and all(g.unit_scales for g in folded)
    alone = spectra.sigma2_groups(folded, threads=2)
    shuffled = spectra.sigma2_groups(folded, threads=2, shuffle_seed=5)
    rows = table[table["form"] == "folded"].set_index(["matrix", "layer"])
    for group in folded:
        for i, layer in enumerate(group.layers):
            expected = stats_of(alone[group.key][i], *group.shape, 0.02, shuffled[group.key][i])
            got = rows.loc[(group.matrix, layer)]
            for column, value in expected.items():
                assert got[column] == value or np.isnan(value) and np.isnan(got[column]), column
    trained = with_random_norms(tiny_llama())
    calls.clear()
    spectra.compute_spectra(trained, init_std=0.02, threads=2)
    assert len(calls) == 2 * (7 + 5) and not any(
        g.unit_scales for g in spectra.weight_groups(trained, folded=True)
    )


def test_qk_circuits_equal_the_dense_product():
    """The circuit statistics through the head_dim core equal those of the explicit
    diag(γ)·W_q,hᵀ·W_k,g·diag(γ) (hidden × hidden), GQA-paired."""
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
    )
    model = with_random_norms(MistralForCausalLM(config))
    table = circuits.qk_circuits(model).set_index(["layer", "form", "head"])
    block = model.model.layers[1]
    gamma = block.input_layernorm.weight.detach().double()
    wq = block.self_attn.q_proj.weight.detach().double().reshape(8, 16, 64)
    wk = block.self_attn.k_proj.weight.detach().double().reshape(2, 16, 64)
    for head, kv in ((0, 0), (5, 1)):
        assert table.loc[(1, "folded", head), "kv_head"] == kv
        for form, scale in (("raw", torch.ones(64, dtype=torch.float64)), ("folded", gamma)):
            dense = (wq[head] * scale).T @ (wk[kv] * scale)
            sigma = torch.linalg.svdvals(dense)
            row = table.loc[(1, form, head)]
            assert row.trace == pytest.approx(float(torch.trace(dense)))
            assert row.frobenius_norm == pytest.approx(float(dense.norm()))
            assert row.sigma_max == pytest.approx(float(sigma[0]))
            assert row.stable_rank == pytest.approx(float(dense.norm() ** 2 / sigma[0] ** 2))
            np.testing.assert_allclose(row.top10_sigma, sigma[:10].numpy(), rtol=1e-9, atol=1e-12)
    raw_trace = table.xs("raw", level="form")["trace"]
    assert raw_trace.to_numpy() == pytest.approx(
        spectra.base_alignment(model, 0.02).query("scope == 'head'")["trace"].to_numpy()
    )


@pytest.mark.routes
def test_circuits_of_unit_gains_are_the_raw_ones_computed_once(monkeypatch):
    """Where a layer's gains are all exactly one its folded QK and OV rows are its raw rows, and
    its circuits are computed once; a layer with other gains gets both forms computed."""
    model = with_random_norms(tiny_llama())
    with torch.no_grad():
        model.model.layers[0].input_layernorm.weight.fill_(1.0)
    calls = []
    stats_of = circuits._circuit_stats
    monkeypatch.setattr(circuits, "_circuit_stats", lambda a, b: calls.append(1) or stats_of(a, b))
    for circuit in (circuits.qk_circuits, circuits.ov_circuits):
        table = circuit(model)
        assert len(calls) == 3
        calls.clear()
        by_form = {form: table[table["form"] == form].drop(columns="form") for form in ("raw", "folded")}
        raw, folded = (by_form[form].set_index(["layer", "head"]) for form in ("raw", "folded"))
        pd.testing.assert_frame_equal(folded.loc[0], raw.loc[0])
        assert not np.allclose(folded.loc[1]["frobenius_norm"], raw.loc[1]["frobenius_norm"])
    # the unit-gain layer's folded circuit as computed with the gains applied
    block = model.model.layers[0]
    gamma = circuits.norm_scale(architecture.family(model.config), block, "q")
    q = block.self_attn.q_proj.weight.detach().double() * gamma
    k = block.self_attn.k_proj.weight.detach().double() * gamma
    kv_of = torch.tensor([0, 0, 1, 1])
    expected = stats_of(q.reshape(4, 16, 64), k.reshape(2, 16, 64)[kv_of])
    got = circuits.qk_circuits(model).query("layer == 0 and form == 'folded'")
    np.testing.assert_array_equal(got["frobenius_norm"].to_numpy(), expected["frobenius_norm"])
    np.testing.assert_array_equal(np.stack(got["top10_sigma"].to_list()), expected["top10_sigma"])
