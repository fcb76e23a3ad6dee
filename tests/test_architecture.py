"""The family declarations against the tiny models they describe: every declared part exists, the
declared gain is what the norms' forward applies, and an undeclared family is refused."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import BloomConfig

from attnscope import architecture, matrices


@pytest.fixture(params=["tiny_llama", "tiny_mistral", "tiny_gemma"])
def tiny_model(request):
    return request.getfixturevalue(request.param)[0]


def test_every_declared_part_is_in_the_model(tiny_model):
    decoder = architecture.family(tiny_model.config)
    layers = architecture.decoder_layers(tiny_model)
    assert len(layers) == tiny_model.config.num_hidden_layers
    for block in layers:
        for matrix in matrices.MATRIX_TYPES:
            assert isinstance(decoder.matrix_module(block, matrix), torch.nn.Linear), matrix
        for matrix in architecture.READS_NORM:
            assert hasattr(block, decoder.norm_of(matrix)), matrix
    attn = architecture.attention_modules(tiny_model)[0]
    assert (decoder.qk_norms(attn) is None) == (getattr(attn, "q_norm", None) is None)


def test_declared_gain_is_what_the_norm_applies(tiny_model):
    """Setting the applied gain to 2, then to 1, doubles the norm's output: with a wrong offset the
    ratio is 3/2 (γ taken for 1 + γ) or the unit-gain output is 0 (1 + γ taken for γ)."""
    decoder = architecture.family(tiny_model.config)
    norm = getattr(architecture.decoder_layers(tiny_model)[0], decoder.input_norm)
    x = torch.randn(3, norm.weight.shape[0], generator=torch.Generator().manual_seed(0))
    outputs = []
    for gain in (2.0, 1.0):
        edited = copy.deepcopy(norm)
        with torch.no_grad():
            decoder.set_applied_gain(edited, torch.full_like(norm.weight, gain))
            torch.testing.assert_close(decoder.applied_gain(edited), torch.full_like(norm.weight, gain))
            outputs.append(edited(x))
    assert outputs[1].abs().min() > 0
    torch.testing.assert_close(outputs[0], 2 * outputs[1])


def test_a_family_without_a_declaration_is_refused():
    with pytest.raises(
        ValueError, match=r"BloomConfig \(model_type 'bloom'\).*attnscope.architecture.FAMILIES"
    ):
        architecture.family(BloomConfig())


def test_a_declaration_that_misses_the_layers_says_where_it_looked(tiny_llama, monkeypatch):
    monkeypatch.setitem(architecture.FAMILIES, "llama", architecture.Family(layers="model.blocks"))
    with pytest.raises(TypeError, match=r"no decoder layers at \.model\.blocks"):
        architecture.decoder_layers(tiny_llama[0])
