"""Attention probabilities of every layer as the forward pass makes them: the two capture routes.

``eager``: a forward hook on every layer's self-attention takes the probabilities the eager
kernel returns. ``sdpa``: the model runs its fused kernel (a registered transformers attention
function) and each layer's probabilities are recomputed beside it from that layer's queries
and keys, in query chunks, with the model's own scaling, mask and GQA mapping. Either way a
sink receives ``(layer, probabilities [head, query, key])`` before the forward pass goes on
to the next layer (:mod:`attnscope.attention` stores them).

Beside either route, :class:`ValueNorms` takes what each head writes per unit of attention:
‖g ⊙ W_O,h · v_j‖ for every key j (g the applied gain of a post-attention norm, where the family
declares one; else ‖W_O,h · v_j‖), from the layer's own value states (a hook on ``v_proj``, which
runs before the layer's attention), so the value-weighted maps (Kobayashi et al. 2020,
"Attention is not only a weight") need no second forward pass.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from functools import partial
from typing import Any, Self

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from attnscope import architecture

SCORE_CHUNK_BYTES = 16 << 20
"""Most float32 scores the ``sdpa`` route recomputes at once (query rows per chunk follow)."""


class LayerHooks:
    """A forward hook on one module per layer (``modules``, in layer order) while the context is
    open: each call of a module runs the subclass's ``_hook(layer, module, args, output)``."""

    modules: list[torch.nn.Module]

    def __enter__(self) -> Self:
        hooks = (partial(self._hook, layer) for layer in range(len(self.modules)))
        self.handles = [module.register_forward_hook(hook) for module, hook in zip(self.modules, hooks)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


class LayerCapture(LayerHooks):
    """Forward hooks on every layer's self-attention: ``sink(layer, weights)`` receives the
    layer's probabilities of the batch's first sequence, [head, query, key], as the model
    computed them (its dtype, on its device), before the forward pass goes on to the next layer.
    """

    def __init__(self, model: PreTrainedModel, sink: Callable[[int, torch.Tensor], None]):
        self.modules = architecture.attention_modules(model)
        self.sink = sink

    def _hook(self, layer: int, module: torch.nn.Module, args: Any, output: Any) -> None:
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        if weights is None:
            raise RuntimeError(
                f"layer {layer}: the attention module returned no probabilities; load the model "
                "with attn_implementation='eager' (attnscope.models.load_model does)"
            )
        self.sink(layer, weights[0].detach())


KERNELS = ("eager", "sdpa")
RECOMPUTE = "attnscope_sdpa_recompute"
"""The registered attention implementation of the ``sdpa`` route (transformers' AttentionInterface)."""
_RECOMPUTE_SINK: ContextVar[Callable[[int, torch.Tensor], None] | None] = ContextVar("sink", default=None)


def recomputed_probabilities(
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    chunk_bytes: int = SCORE_CHUNK_BYTES,
) -> torch.Tensor:
    """The first sequence's attention probabilities [head, query, key], as eager attention
    computes them, from the layer's rotated queries [1, head, query, d] and keys
    [1, kv_head, key, d], in query chunks of at most ``chunk_bytes`` of float32 scores.

    ``attention_mask`` is what the model built for SDPA: ``None`` (plain causal), a boolean
    mask (True: visible; causal, sliding window, padding) or an additive float mask.
    """
    q = query[0]
    k = repeat_kv(key, query.shape[1] // key.shape[1])[0].transpose(1, 2)  # [head, d, key]
    num_heads, n_query, n_key = q.shape[0], q.shape[1], k.shape[2]
    rows = max(1, chunk_bytes // (4 * num_heads * n_key))
    out = torch.empty(num_heads, n_query, n_key, dtype=query.dtype, device=query.device)
    for start in range(0, n_query, rows):
        stop = min(start + rows, n_query)
        scores = torch.matmul(q[:, start:stop], k) * scaling
        lowest = torch.finfo(scores.dtype).min
        if attention_mask is None:
            position = torch.arange(start, stop, device=q.device)[:, None] + (n_key - n_query)
            scores = scores.masked_fill(torch.arange(n_key, device=q.device) > position, lowest)
        elif attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask[0, :, start:stop], lowest)
        else:
            scores = scores + attention_mask[0, :, start:stop]
        out[:, start:stop] = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    return out


def _sdpa_recompute(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA's output; the probabilities, recomputed, go to the active capture's sink."""
    output, _ = sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    sink = _RECOMPUTE_SINK.get()
    if sink is not None:
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        sink(module.layer_idx, recomputed_probabilities(query, key, attention_mask, scale))
    return output, None


AttentionInterface.register(RECOMPUTE, _sdpa_recompute)
AttentionMaskInterface.register(RECOMPUTE, sdpa_mask)


class RecomputeCapture:
    """The ``sdpa`` route of :class:`LayerCapture`: inside the context the model runs SDPA and
    ``sink(layer, probabilities)`` receives each layer's recomputed probabilities of the
    batch's first sequence [head, query, key]; the model's attention implementation is
    restored on exit."""

    def __init__(self, model: PreTrainedModel, sink: Callable[[int, torch.Tensor], None]):
        self.model, self.sink = model, sink

    def __enter__(self) -> RecomputeCapture:
        architecture.require(self.model.config, "sdpa capture")
        self.previous = self.model.config._attn_implementation
        self.model.set_attn_implementation(RECOMPUTE)
        self.token = _RECOMPUTE_SINK.set(self.sink)
        return self

    def __exit__(self, *exc: object) -> None:
        _RECOMPUTE_SINK.reset(self.token)
        self.model.set_attn_implementation(self.previous)


def capture(model: PreTrainedModel, sink: Callable[[int, torch.Tensor], None], kernel: str = "eager"):
    """The capture context of ``kernel`` (``eager``: the kernel's own probabilities; ``sdpa``:
    recomputed from queries and keys beside the fused kernel)."""
    if kernel not in KERNELS:
        raise ValueError(f"attention.kernel: unknown kernel {kernel!r}; expected one of {', '.join(KERNELS)}")
    return LayerCapture(model, sink) if kernel == "eager" else RecomputeCapture(model, sink)


def output_grams(
    o_weight: torch.Tensor, num_heads: int, head_dim: int, gain: torch.Tensor | None = None
) -> torch.Tensor:
    """G_h = W_O,hᵀ diag(g²) W_O,h [head, head_dim, head_dim] in float32, W_O,h the head's
    ``head_dim`` columns of W_O (``o_weight`` [hidden, head·head_dim]), g the post-attention norm's
    applied ``gain`` [hidden] (none: G_h = W_O,hᵀ W_O,h): ‖g ⊙ W_O,h v‖² = vᵀ G_h v, so a norm costs
    head_dim² instead of head_dim × hidden."""
    o = o_weight.detach().to(torch.float64)
    if gain is not None:
        o = o * gain.detach().to(torch.float64)[:, None]
    w = o.reshape(o.shape[0], num_heads, head_dim).transpose(0, 1)  # [head, hidden, head_dim]
    return (w.transpose(1, 2) @ w).to(torch.float32)


def written_norms(values: torch.Tensor, grams: torch.Tensor, kv_of: torch.Tensor) -> torch.Tensor:
    """‖W_O,h · v_{g(h), j}‖ [head, key] (with a gain in ``grams``: ‖g ⊙ W_O,h · v_{g(h), j}‖) of
    value states [key, kv_head, head_dim] (g(h): the query head's KV head), in float32 on the CPU."""
    v = values.to(torch.float32)[:, kv_of].transpose(0, 1)  # [head, key, head_dim]
    squared = ((v @ grams.to(v.device)) * v).sum(dim=-1)
    return squared.clamp(min=0).sqrt().cpu()


class ValueNorms(LayerHooks):
    """Forward hooks on every layer's value projection (``v_proj``, or the fused projection's value
    rows, bias included): ``norms[layer]`` holds the batch's first
    sequence's :func:`written_norms` [head, key] (through the layer's post-attention gain, where its
    family declares one) of the last forward pass through that layer
    (the keys that pass computed: after a KV cache, only the new ones)."""

    def __init__(self, model: PreTrainedModel):
        self.config = model.config
        num_heads, num_kv_heads, head_dim = architecture.attention_shape(model.config)
        self.kv_of = architecture.kv_head_index(num_heads, num_kv_heads)
        self.decoder = architecture.family(model.config)
        blocks = architecture.decoder_layers(model)
        attention = architecture.attention_modules(model)
        self.modules = [self.decoder.projection(m, "v") for m in attention]
        self.grams = [
            output_grams(
                self.decoder.parameter(block, "o", model.config),
                num_heads,
                head_dim,
                self.decoder.output_gain(block),
            )
            for m, block in zip(attention, blocks, strict=True)
        ]
        self.norms: dict[int, torch.Tensor] = {}

    def _hook(self, layer: int, module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        values = self.decoder.value_states(output[0].detach(), self.config)
        self.norms[layer] = written_norms(values, self.grams[layer], self.kv_of)
