"""The decoder's anatomy: one declaration per model family, keyed on the HF config's ``model_type``.

A :class:`Family` says where a decoder keeps its layers, its attention and MLP modules, the
q/k/v/o and gate/up/down projections (a fused q/k/v projection as slices, weights stored [in, out]),
which of them add a bias, the norms each matrix reads and the one on the attention output, their
kind (RMSNorm or LayerNorm) and the gain they apply (γ, or 1 + γ), whether queries and keys are
normalised after W_q, W_k (QK-norm), an attention-logit soft-cap, the position scheme and a
parallel residual. The attention, capture, spectra, circuits, heads, knockouts and the weight
edits read only these declarations (and the config: heads, KV heads, head_dim, sliding windows);
a model whose ``model_type`` has none is refused with the declaration to add, one whose modules
contradict its declaration is refused with what does not match, and a stage that cannot take a
family yet refuses it by name (docs/own-data.md). torch is imported inside the functions that
need it, so the module stays cheap to import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnscope.matrices import ATTENTION_TYPES, MATRIX_TYPES

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel

READS_NORM = ("q", "k", "v", "gate", "up")
"""The matrices that read a norm's output: q, k, v the attention's input norm, gate and up the
MLP's (o and down read the attention / MLP output)."""


STAGES = ("spectra", "folded spectra", "circuits", "weight edits", "sdpa capture")
"""The stages that read a family's weights or kernel beyond its attention probabilities and value norms
(:meth:`Family.unsupported` says which a family cannot take yet)."""


@dataclass(frozen=True)
class Family:
    """Where one decoder family keeps its parts (attribute names), how its projections are laid out and
    which gains, norms, biases, soft-cap and positions its attention has."""

    layers: str = "model.layers"
    """Dotted path from the causal LM to its decoder blocks (a ``ModuleList``)."""
    attention: str = "self_attn"
    mlp: str = "mlp"
    q: str = "q_proj"
    k: str = "k_proj"
    v: str = "v_proj"
    o: str = "o_proj"
    gate: str | None = "gate_proj"
    """The MLP's gate projection, or None: its MLP is not gated (GPT-2, GPT-NeoX: up, activation, down)."""
    up: str = "up_proj"
    down: str = "down_proj"
    qkv: str | None = None
    """A projection that computes queries, keys and values at once (Phi-3's ``qkv_proj``, GPT-NeoX's
    ``query_key_value``, GPT-2's ``c_attn``), or None: q, k, v are separate."""
    gate_up: str | None = None
    """A projection that computes the MLP's gate and up at once, [gate; up] (Phi-3's ``gate_up_proj``)."""
    qkv_order: tuple[str, str, str] = ("q", "k", "v")
    """The order of the fused projection's output slices."""
    qkv_per_head: bool = False
    """The fused output is grouped by head, [q_h k_h v_h] for each head h (GPT-NeoX), not by matrix
    ([q of every head, k of every KV head, v of every KV head])."""
    transposed: bool = False
    """Weights stored [in, out] (GPT-2's ``Conv1D``), not [out, in] (``nn.Linear``)."""
    biases: tuple[str, ...] = ()
    """The matrices (of :data:`MATRIX_TYPES`) whose projections add a bias, the only biases the stages
    read: the value norms take the biased value W_V x + b_V, qkscale scales the q, k biases, the
    circuits take them as a last column, a LayerNorm's fold adds W·β to them."""
    norm: str = "rms"
    """``rms`` (RMSNorm: no centring, no bias) or ``layer`` (LayerNorm: centring, γ and β)."""
    input_norm: str | None = "input_layernorm"
    """The block's norm that q, k and v read (None: they read the residual stream itself, OLMo 2)."""
    mlp_norm: str | None = "post_attention_layernorm"
    """The block's norm that gate and up read (None: the residual stream itself)."""
    norm_offset: float = 0.0
    """0 for norms that apply γ (Llama's, Mistral's), 1 for ones that apply 1 + γ (Gemma's:
    ``output * (1.0 + self.weight)``)."""
    qk_norm: tuple[str, str] | None = None
    """The attention's RMSNorms on queries and keys after W_q, W_k (QK-norm), or None."""
    qk_norm_per_head: bool = True
    """The QK-norm normalises each head's head_dim (Gemma 3, Qwen 3), or all heads' queries (keys) at
    once over heads × head_dim (OLMo 2)."""
    post_attention_norm: str | None = None
    """The block's norm on the attention output before the residual (Gemma's, OLMo 2's), or None: its
    applied gain g scales what every head writes, W_O,h v becomes g ⊙ W_O,h v (its 1/rms is common to
    a query row's keys)."""
    logit_softcap: str | None = None
    """The config key of the attention logits' soft-cap c (logits → c · tanh(logits / c), Gemma 2)."""
    positions: str = "rope"
    """``rope`` (rotary, over the config's ``partial_rotary_factor`` of head_dim where it has one) or
    ``learned`` (absolute position embeddings added to the input, GPT-2)."""
    cache_kwarg: str = "cache"
    """The keyword under which the attention module receives the KV cache (GPT-NeoX's ``layer_past``)."""
    parallel_residual: str | None = None
    """The config key that says whether attention and MLP read the same residual stream and add to it
    together (GPT-NeoX's ``use_parallel_residual``), or None: they run one after the other."""

    def norm_of(self, matrix: str) -> str | None:
        """The block's norm that ``matrix`` (one of :data:`READS_NORM`) reads (None: the residual stream)."""
        if matrix not in READS_NORM:
            raise ValueError(f"matrix {matrix!r} reads no RMSNorm (those that do: {', '.join(READS_NORM)})")
        return self.input_norm if matrix in ("q", "k", "v") else self.mlp_norm

    @property
    def matrices(self) -> tuple[str, ...]:
        """The matrices of :data:`MATRIX_TYPES` this family has (no gate where its MLP is not gated)."""
        return tuple(m for m in MATRIX_TYPES if m != "gate" or self.gate is not None)

    def projection(self, module: torch.nn.Module, matrix: str) -> torch.nn.Module:
        """The projection of ``matrix`` (q, k, v, o; gate, up, down) in its attention or MLP ``module``
        (q, k and v of a fused family: the fused projection; gate and up of a fused MLP: its one)."""
        if self.qkv is not None and matrix in ("q", "k", "v"):
            return getattr(module, self.qkv)
        if self.gate_up is not None and matrix in ("gate", "up"):
            return getattr(module, self.gate_up)
        return getattr(module, getattr(self, matrix))

    def matrix_module(self, block: torch.nn.Module, matrix: str) -> torch.nn.Module:
        """The projection of ``matrix`` in decoder ``block``."""
        parent = self.attention if matrix in ATTENTION_TYPES else self.mlp
        return self.projection(getattr(block, parent), matrix)

    def fused_rows(self, matrix: str, config: PretrainedConfig) -> torch.Tensor | None:
        """The output rows of ``matrix``'s projection that are ``matrix``'s, in head order, where the
        projection is fused (q, k, v of ``qkv``; gate, up of ``gate_up``: [gate; up]), else None."""
        import torch

        if self.gate_up is not None and matrix in ("gate", "up"):
            size = config.intermediate_size
            return torch.arange(size) + (size if matrix == "up" else 0)
        if self.qkv is None or matrix not in ("q", "k", "v"):
            return None
        n_heads, n_kv, head_dim = attention_shape(config)
        position = self.qkv_order.index(matrix)
        if self.qkv_per_head:  # [head, (q k v), head_dim]
            rows = (torch.arange(n_heads)[:, None] * 3 + position) * head_dim + torch.arange(head_dim)
            return rows.reshape(-1)
        sizes = {"q": n_heads * head_dim, "k": n_kv * head_dim, "v": n_kv * head_dim}
        start = sum(sizes[m] for m in self.qkv_order[:position])
        return torch.arange(start, start + sizes[matrix])

    def _stored(self, block: torch.nn.Module, matrix: str, name: str) -> torch.Tensor | None:
        """The projection's ``weight`` as [out, in] (a view, transposed where stored [in, out]) or its
        ``bias``; None where it has none."""
        parameter = getattr(self.matrix_module(block, matrix), name, None)
        if parameter is None or not (self.transposed and parameter.ndim == 2):
            return parameter
        return parameter.T

    def parameter(
        self, block: torch.nn.Module, matrix: str, config: PretrainedConfig, name: str = "weight"
    ) -> torch.Tensor | None:
        """The weight W [out, in] (``name`` ``weight``) or bias b [out] (``bias``; None where it has none)
        of ``matrix`` in decoder ``block``: its projection's, or its rows of a fused one, transposed
        where the family stores [in, out]. The one reader of a matrix's weights for every stage."""
        if name == "bias" and matrix not in self.biases:
            return None
        stored = self._stored(block, matrix, name)
        rows = self.fused_rows(matrix, config)
        return stored if stored is None or rows is None else stored[rows.to(stored.device)]

    def set_parameter(
        self,
        block: torch.nn.Module,
        matrix: str,
        config: PretrainedConfig,
        value: torch.Tensor,
        name: str = "weight",
    ) -> None:
        """Write ``value`` to what :meth:`parameter` reads (in place, into the stored projection)."""
        stored = self._stored(block, matrix, name)
        rows = self.fused_rows(matrix, config)
        value = value.to(stored.dtype)
        if rows is None:
            stored.copy_(value)
        else:
            stored[rows.to(stored.device)] = value

    def value_states(self, output: torch.Tensor, config: PretrainedConfig) -> torch.Tensor:
        """The value states [token, kv_head, head_dim] in the output [..., token, out] of the value
        projection (:meth:`projection` of ``v``), its bias included."""
        _, n_kv, head_dim = attention_shape(config)
        rows = self.fused_rows("v", config)
        if rows is not None:
            output = output[..., rows.to(output.device)]
        return output.reshape(-1, n_kv, head_dim)

    def qk_norms(self, attn: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
        """The attention module's norms on queries and keys (QK-norm), or None."""
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
        """The gain a norm of this family multiplies the normalised input by: γ, or 1 + γ."""
        return norm.weight + self.norm_offset

    def set_applied_gain(self, norm: torch.nn.Module, gain: torch.Tensor) -> None:
        """Make the norm multiply the normalised input by ``gain`` (in place)."""
        norm.weight.copy_(gain - self.norm_offset)

    def notes(self, config: PretrainedConfig) -> list[str]:
        """What this family's anatomy means for the analyses of ``config``'s model (its manifest notes)."""
        notes = []
        if self.qk_norm is not None:
            span = (
                "each head's queries and keys"
                if self.qk_norm_per_head
                else "all heads' queries, keys at once"
            )
            notes.append(
                f"QK-norm: {' and '.join(self.qk_norm)} (RMSNorm on {span}) set the scale of the attention "
                "logits; the spectra and base alignment of W_q, W_k are of the stored matrices, and qkscale "
                "scales the norms' gains"
            )
        if self.post_attention_norm is not None:
            notes.append(
                f"post-attention norm: {self.post_attention_norm} scales what the heads write by its gain; "
                "the value-weighted maps take the gain, the OV circuits leave it out"
            )
        if self.logit_softcap is not None:
            notes.append(
                f"attention logits soft-capped ({self.logit_softcap}): the sdpa capture route refuses it"
            )
        if self.biases:
            notes.append(
                f"biases on {', '.join(self.biases)}: the value norms take the biased values, qkscale scales "
                "the q and k biases with W_q, W_k (qktop and qkflat edit W's spectrum, the biases stay), the "
                "circuits take each bias as a last column [W | b] acting on [x; 1], the spectra W alone"
            )
        if self.norm == "layer":
            notes.append(
                "LayerNorms (centring, γ and β): a folded matrix is W·diag(γ)·(I − 11ᵀ/d), β joins its bias "
                "(W β + b: the circuits' last column; the spectra are of the linear part)"
            )
        if self.input_norm is None:
            notes.append("no pre-norms: q, k, v, the MLP read the residual stream (folded forms are raw)")
        if self.positions == "learned":
            notes.append("learned absolute positions (no RoPE): position enters with the input embeddings")
        if self.parallel_residual is not None and getattr(config, self.parallel_residual, False):
            notes.append("parallel residual: attention and MLP read the same residual stream")
        return notes

    def mismatch(self, block: torch.nn.Module, config: PretrainedConfig) -> str | None:
        """What in decoder ``block`` contradicts this declaration (a projection's bias, a norm's kind, the
        fused projection's width), or None."""
        from torch import nn

        attn = getattr(block, self.attention)
        for matrix in self.matrices:
            has_bias = getattr(self.matrix_module(block, matrix), "bias", None) is not None
            if has_bias != (matrix in self.biases):
                kind = "a" if has_bias else "no"
                return f"its {matrix} projection has {kind} bias (declared biases: {self.biases})"
        for name in filter(None, (self.input_norm, self.mlp_norm, self.post_attention_norm)):
            layer_norm = isinstance(getattr(block, name), nn.LayerNorm)
            if layer_norm != (self.norm == "layer"):
                return f"its {name} is {'a' if layer_norm else 'no'} LayerNorm (declared norm: {self.norm!r})"
        if self.qkv is not None:
            n_heads, n_kv, head_dim = attention_shape(config)
            rows = (n_heads + 2 * n_kv) * head_dim
            width = self.projection(attn, "q").weight.shape[0 if not self.transposed else 1]
            if width != rows:
                return f"its {self.qkv} has {width} outputs, not q, k, v's {rows}"
        return None

    def unsupported(self, stage: str) -> str | None:
        """Why ``stage`` (one of :data:`STAGES`) cannot take this family, or None where it can: every
        weight stage reads :meth:`parameter`, so only the sdpa route refuses (a soft-cap)."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
        if stage == "sdpa capture" and self.logit_softcap:
            return "its attention logits are soft-capped (SDPA cannot)"
        return None


def require(config: PretrainedConfig, stage: str) -> Family:
    """The family of ``config``; a ``ValueError`` naming it and ``stage`` where the stage cannot take it."""
    return required(getattr(config, "model_type", None), type(config).__name__, stage)


def required(model_type: str | None, model_class: str, stage: str) -> Family:
    """The family declared for ``model_type`` (of ``model_class``, for the messages); a ``ValueError``
    where there is none or where ``stage`` cannot take it."""
    decoder = declared(model_type, model_class)
    reason = decoder.unsupported(stage)
    if reason is not None:
        raise ValueError(
            f"{model_class} (model_type {model_type!r}): the {stage} stage is not supported for this "
            f'family yet: {reason} (docs/own-data.md, "Your own model")'
        )
    return decoder


_PRE_NORM = Family()
_GPT_BLOCK = {"norm": "layer", "biases": ("q", "k", "v", "o", "up", "down"), "gate": None}
"""GPT-2's and GPT-NeoX's block: LayerNorms, a bias on every projection, an MLP without a gate."""
FAMILIES: dict[str, Family] = {
    "llama": _PRE_NORM,
    "mistral": _PRE_NORM,
    "qwen2": Family(biases=("q", "k", "v")),
    "qwen3": Family(qk_norm=("q_norm", "k_norm")),
    "gemma2": Family(
        mlp_norm="pre_feedforward_layernorm",
        norm_offset=1.0,
        post_attention_norm="post_attention_layernorm",
        logit_softcap="attn_logit_softcapping",
    ),
    "gemma3_text": Family(
        mlp_norm="pre_feedforward_layernorm",
        norm_offset=1.0,
        qk_norm=("q_norm", "k_norm"),
        post_attention_norm="post_attention_layernorm",
    ),
    "olmo2": Family(
        input_norm=None,
        mlp_norm=None,
        qk_norm=("q_norm", "k_norm"),
        qk_norm_per_head=False,
        post_attention_norm="post_attention_layernorm",
    ),
    "phi3": Family(qkv="qkv_proj", gate_up="gate_up_proj"),
    "gpt_neox": Family(
        **_GPT_BLOCK,
        layers="gpt_neox.layers",
        attention="attention",
        qkv="query_key_value",
        qkv_per_head=True,
        o="dense",
        up="dense_h_to_4h",
        down="dense_4h_to_h",
        parallel_residual="use_parallel_residual",
        cache_kwarg="layer_past",
    ),
    "gpt2": Family(
        **_GPT_BLOCK,
        layers="transformer.h",
        attention="attn",
        qkv="c_attn",
        transposed=True,
        o="c_proj",
        up="c_fc",
        down="c_proj",
        input_norm="ln_1",
        mlp_norm="ln_2",
        positions="learned",
    ),
}
"""``model_type`` → its family. Gemma's ``post_attention_layernorm`` normalises the attention output
before the residual and its MLP reads ``pre_feedforward_layernorm``; OLMo 2 has post-norms only.
GPT-NeoX and GPT-2 have no gate (their spectra have no gate rows); Phi-3 fuses gate and up."""


TINY_ALIASES = {"gemma3": "gemma3_text"}
"""A tiny random spec's ``architecture`` names that are not a ``model_type`` (the config schema's)."""


def tiny_architectures() -> list[str]:
    """What a tiny random spec's ``architecture`` may name: every declared family (its ``model_type``)
    and :data:`TINY_ALIASES` (the config schema's enum)."""
    return sorted({*FAMILIES, *TINY_ALIASES})


def model_type_of(name: str) -> str:
    """The ``model_type`` of a tiny random spec's ``architecture``."""
    return TINY_ALIASES.get(name, name)


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

    decoder = family(model.config)
    path = decoder.layers
    layers = model
    for name in path.split("."):
        layers = getattr(layers, name, None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(
            f"{type(model).__name__}: no decoder layers at .{path} (the {model.config.model_type!r} "
            "declaration in attnscope.architecture.FAMILIES)"
        )
    wrong = decoder.mismatch(layers[0], model.config)
    if wrong is not None:
        raise TypeError(
            f"{type(model).__name__}: {wrong}; the {model.config.model_type!r} declaration in "
            "attnscope.architecture.FAMILIES does not describe this model"
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
