"""Norm folding and per-head QK and OV circuits: the weights as the residual stream sees them.

A matrix that reads a normalised input sees ``g ⊙ x̂ (+ β)``, so the map it applies to the normalised
direction is ``W·diag(g)`` (TransformerLens's ``fold_ln``), g the gain the norm applies: γ on
Llama/Mistral/Qwen/Phi-3, 1 + γ on Gemma. A LayerNorm (GPT-2, GPT-NeoX) also centres, x̂ = (x − μ)/σ,
so its folded map is ``W·diag(g)·(I − 11ᵀ/d)`` on x/σ, and its β adds ``W·β`` to the bias. Which norm
each matrix reads, its kind and the gain it applies are the model family's declaration
(:mod:`attnscope.architecture`): q, k, v read the attention block's input norm, gate and up the MLP's;
a matrix that reads the residual stream itself (OLMo 2) folds nothing. QK-norms (Gemma 3, Qwen 3,
OLMo 2) act after W_q, W_k and are not folded: on such a model the logits' scale is set by those
norms, and the circuits below are of the stored matrices. A family with biases or LayerNorms keeps
each map's offset as a last column, [W | b] acting on [x̂; 1] (:func:`affine`), so the QK circuit's
bilinear form includes the bias terms; the spectra (:mod:`attnscope.spectra`) are of W alone.
Query head h and its KV head g (grouped-query pairing) form the QK circuit
``W_QK^h = diag(γ)·W_q,hᵀ·W_k,g·diag(γ)`` (hidden × hidden, rank ≤ head_dim), whose bilinear form
``x̂ᵀ W_QK x̂'`` is the attention logit before RoPE and the 1/√head_dim scale.

The circuit's spectrum is taken through its head_dim × head_dim core: with thin QR
factorisations ``Aᵀ = Q_a R_a`` and ``Bᵀ = Q_b R_b`` of A = W_q,h·diag(γ) and
B = W_k,g·diag(γ), ``AᵀB = Q_a (R_a R_bᵀ) Q_bᵀ`` has the singular values of ``R_a R_bᵀ``:
O(heads·hidden·head_dim²) per layer instead of a dense hidden² matrix and its SVD per head.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from attnscope.architecture import READS_NORM, Family, attention_shape, decoder_layers, kv_head_index, require
from attnscope.matrices import MATRIX_FORMS

TOP_K = 10


QK_COLUMNS = [
    "layer",
    "head",
    "kv_head",
    "form",
    "trace",
    "frobenius_norm",
    "sigma_max",
    "stable_rank",
    "top10_sigma",
]


def norm_scale(decoder: Family, block: nn.Module, matrix: str) -> torch.Tensor:
    """The gain applied by the norm that ``matrix`` of decoder ``block`` reads (float64, detached); a
    scalar 1 where it reads the residual stream itself (OLMo 2)."""
    name = decoder.norm_of(matrix)
    if name is None:
        return torch.ones(1, dtype=torch.float64)
    return decoder.applied_gain(getattr(block, name)).detach().to(torch.float64)


def norm_shift(decoder: Family, block: nn.Module, matrix: str) -> torch.Tensor | None:
    """The bias β (float64, detached) that the LayerNorm ``matrix`` reads adds, or None (an RMSNorm)."""
    if not centres(decoder, matrix):
        return None
    return getattr(block, decoder.norm_of(matrix)).bias.detach().to(torch.float64)


def centres(decoder: Family, matrix: str) -> bool:
    """Whether the norm ``matrix`` reads subtracts the mean (a LayerNorm)."""
    return decoder.norm == "layer" and decoder.norm_of(matrix) is not None


def fold(weight: torch.Tensor, gain: torch.Tensor, centred: bool) -> torch.Tensor:
    """W·diag(g), times the centring I − 11ᵀ/d where the norm centres (each row less its mean): the
    map a matrix applies to its norm's normalised input x/σ (RMSNorm: x/rms)."""
    folded = weight * gain.to(weight.device)[None, :]
    return folded - folded.mean(dim=1, keepdim=True) if centred else folded


def affine(decoder: Family, block: nn.Module, matrix: str, config: Any, form: str) -> torch.Tensor:
    """``matrix``'s [W | b] (float64, CPU; b = 0 where it has no bias) in ``form``: raw, as stored, acting
    on [x; 1]; folded, [fold(W) | W·β + b] acting on [x̂; 1], x̂ the norm's normalised input."""
    weight = decoder.parameter(block, matrix, config).detach().to(torch.float64).cpu()
    bias = decoder.parameter(block, matrix, config, "bias")
    bias = torch.zeros(len(weight), dtype=torch.float64) if bias is None else bias.detach().double().cpu()
    if form == "folded":
        shift = norm_shift(decoder, block, matrix)
        bias = bias if shift is None else bias + weight @ shift
        weight = fold(weight, norm_scale(decoder, block, matrix), centres(decoder, matrix))
    return torch.cat([weight, bias[:, None]], dim=1)


@torch.no_grad()
def fold_norms(model: nn.Module) -> None:
    """Fold every norm that q, k, v, gate, up read into those matrices, in place: W → fold(W), and a
    LayerNorm's β into the bias, b → W·β + b; the norm then applies gain 1 (and β = 0). The model
    computes the same function, and its q, k, v, gate, up weights are the folded ones."""
    decoder = require(model.config, "circuits")
    readers = [m for m in READS_NORM if m in decoder.matrices and decoder.norm_of(m) is not None]
    for block in decoder_layers(model):
        for matrix in readers:
            folded = affine(decoder, block, matrix, model.config, "folded")
            decoder.set_parameter(block, matrix, model.config, folded[:, :-1])
            if decoder.parameter(block, matrix, model.config, "bias") is not None:
                decoder.set_parameter(block, matrix, model.config, folded[:, -1], "bias")
            elif folded[:, -1].any():
                raise ValueError(f"{matrix} has no bias to take its norm's β (W·β)")
        for name in {decoder.norm_of(m) for m in readers}:
            norm = getattr(block, name)
            decoder.set_applied_gain(norm, torch.ones_like(norm.weight))
            if getattr(norm, "bias", None) is not None:
                norm.bias.zero_()


def _circuit_stats(a: torch.Tensor, b: torch.Tensor) -> dict[str, np.ndarray]:
    """Per head, statistics of ``A_hᵀ B_h`` from ``a``, ``b`` [head, head_dim, hidden] (float64)."""
    _, r_a = torch.linalg.qr(a.mT)  # [head, head_dim, head_dim]
    _, r_b = torch.linalg.qr(b.mT)
    sigma = torch.linalg.svdvals(r_a @ r_b.mT)  # descending
    frob2 = sigma.square().sum(-1)
    return {
        "trace": (a * b).sum(dim=(1, 2)).numpy(),
        "frobenius_norm": frob2.sqrt().numpy(),
        "sigma_max": sigma[:, 0].numpy(),
        "stable_rank": (frob2 / sigma[:, 0].square()).numpy(),
        "top10_sigma": sigma[:, :TOP_K].numpy(),
    }


def with_offsets(decoder: Family) -> bool:
    """Whether the circuits of this family keep the affine maps' last column (biases, or a LayerNorm's
    β): [W | b] on [x; 1] makes the QK circuit's bilinear form the pre-RoPE logit bias terms included."""
    return bool(decoder.biases) or decoder.norm == "layer"


def _layer_forms(
    decoder: Family, block: nn.Module, matrices: Sequence[str], config: Any
) -> Iterator[tuple[str, str, dict[str, torch.Tensor]]]:
    """(form, key, {matrix: its affine map}) for each of :data:`MATRIX_FORMS`, without the offset column
    where the family has none; a folded form equal to the raw one bit for bit (unit gains, no β, a
    freshly initialised model) shares the raw key, so its statistics are computed once."""
    keep = None if with_offsets(decoder) else -1
    raw: dict[str, torch.Tensor] = {}
    for form in MATRIX_FORMS:
        maps = {m: affine(decoder, block, m, config, form)[:, :keep] for m in matrices}
        same = bool(raw) and all(torch.equal(maps[m], raw[m]) for m in matrices)
        raw = raw or maps
        yield form, "raw" if same else form, maps


def qk_circuits(model: nn.Module) -> pd.DataFrame:
    """One row per layer × query head × form (raw: W_q,hᵀW_k,g of the stored matrices; folded: of the
    folded ones, :func:`affine`; with a bias column where the family has offsets, :func:`with_offsets`),
    columns :data:`QK_COLUMNS`."""
    n_heads, n_kv, head_dim = attention_shape(model.config)
    kv_of = kv_head_index(n_heads, n_kv)
    decoder = require(model.config, "circuits")
    rows = []
    for layer, block in enumerate(decoder_layers(model)):
        stats: dict[str, dict[str, np.ndarray]] = {}
        for form, key, maps in _layer_forms(decoder, block, ("q", "k"), model.config):
            if key not in stats:
                width = maps["q"].shape[1]
                a = maps["q"].reshape(n_heads, head_dim, width)
                b = maps["k"].reshape(n_kv, head_dim, width)[kv_of]
                stats[key] = _circuit_stats(a, b)
            rows += _head_rows(layer, form, kv_of, stats[key], QK_COLUMNS[4:])
    df = pd.DataFrame(rows, columns=QK_COLUMNS)
    df["top10_sigma"] = df["top10_sigma"].map(lambda v: np.asarray(v).tolist())
    return df


OV_COLUMNS = ["layer", "head", "kv_head", "form", "trace", "frobenius_norm", "sigma_max", "stable_rank"]


def ov_circuits(model: nn.Module) -> pd.DataFrame:
    """One row per layer × query head × form of the OV circuit ``W_O,h · W_V,g`` (hidden × hidden,
    rank ≤ head_dim; g the query head's KV head under grouped-query attention; folded: of the folded
    W_V, :func:`affine`; with W_V's bias column where the family has offsets), columns
    :data:`OV_COLUMNS`: what the head writes to the residual stream per unit of attention. W_O,h is
    the head's head_dim columns of W_O; its bias (not a head's) is left out, and so is a norm after
    W_O (Gemma's, OLMo 2's post-attention norm)."""
    n_heads, n_kv, head_dim = attention_shape(model.config)
    kv_of = kv_head_index(n_heads, n_kv)
    decoder = require(model.config, "circuits")
    rows = []
    for layer, block in enumerate(decoder_layers(model)):
        o = decoder.parameter(block, "o", model.config).detach().to(torch.float64).cpu()
        a = o.reshape(o.shape[0], n_heads, head_dim).permute(1, 2, 0)  # W_O,hᵀ [head, head_dim, hidden]
        stats: dict[str, dict[str, np.ndarray]] = {}
        for form, key, maps in _layer_forms(decoder, block, ("v",), model.config):
            if key not in stats:
                width = maps["v"].shape[1]
                b = maps["v"].reshape(n_kv, head_dim, width)[kv_of]
                stats[key] = _circuit_stats(nn.functional.pad(a, (0, width - a.shape[-1])), b)
            rows += _head_rows(layer, form, kv_of, stats[key], OV_COLUMNS[4:])
    return pd.DataFrame(rows, columns=OV_COLUMNS)


def _head_rows(
    layer: int, form: str, kv_of: torch.Tensor, stats: dict[str, Any], keys: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per query head of a layer's circuit statistics ``stats`` (the columns ``keys``)."""
    return [
        {
            "layer": layer,
            "head": head,
            "kv_head": int(kv_of[head]),
            "form": form,
            **{k: stats[k][head] for k in keys},
        }
        for head in range(len(kv_of))
    ]
