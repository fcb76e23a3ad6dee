"""RMSNorm folding and per-head QK circuits: the weights as the residual stream sees them.

A matrix that reads a normalised input sees ``g ⊙ x / rms(x)``, so the map it applies to the
normalised direction is ``W·diag(g)`` (TransformerLens's ``fold_ln``), g the gain the norm applies:
γ on Llama/Mistral, 1 + γ on Gemma. Which norm each matrix reads and the gain it applies are the
model family's declaration (:mod:`attnscope.architecture`): q, k, v read the attention block's
input norm, gate and up the MLP's. Gemma 3's q_norm and k_norm (QK-norm) act
after W_q, W_k and are not folded: on such a model the logits' scale is set by those norms, and the
circuits below are of the stored matrices.
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


def _forms(
    decoder: Family, block: nn.Module, matrix: str, hidden: int
) -> Iterator[tuple[str, str, torch.Tensor]]:
    """(form, key, γ) of each of :data:`MATRIX_FORMS` for a matrix that reads a norm: γ = 1 for
    the raw weights, the norm's applied gain folded; forms of equal gains share a key
    (:func:`_gain_key`), so their statistics are computed once."""
    for form in MATRIX_FORMS:
        gamma = torch.ones(hidden, dtype=torch.float64)
        if form == "folded":
            gamma = norm_scale(decoder, block, matrix).cpu()
        yield form, _gain_key(form, gamma), gamma


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
    """The gain applied by the RMSNorm that ``matrix`` of decoder ``block`` reads (float64, detached)."""
    return decoder.applied_gain(getattr(block, decoder.norm_of(matrix))).detach().to(torch.float64)


@torch.no_grad()
def fold_norms(model: nn.Module) -> None:
    """Fold the gain of every RMSNorm that q, k, v, gate, up read into those matrices, in place (the
    norm then applies gain 1): the model computes the same function, and its q, k, v, gate, up
    weights are the folded ones."""
    decoder = require(model.config, "circuits")
    readers = {matrix: decoder.norm_of(matrix) for matrix in READS_NORM}
    for block in decoder_layers(model):
        for norm in dict.fromkeys(readers.values()):
            module = getattr(block, norm)
            gain = decoder.applied_gain(module)
            for matrix in (m for m, n in readers.items() if n == norm):
                weight = decoder.matrix_module(block, matrix).weight
                weight.mul_(gain.to(weight.dtype)[None, :])
            decoder.set_applied_gain(module, torch.ones_like(gain))


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


def qk_circuits(model: nn.Module) -> pd.DataFrame:
    """One row per layer × query head × form (raw: W_q,hᵀW_k,g; folded: with γ on both sides),
    columns :data:`QK_COLUMNS`."""
    n_heads, n_kv, head_dim = attention_shape(model.config)
    kv_of = kv_head_index(n_heads, n_kv)
    decoder = require(model.config, "circuits")
    rows = []
    for layer, block in enumerate(decoder_layers(model)):
        q = decoder.matrix_module(block, "q").weight.detach().to(torch.float64).cpu()
        k = decoder.matrix_module(block, "k").weight.detach().to(torch.float64).cpu()
        hidden = q.shape[1]
        stats: dict[str, dict[str, np.ndarray]] = {}
        for form, key, gamma in _forms(decoder, block, "q", hidden):
            if key not in stats:
                a = (q * gamma).reshape(n_heads, head_dim, hidden)
                b = (k * gamma).reshape(n_kv, head_dim, hidden)[kv_of]
                stats[key] = _circuit_stats(a, b)
            rows += _head_rows(layer, form, kv_of, stats[key], QK_COLUMNS[4:])
    df = pd.DataFrame(rows, columns=QK_COLUMNS)
    df["top10_sigma"] = df["top10_sigma"].map(lambda v: np.asarray(v).tolist())
    return df


OV_COLUMNS = ["layer", "head", "kv_head", "form", "trace", "frobenius_norm", "sigma_max", "stable_rank"]


def ov_circuits(model: nn.Module) -> pd.DataFrame:
    """One row per layer × query head × form of the OV circuit ``W_O,h · W_V,g`` (hidden × hidden,
    rank ≤ head_dim; g the query head's KV head under grouped-query attention; folded: times
    diag(γ) of the norm v reads), columns :data:`OV_COLUMNS`: what the head writes to the residual
    stream per unit of attention. W_O,h is the head's head_dim columns of o_proj; biases are left
    out, and so is a norm after o_proj (Gemma 3's post-attention norm)."""
    n_heads, n_kv, head_dim = attention_shape(model.config)
    kv_of = kv_head_index(n_heads, n_kv)
    decoder = require(model.config, "circuits")
    rows = []
    for layer, block in enumerate(decoder_layers(model)):
        v = decoder.matrix_module(block, "v").weight.detach().to(torch.float64).cpu()
        o = decoder.matrix_module(block, "o").weight.detach().to(torch.float64).cpu()
        hidden = v.shape[1]
        a = o.reshape(o.shape[0], n_heads, head_dim).permute(1, 2, 0)  # W_O,hᵀ [head, head_dim, hidden]
        stats: dict[str, dict[str, np.ndarray]] = {}
        for form, key, gamma in _forms(decoder, block, "v", hidden):
            if key not in stats:
                b = (v * gamma).reshape(n_kv, head_dim, hidden)[kv_of]
                stats[key] = _circuit_stats(a, b)
            rows += _head_rows(layer, form, kv_of, stats[key], OV_COLUMNS[4:])
    return pd.DataFrame(rows, columns=OV_COLUMNS)


def _gain_key(form: str, gamma: torch.Tensor) -> str:
    """Which circuit a form's gains give: gains all exactly one (a freshly initialised model) give
    the raw circuit bit for bit, so its statistics are computed once."""
    return "raw" if bool((gamma == 1).all()) else form


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
