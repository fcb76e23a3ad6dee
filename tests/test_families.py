"""Every declared decoder family against tiny random models built offline from its config class: the
captured maps are transformers' own ``output_attentions``, the value norms are what each head writes
in the model's own forward, and a deliberately wrong declaration fails one or the other (or is
refused against the model's modules); the stages a family cannot take yet refuse it by name."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    DynamicCache,
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    Olmo2Config,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

from attnscope import (
    architecture,
    capture,
    circuits,
    config,
    edgesets,
    knockout,
    models,
    promptgroup,
    spectra,
    variants,
)
from tests.helpers import forward_contributions, query_shares, with_random_gains

SIZES = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
}
GQA = {**SIZES, "num_key_value_heads": 2}

CONFIGS = {
    "llama": lambda: LlamaConfig(**GQA),
    "mistral": lambda: MistralConfig(**GQA, sliding_window=16),
    "gemma3_text": lambda: Gemma3TextConfig(
        **GQA, head_dim=16, sliding_window=4, layer_types=["sliding_attention", "full_attention"]
    ),
    "qwen2": lambda: Qwen2Config(**GQA),
    "qwen3": lambda: Qwen3Config(**GQA, head_dim=16),
    "gemma2": lambda: Gemma2Config(
        **GQA, head_dim=16, query_pre_attn_scalar=16, attn_logit_softcapping=2.0, sliding_window=4
    ),
    "olmo2": lambda: Olmo2Config(**GQA),
    "phi3": lambda: Phi3Config(**GQA, pad_token_id=0),
    "gpt_neox": lambda: GPTNeoXConfig(**SIZES, rotary_pct=0.25, use_parallel_residual=True),
    "gpt2": lambda: GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64),
}
"""A tiny config of every declared family (:data:`attnscope.architecture.FAMILIES`): GQA where the family
has it, Gemma 3's sliding window and Gemma 2's soft-cap small enough to bite, GPT-NeoX's partial rotary."""

IDS = list(np.random.default_rng(0).integers(1, 128, size=12))


def tiny(model_type: str) -> torch.nn.Module:
    """The seeded tiny random model of ``model_type``, eager, its norm gains and biases drawn at random."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIGS[model_type](), attn_implementation="eager")
    return with_random_gains(model.eval())


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def family_model(request):
    return request.param, tiny(request.param)


def reference_attentions(model) -> torch.Tensor:
    """[layer, head, query, key] from transformers' own output_attentions (eager)."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([IDS]), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).float()


def captured(model, kernel: str) -> torch.Tensor:
    """[layer, head, query, key] as the capture route ``kernel`` hands them to its sink."""
    maps: dict[int, torch.Tensor] = {}
    with torch.inference_mode(), capture.capture(model, maps.__setitem__, kernel):
        model(input_ids=torch.tensor([IDS]))
    return torch.stack([maps[layer] for layer in sorted(maps)]).float()


def value_share_error(model) -> float:
    """Largest difference of the capture's α · value norms from what each head writes in the model's
    own forward, as shares of each query row (:func:`tests.helpers.query_shares`)."""
    alpha = reference_attentions(model)
    with torch.inference_mode(), capture.ValueNorms(model) as values:
        model(input_ids=torch.tensor([IDS]))
    computed = np.stack(
        [promptgroup.value_weighted(alpha[layer], values.norms[layer]).numpy() for layer in range(len(alpha))]
    ).astype(np.float64)
    reference = query_shares(forward_contributions(model, IDS))
    return float(np.abs(query_shares(computed) - reference).max() / reference.max())


@pytest.mark.parametrize("kernel", capture.KERNELS)
def test_captured_maps_are_output_attentions(family_model, kernel):
    """Both routes' maps equal transformers' eager output_attentions; a family whose logits SDPA cannot
    compute (Gemma 2's soft-cap) is refused on the sdpa route by name."""
    model_type, model = family_model
    reference = reference_attentions(model)
    if kernel == "sdpa" and architecture.family(model.config).unsupported("sdpa capture"):
        with pytest.raises(ValueError, match=rf"model_type '{model_type}'\): the sdpa capture stage"):
            captured(model, kernel)
        return
    torch.testing.assert_close(captured(model, kernel), reference, rtol=1e-5, atol=1e-6)


def test_value_norms_are_what_each_head_writes(family_model):
    """α · ‖g ⊙ W_O,h v_j‖ from the declaration (fused slices, biased values, post-attention gains)
    equals what each head adds to the residual in the model's own forward, to 1e-5."""
    _, model = family_model
    assert value_share_error(model) < 1e-5


WRONG = {
    "phi3: v and k slices swapped": ("phi3", {"qkv_order": ("q", "v", "k")}),
    "gpt_neox: fused by matrix, not by head": ("gpt_neox", {"qkv_per_head": False}),
    "gpt2: k and v slices swapped": ("gpt2", {"qkv_order": ("q", "v", "k")}),
    "gemma2: post-attention gain left out": ("gemma2", {"post_attention_norm": None}),
    "olmo2: post-attention gain left out": ("olmo2", {"post_attention_norm": None}),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_wrong_declaration_fails_the_reference(case, monkeypatch):
    model_type, change = WRONG[case]
    model = tiny(model_type)
    monkeypatch.setitem(
        architecture.FAMILIES, model_type, dataclasses.replace(architecture.FAMILIES[model_type], **change)
    )
    assert value_share_error(model) > 1e-3


REFUSED = {
    "qwen2: biases dropped": ("qwen2", {"biases": ()}, "its q projection has a bias"),
    "gpt2: LayerNorm declared as RMSNorm": ("gpt2", {"norm": "rms"}, "its ln_1 is a LayerNorm"),
    "gpt2: Conv1D read as nn.Linear": ("gpt2", {"transposed": False}, "its c_attn has 64 outputs"),
    "llama: a bias that is not there": ("qwen3", {"biases": ("v",)}, "its v projection has no bias"),
    "gemma2: RMSNorm declared as LayerNorm": ("gemma2", {"norm": "layer"}, "is no LayerNorm"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_declaration_that_contradicts_the_modules_is_refused(case, monkeypatch):
    model_type, change, message = REFUSED[case]
    model = tiny(model_type)
    monkeypatch.setitem(
        architecture.FAMILIES, model_type, dataclasses.replace(architecture.FAMILIES[model_type], **change)
    )
    with pytest.raises(TypeError, match=rf"{message}.*does not describe this model"):
        capture.ValueNorms(model)


def test_every_declared_family_has_a_tiny_model_here():
    assert sorted(CONFIGS) == sorted(architecture.FAMILIES)


def attention_inputs(model) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's (queries, keys) as the model's eager attention function receives them."""
    modelling = sys.modules[type(model).__module__]
    original, seen = modelling.eager_attention_forward, []

    def recording(module, query, key, *args, **kwargs):
        seen.append((query.double(), key.double()))
        return original(module, query, key, *args, **kwargs)

    modelling.eager_attention_forward = recording
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([IDS]))
    finally:
        modelling.eager_attention_forward = original
    return seen


def test_qkscale_doubles_the_queries_and_keys_the_attention_reads(family_model):
    """qkscale-a2-L1-1 through the declaration (W_q, W_k and their biases, or the QK-norm gains) doubles
    the queries and keys that layer 1's own attention receives, RoPE applied (its logits ×4 before
    a soft-cap), and leaves layer 0's as they were."""
    _, model = family_model
    if architecture.family(model.config).unsupported("weight edits"):
        pytest.skip("weight edits refuse this family (tested above)")
    edited = copy.deepcopy(model)
    variants.apply_edit(edited, variants.parse("qkscale-a2-L1-1"))
    for layer, ((q, k), (q2, k2)) in enumerate(
        zip(attention_inputs(model), attention_inputs(edited), strict=True)
    ):
        torch.testing.assert_close(q2, q * (1 + layer), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(k2, k * (1 + layer), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model_type", ["olmo2", "gpt_neox", "gemma2"])
def test_a_saved_model_of_a_declared_family_is_prepared_with_its_notes(model_type, tmp_path):
    """A ``path:`` model (save_pretrained's directory) passes the plan's check and is prepared: its
    manifest says what its anatomy means for the analyses."""
    tiny(model_type).save_pretrained(tmp_path / "saved")
    config.check_model_spec("mine", {"source": "path", "path": str(tmp_path / "saved")})
    spec = {"source": "path", "path": str(tmp_path / "saved"), "initializer_range": None}
    manifest = models.prepare_model("mine", spec, tmp_path / "prepared")
    expected = {
        "olmo2": ["QK-norm: q_norm and k_norm (RMSNorm on all heads'", "post-attention norm"],
        "gpt_neox": ["biases on q, k, v, o", "LayerNorms", "parallel residual"],
        "gemma2": ["post-attention norm", "soft-capped (attn_logit_softcapping)"],
    }[model_type]
    for fragment in expected:
        assert any(fragment in note for note in manifest["notes"]), (fragment, manifest["notes"])
    assert manifest["architecture"] == model_type


def test_a_knockout_blocks_its_edges_in_every_family(family_model):
    """Blocking key 2 for every later query in layer 1 (knockout's mask through the attention module's
    own kwargs) leaves it no weight there, and layer 0 as it was."""
    _, model = family_model
    n = len(IDS)
    prompt = np.zeros((n, n), dtype=bool)
    prompt[3:, 2] = True
    blocked = edgesets.BlockedEdges(prompt, np.zeros(n, dtype=bool))
    before = captured(model, "eager")
    with knockout.Knockout(model, blocked, [1]):
        after = captured(model, "eager")
    assert (after[1, :, 3:, 2] == 0).all() and (before[1, :, 3:, 2] > 0).all()
    torch.testing.assert_close(after[0], before[0])


# --- the weight stages: the declared matrices, their folds, circuits and edits vs the model's forward ---


def record(model) -> list[dict[str, torch.Tensor]]:
    """Per layer, from the model's own forward with every position id 0 (RoPE is then the identity), in
    float64 [token, ·]: what the q projection reads (``input``), what its input norm reads (``residual``,
    where it has one), and the queries, keys (before a QK-norm) and values its eager attention gets."""
    decoder = architecture.family(model.config)
    blocks = architecture.decoder_layers(model)
    seen: list[dict[str, torch.Tensor]] = [{} for _ in blocks]

    def keep(layer: int, key: str):
        def hook(module, args) -> None:
            states = args[0][0].double()  # [token, ·], [token, head, d] or [head, token, d] (Gemma 3)
            states = states.transpose(0, 1) if states.shape[0] != len(IDS) else states
            seen[layer].setdefault(key, states.reshape(len(IDS), -1))

        return hook

    handles = []
    for layer, block in enumerate(blocks):
        attn = getattr(block, decoder.attention)
        handles.append(decoder.projection(attn, "q").register_forward_pre_hook(keep(layer, "input")))
        if decoder.input_norm is not None:
            norm = getattr(block, decoder.input_norm)
            handles.append(norm.register_forward_pre_hook(keep(layer, "residual")))
        for name, key in zip(decoder.qk_norm or (), "qk", strict=False):
            handles.append(getattr(attn, name).register_forward_pre_hook(keep(layer, key)))
    layer_of = {getattr(block, decoder.attention): i for i, block in enumerate(blocks)}
    modelling = sys.modules[type(model).__module__]
    original = modelling.eager_attention_forward

    def recording(module, query, key, value, *args, **kwargs):
        for name, states in zip("qkv", (query, key, value), strict=True):
            seen[layer_of[module]].setdefault(name, states[0].transpose(0, 1).reshape(len(IDS), -1).double())
        return original(module, query, key, value, *args, **kwargs)

    modelling.eager_attention_forward = recording
    try:
        with torch.inference_mode():
            ids = torch.tensor([IDS])
            model(input_ids=ids, position_ids=torch.zeros_like(ids))
    finally:
        modelling.eager_attention_forward = original
        for handle in handles:
            handle.remove()
    return seen


def normalised(block, decoder, seen: dict[str, torch.Tensor]) -> torch.Tensor:
    """[x̂; 1]: the input norm's normalised input, by the formula of the module's own kind (LayerNorm:
    centred, then over σ; RMSNorm: over rms), or the residual stream itself where q reads it."""
    if decoder.input_norm is None:
        x = seen["input"]
    else:
        norm = getattr(block, decoder.input_norm)
        x = seen["residual"]
        x = x - x.mean(-1, keepdim=True) if isinstance(norm, torch.nn.LayerNorm) else x
        eps = getattr(norm, "variance_epsilon", None) or norm.eps
        x = x / (x.square().mean(-1, keepdim=True) + eps).sqrt()
    return torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)


def relative(computed: torch.Tensor, reference: torch.Tensor) -> float:
    return float((computed - reference).abs().max() / reference.abs().max())


def states_error(model) -> float:
    """Largest relative error of the declared raw [W | b] of q, k, v times [input; 1] from the states the
    model's attention gets (before a QK-norm), over layers."""
    decoder = architecture.family(model.config)
    errors = []
    for block, seen in zip(architecture.decoder_layers(model), record(model), strict=True):
        for matrix in "qkv":
            weight = circuits.affine(decoder, block, matrix, model.config, "raw")
            errors.append(relative(seen["input"] @ weight[:, :-1].T + weight[:, -1], seen[matrix]))
    return max(errors)


def logits_error(model) -> float:
    """Largest relative error of the folded QK circuit's bilinear form [x̂; 1]ᵀ A_hᵀ B_g [x̂'; 1] from
    q_h · k_g as the model's attention gets them (before the 1/√d scale; before a QK-norm)."""
    decoder = architecture.family(model.config)
    n_heads, n_kv, head_dim = architecture.attention_shape(model.config)
    kv_of = architecture.kv_head_index(n_heads, n_kv)

    def heads(x: torch.Tensor, n: int) -> torch.Tensor:
        return x.reshape(len(IDS), n, head_dim).transpose(0, 1)

    errors = []
    for block, seen in zip(architecture.decoder_layers(model), record(model), strict=True):
        x = normalised(block, decoder, seen)
        a, b = (circuits.affine(decoder, block, m, model.config, "folded") for m in "qk")
        computed = heads(x @ a.T, n_heads) @ heads(x @ b.T, n_kv)[kv_of].mT
        errors.append(relative(computed, heads(seen["q"], n_heads) @ heads(seen["k"], n_kv)[kv_of].mT))
    return max(errors)


def fold_error(model) -> float:
    """Relative error of the logits of the model with its norms folded (:func:`circuits.fold_norms`)."""
    folded = copy.deepcopy(model)
    circuits.fold_norms(folded)
    with torch.inference_mode():
        return relative(folded(torch.tensor([IDS])).logits, model(torch.tensor([IDS])).logits)


REFERENCES = {"states": states_error, "folded logits": logits_error, "fold": fold_error}


@pytest.mark.parametrize("reference", sorted(REFERENCES))
def test_the_declared_weights_folds_and_circuits_are_the_models_own(family_model, reference):
    """states: the declared [W | b] of q, k, v (fused slices, transposed, biases) times what the projection
    reads is what the attention gets; folded logits: the folded QK circuit over [x̂; 1] (x̂ normalised
    by the formula of the norm's own class) is q · k as the attention gets them; fold: folding every
    norm (γ or 1 + γ, a LayerNorm's centring and β) into the weights keeps the model's logits."""
    _, model = family_model
    assert REFERENCES[reference](model) < 1e-5


def test_folding_leaves_every_norm_it_folds_at_the_identity(family_model):
    _, model = family_model
    folded = copy.deepcopy(model)
    circuits.fold_norms(folded)
    decoder = architecture.family(folded.config)
    for block in architecture.decoder_layers(folded):
        for matrix in decoder.matrices:
            if matrix in architecture.READS_NORM:
                gain = circuits.norm_scale(decoder, block, matrix)
                assert torch.equal(gain, torch.ones_like(gain))
                shift = circuits.norm_shift(decoder, block, matrix)
                assert shift is None or not shift.any()


WRONG_WEIGHTS = {
    "phi3: k and v slices swapped": ("phi3", {"qkv_order": ("q", "v", "k")}, "states"),
    "gpt_neox: fused by matrix, not by head": ("gpt_neox", {"qkv_per_head": False}, "states"),
    "gpt2: q and k slices swapped": ("gpt2", {"qkv_order": ("k", "q", "v")}, "folded logits"),
    "qwen2: q, k, v biases left out": ("qwen2", {"biases": ()}, "states"),
    "gpt_neox: q, k biases left out": ("gpt_neox", {"biases": ("v", "o", "up", "down")}, "folded logits"),
    "gpt2: LayerNorm treated as RMSNorm (logits)": ("gpt2", {"norm": "rms"}, "folded logits"),
    "gpt2: LayerNorm treated as RMSNorm (fold)": ("gpt2", {"norm": "rms"}, "fold"),
    "gpt_neox: LayerNorm treated as RMSNorm": ("gpt_neox", {"norm": "rms"}, "fold"),
    "gemma2: γ for 1 + γ": ("gemma2", {"norm_offset": 0.0}, "fold"),
}


@pytest.mark.parametrize("case", sorted(WRONG_WEIGHTS))
def test_a_wrong_declaration_fails_the_weight_references(case, monkeypatch):
    """Wrong fused slices, missing biases, a LayerNorm folded as an RMSNorm, a gain γ for 1 + γ: the
    reference fails (the check against the modules, which would refuse most of these, is switched off)."""
    model_type, change, reference = WRONG_WEIGHTS[case]
    model = tiny(model_type)
    monkeypatch.setattr(architecture.Family, "mismatch", lambda *args: None)
    monkeypatch.setitem(
        architecture.FAMILIES, model_type, dataclasses.replace(architecture.FAMILIES[model_type], **change)
    )
    assert REFERENCES[reference](model) > 1e-3


def test_circuit_tables_are_the_dense_products_of_the_affine_maps(family_model):
    """Layer 1's folded QK and OV rows equal the statistics of the dense A_hᵀ B_g and W_O,h [W_V,g | b]
    (the offset column kept where the family has biases or LayerNorms)."""
    _, model = family_model
    decoder = architecture.family(model.config)
    n_heads, n_kv, head_dim = architecture.attention_shape(model.config)
    kv_of = architecture.kv_head_index(n_heads, n_kv)
    block = architecture.decoder_layers(model)[1]
    keep = None if circuits.with_offsets(decoder) else -1
    q, k, v = (circuits.affine(decoder, block, m, model.config, "folded")[:, :keep] for m in "qkv")
    o = decoder.parameter(block, "o", model.config).detach().double()
    qk = circuits.qk_circuits(model).query("layer == 1 and form == 'folded'").set_index("head")
    ov = circuits.ov_circuits(model).query("layer == 1 and form == 'folded'").set_index("head")
    for head in range(n_heads):
        rows = slice(head * head_dim, (head + 1) * head_dim)
        kv_rows = slice(int(kv_of[head]) * head_dim, (int(kv_of[head]) + 1) * head_dim)
        for table, dense in (
            (qk, q[rows].T @ k[kv_rows]),
            (ov, torch.nn.functional.pad(o[:, rows] @ v[kv_rows], (0, 0, 0, v.shape[1] - o.shape[0]))),
        ):
            sigma = torch.linalg.svdvals(dense)
            assert table.loc[head, "frobenius_norm"] == pytest.approx(float(dense.norm()), rel=1e-9)
            assert table.loc[head, "sigma_max"] == pytest.approx(float(sigma[0]), rel=1e-9)
            assert table.loc[head, "trace"] == pytest.approx(float(torch.trace(dense)), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", ["qktop-r2-a3-L1-1", "qkflat-L1-1"])
def test_spectrum_edits_change_exactly_the_intended_singular_values(family_model, name):
    """Layer 1's W_q, W_k become U diag(σ') Vᵀ of their own SVD (qktop: the top 2 σ × 3; qkflat: every σ
    the RMS), their biases and layer 0 as they were, and the edited model's own queries and keys are
    those matrices applied to what the projection reads; qktop is refused where a QK-norm resets its
    scale (qkscale, W and b × α: test_qkscale_doubles_the_queries_and_keys_the_attention_reads)."""
    _, model = family_model
    decoder = architecture.family(model.config)
    variant = variants.parse(name)
    edited = copy.deepcopy(model)
    if variant.kind == "qktop" and decoder.qk_norm is not None:
        with pytest.raises(ValueError, match="q_norm and k_norm"):
            variants.apply_edit(edited, variant)
        return
    variants.apply_edit(edited, variant)
    before, after = record(model), record(edited)
    blocks = zip(architecture.decoder_layers(model), architecture.decoder_layers(edited), strict=True)
    for layer, (block, edited_block) in enumerate(blocks):
        for matrix in "qk":
            weight, bias = circuits.affine(decoder, block, matrix, model.config, "raw").split([64, 1], dim=1)
            u, sigma, vh = torch.linalg.svd(weight, full_matrices=False)
            if layer == 1 and variant.kind == "qktop":
                sigma = sigma * torch.tensor([3.0, 3.0] + [1.0] * (len(sigma) - 2), dtype=torch.float64)
            elif layer == 1:
                sigma = torch.full_like(sigma, float(sigma.square().mean().sqrt()))
            expected = torch.cat([(u * sigma) @ vh, bias], dim=1)
            got = circuits.affine(decoder, edited_block, matrix, model.config, "raw")
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
            states = before[layer]["input"] @ expected[:, :-1].T + expected[:, -1]
            torch.testing.assert_close(after[layer][matrix], states, rtol=1e-4, atol=1e-5)


def test_random_init_redraws_weights_and_biases_at_the_familys_init_std(family_model):
    """random-s<seed> (the family's own init, its config's initializer_range): W_q's entries have that std,
    every declared bias is redrawn (to the family's init: zero), every norm applies gain 1."""
    _, model = family_model
    settings = copy.deepcopy(model.config)
    settings.initializer_range = 0.05
    fresh = variants.random_init(settings, seed=1)
    decoder = architecture.family(settings)
    for block in architecture.decoder_layers(fresh):
        weight = decoder.parameter(block, "q", settings).detach()
        assert float(weight.std()) == pytest.approx(0.05, rel=0.1)
        for matrix in decoder.biases:
            assert not decoder.parameter(block, matrix, settings, "bias").any()
        for matrix in decoder.matrices:
            if matrix in architecture.READS_NORM:
                gain = circuits.norm_scale(decoder, block, matrix)
                assert torch.equal(gain, torch.ones_like(gain))


def unfused_llama(phi3) -> torch.nn.Module:
    """A Llama with Phi-3's weights, its fused qkv_proj and gate_up_proj split by the declaration."""
    settings = phi3.config.to_dict()
    settings.pop("model_type", None)
    llama = AutoModelForCausalLM.from_config(LlamaConfig(**settings), attn_implementation="eager").eval()
    decoder, plain = architecture.FAMILIES["phi3"], architecture.FAMILIES["llama"]
    state = {k: v for k, v in phi3.state_dict().items() if "qkv_proj" not in k and "gate_up_proj" not in k}
    llama.load_state_dict(state, strict=False)
    with torch.no_grad():
        for block, target in zip(
            architecture.decoder_layers(phi3), architecture.decoder_layers(llama), strict=True
        ):
            for matrix in decoder.matrices:
                weight = decoder.parameter(block, matrix, phi3.config)
                plain.set_parameter(target, matrix, llama.config, weight)
    return llama


def test_spectra_of_a_fused_family_are_those_of_its_unfused_slices():
    """Phi-3's slices of qkv_proj and gate_up_proj, copied into a Llama's separate projections, give
    Phi-3's logits, and Phi-3's spectra (raw and folded) equal the Llama's."""
    phi3 = tiny("phi3")
    llama = unfused_llama(phi3)
    with torch.inference_mode():
        assert relative(llama(torch.tensor([IDS])).logits, phi3(torch.tensor([IDS])).logits) < 1e-5
    ours, theirs = (spectra.compute_spectra(m, init_std=0.02, threads=1).table for m in (phi3, llama))
    pd.testing.assert_frame_equal(ours, theirs)


def cached_maps(model, blocked: edgesets.BlockedEdges | None, split: int = 6) -> dict[int, torch.Tensor]:
    """Layer → the maps of the queries after a cached prefix of ``split`` tokens, ``blocked`` in layer 1."""
    cache, maps = DynamicCache(config=model.config), {}
    with torch.inference_mode():
        model(input_ids=torch.tensor([IDS[:split]]), cache=cache, use_cache=True)
        with contextlib.ExitStack() as stack:
            if blocked is not None:
                stack.enter_context(knockout.Knockout(model, blocked, [1]))
            stack.enter_context(capture.capture(model, maps.__setitem__, "eager"))
            model(input_ids=torch.tensor([IDS[split:]]), cache=cache, use_cache=True)
    return maps


def test_a_knockout_blocks_its_edges_behind_a_kv_cache_in_every_family(family_model):
    """The knockout finds the cache under the attention module's own keyword (GPT-NeoX's layer_past): the
    queries after a cached prefix give key 2 no weight in layer 1, and layer 0 is as without it."""
    _, model = family_model
    n = len(IDS)
    prompt = np.zeros((n, n), dtype=bool)
    prompt[3:, 2] = True
    before = cached_maps(model, None)
    after = cached_maps(model, edgesets.BlockedEdges(prompt, np.zeros(n, dtype=bool)))
    assert (after[1][..., 2] == 0).all() and (before[1][..., 2] > 0).all()
    torch.testing.assert_close(after[0], before[0])
