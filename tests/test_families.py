"""Every declared decoder family against tiny random models built offline from its config class: the
captured maps are transformers' own ``output_attentions``, the value norms are what each head writes
in the model's own forward, and a deliberately wrong declaration fails one or the other (or is
refused against the model's modules); the stages a family cannot take yet refuse it by name."""

from __future__ import annotations

import copy
import dataclasses
import sys

import numpy as np
import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    GPT2Config,
    GPTNeoXConfig,
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
"""A tiny config of every declared family beyond Llama, Mistral and Gemma 3 (their tiny models are the
conftest's): GQA where the family has it, Gemma 2's soft-cap small enough to bite, GPT-NeoX's partial
rotary."""

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


STAGE_CALLS = {
    "spectra": lambda model: spectra.weight_groups(model),
    "folded spectra": lambda model: spectra.weight_groups(model, folded=True),
    "circuits": lambda model: circuits.qk_circuits(model),
    "weight edits": lambda model: variants.apply_edit(model, variants.parse("qkscale-a2")),
}


@pytest.mark.parametrize("stage", sorted(STAGE_CALLS))
def test_a_stage_that_cannot_take_a_family_refuses_it_by_name(family_model, stage):
    """Fused or [in, out] projections (Phi-3, GPT-NeoX, GPT-2), LayerNorms folded as gains, q/k biases in
    a bilinear circuit, a fold without a pre-norm (OLMo 2): refused, naming the family and the stage;
    every other stage runs."""
    model_type, model = family_model
    model = copy.deepcopy(model)
    reason = architecture.family(model.config).unsupported(stage)
    if reason is None:
        STAGE_CALLS[stage](model)
        return
    with pytest.raises(
        ValueError, match=rf"\(model_type '{model_type}'\): the {stage} stage is not supported"
    ):
        STAGE_CALLS[stage](model)


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
    blocked = knockout.BlockedEdges(prompt, np.zeros(n, dtype=bool))
    before = captured(model, "eager")
    with knockout.Knockout(model, blocked, [1]):
        after = captured(model, "eager")
    assert (after[1, :, 3:, 2] == 0).all() and (before[1, :, 3:, 2] > 0).all()
    torch.testing.assert_close(after[0], before[0])


def test_declared_value_weights_give_the_values_the_attention_reads(family_model):
    """W_V (its rows of a fused projection, transposed where stored [in, out]) times the projection's
    input, plus its bias rows, is the value states the model's eager attention receives."""
    _, model = family_model
    decoder = architecture.family(model.config)
    attn = architecture.attention_modules(model)[0]
    projection = decoder.projection(attn, "v")
    inputs: list[torch.Tensor] = []
    handle = projection.register_forward_pre_hook(lambda m, args: inputs.append(args[0][0].double()))
    modelling = sys.modules[type(model).__module__]
    original, values = modelling.eager_attention_forward, []

    def recording(module, query, key, value, *args, **kwargs):
        values.append(value[0].double())
        return original(module, query, key, value, *args, **kwargs)

    modelling.eager_attention_forward = recording
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([IDS]))
    finally:
        modelling.eager_attention_forward = original
        handle.remove()
    weight = decoder.attention_weight(attn, "v", model.config).detach().double()
    bias = torch.zeros(weight.shape[0], dtype=torch.float64)
    if projection.bias is not None:
        bias = decoder.value_states(projection.bias.detach().double(), model.config).reshape(-1)
    _, n_kv, head_dim = architecture.attention_shape(model.config)
    computed = (inputs[0] @ weight.T + bias).reshape(-1, n_kv, head_dim).transpose(0, 1)
    torch.testing.assert_close(computed, values[0], rtol=1e-5, atol=1e-6)
