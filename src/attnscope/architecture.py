"""The decoder's anatomy: one declaration per model family, keyed on the HF config's ``model_type``.

A :class:`Family` says where a decoder keeps its layers, its attention and MLP modules, the
q/k/v/o and gate/up/down projections, the RMSNorms each matrix reads, the gain those norms apply
(γ, or 1 + γ) and whether queries and keys are normalised after W_q, W_k (QK-norm). The
attention, capture, spectra, circuits, heads and the weight edits read only these declarations
(and the config: heads, KV heads, head_dim, sliding windows); a model whose ``model_type`` has
none is refused with the declaration to add (docs/own-data.md). torch is imported inside the
functions that need it, so the module stays cheap to import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnscope.matrices import ATTENTION_TYPES

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel

READS_NORM = ("q", "k", "v", "gate", "up")
"""The matrices that read an RMSNorm's output: q, k, v the attention's input norm, gate and up the
MLP's (o and down read the attention / MLP output)."""


@dataclass(frozen=True)
class Family:
    """Where one decoder family keeps its parts (attribute names) and the gain its RMSNorms apply."""

    layers: str = "model.layers"
    """Dotted path from the causal LM to its decoder blocks (a ``ModuleList``)."""
    attention: str = "self_attn"
    mlp: str = "mlp"
    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    o: str = "o_proj"
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    input_norm: str = "input_layernorm"
    """The block's norm that q, k and v read."""
    mlp_norm: str = "post_attention_layernorm"
    """The block's norm that gate and up read."""
    norm_offset: float = 0.0
    """0 for RMSNorms that apply γ (Llama's, Mistral's), 1 for ones that apply 1 + γ (Gemma's:
    ``output * (1.0 + self.weight)``)."""
    qk_norm: tuple[str, str] | None = None
    """The attention's RMSNorms on each head's queries and keys after W_q, W_k (QK-norm), or None."""
    post_attention_norm: str | None = None
    """The block's RMSNorm on the attention output before the residual (Gemma's), or None: its applied
    gain g scales what every head writes, W_O,h v becomes g ⊙ W_O,h v (its 1/rms is common to a
    query row's keys)."""

    def norm_of(self, matrix: str) -> str:
        """The block's RMSNorm that ``matrix`` (one of :data:`READS_NORM`) reads."""
        if matrix not in READS_NORM:
            raise ValueError(f"matrix {matrix!r} reads no RMSNorm (those that do: {', '.join(READS_NORM)})")
        return self.input_norm if matrix in ("q", "k", "v") else self.mlp_norm

    def projection(self, module: torch.nn.Module, matrix: str) -> torch.nn.Module:
        """The projection of ``matrix`` (q, k, v, o; gate, up, down) in its attention or MLP ``module``."""
        return getattr(module, getattr(self, matrix))

    def matrix_module(self, block: torch.nn.Module, matrix: str) -> torch.nn.Module:
        """The projection of ``matrix`` in decoder ``block``."""
        parent = self.attention if matrix in ATTENTION_TYPES else self.mlp
        return self.projection(getattr(block, parent), matrix)

    def qk_norms(self, attn: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
        """The attention module's RMSNorms on queries and keys (QK-norm), or None."""
        if self.qk_norm is None:
            return None
        q_norm, k_norm = self.qk_norm
        return getattr(attn, q_norm), getattr(attn, k_norm)

    def output_gain(self, block: torch.nn.Module) -> torch.Tensor | None:
        """The applied gain g [hidden] of ``block``'s post-attention norm, or None where it has none."""
        if self.post_attention_norm is None:
            return None
        return self.applied_gain(getattr(block, self.post_attention_norm))

    def applied_gain(self, norm: torch.nn.Module) -> torch.Tensor:
        """The gain an RMSNorm of this family multiplies the normalised input by: γ, or 1 + γ."""
        return norm.weight + self.norm_offset

    def set_applied_gain(self, norm: torch.nn.Module, gain: torch.Tensor) -> None:
        """Make the RMSNorm multiply the normalised input by ``gain`` (in place)."""
        norm.weight.copy_(gain - self.norm_offset)


_PRE_NORM = Family()
FAMILIES: dict[str, Family] = {
    "llama": _PRE_NORM,
    "mistral": _PRE_NORM,
    "gemma3_text": Family(
        mlp_norm="pre_feedforward_layernorm",
        norm_offset=1.0,
        qk_norm=("q_norm", "k_norm"),
        post_attention_norm="post_attention_layernorm",
    ),
}
"""``model_type`` → its family. Gemma 3's ``post_attention_layernorm`` normalises the attention output
before the residual; its MLP reads ``pre_feedforward_layernorm``."""


def family(config: PretrainedConfig) -> Family:
    """The declaration of ``config``'s family; a clear ``ValueError`` where there is none."""
    return declared(getattr(config, "model_type", None), type(config).__name__)


def declared(model_type: str | None, model_class: str) -> Family:
    """The family declared for ``model_type`` (of ``model_class``, for the message), or a ``ValueError``
    that names them and the declaration to add."""
    if model_type not in FAMILIES:
        raise ValueError(
            f"{model_class} (model_type {model_type!r}): no decoder family declared for it "
            f"(declared: {', '.join(sorted(FAMILIES))}); attnscope needs to know where its layers, "
            "attention, projections and norms live and which gain its norms apply: add a Family to "
            'attnscope.architecture.FAMILIES (docs/own-data.md, "Your own model")'
        )
    return FAMILIES[model_type]


def decoder_layers(model: PreTrainedModel) -> torch.nn.ModuleList:
    """The decoder blocks of a HF causal LM, where its family declares them."""
    from torch import nn

    path = family(model.config).layers
    layers = model
    for name in path.split("."):
        layers = getattr(layers, name, None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(
            f"{type(model).__name__}: no decoder layers at .{path} (the {model.config.model_type!r} "
            "declaration in attnscope.architecture.FAMILIES)"
        )
    return layers


def attention_modules(model: PreTrainedModel) -> list[torch.nn.Module]:
    """The self-attention module of every layer (``blocks.{l}.attn``)."""
    name = family(model.config).attention
    return [getattr(layer, name) for layer in decoder_layers(model)]


def attention_shape(config: PretrainedConfig) -> tuple[int, int, int]:
    """(query heads, KV heads, head_dim) of a decoder config."""
    n_heads = config.num_attention_heads
    n_kv = getattr(config, "num_key_value_heads", None) or n_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    return n_heads, n_kv, head_dim


def kv_head_index(n_heads: int, n_kv_heads: int) -> torch.Tensor:
    """The KV head each query head reads under grouped-query attention: ``h // (n_heads / n_kv)``.

    HF's ``repeat_kv`` expands KV head j to query heads ``j·n_rep … j·n_rep + n_rep − 1``.
    """
    if n_heads % n_kv_heads:
        raise ValueError(
            f"num_attention_heads={n_heads} is not a multiple of num_key_value_heads={n_kv_heads}"
        )
    import torch

    return torch.arange(n_heads) // (n_heads // n_kv_heads)


def sliding_windows(config: PretrainedConfig) -> dict[int, int]:
    """Layer → its sliding window W, for the layers that have one (a query sees its last W keys, itself
    included, as transformers' ``sliding_window_overlay``): Gemma 3's ``sliding_attention`` layers,
    every layer of a model with ``sliding_window`` set and no ``layer_types`` (Mistral)."""
    window = getattr(config, "sliding_window", None)
    if window is None:
        return {}
    types = getattr(config, "layer_types", None) or ["sliding_attention"] * config.num_hidden_layers
    return {layer: window for layer, kind in enumerate(types) if kind == "sliding_attention"}
