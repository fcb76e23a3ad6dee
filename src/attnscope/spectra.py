"""Weight spectra and the base alignment Tr(W_qᵀW_k) of a model's matrices (the learned-vs-random
comparison of their tables is :mod:`attnscope.comparison`).

Eigenvalue convention (WeightWatcher's, ``normalize=False``, its default): for a weight
matrix W with N ≥ M (N the larger side) the eigenvalues are those of the M × M matrix
WᵀW (or WWᵀ), i.e. the squared singular values σᵢ², *not* divided by N. WeightWatcher's
random-matrix theory writes the Marchenko–Pastur law for X = WᵀW / N, whose bulk edge
for i.i.d. N(0, s²) entries is s²(1 + 1/√Q)² with Q = N/M; in our (unnormalised) units
the edge is therefore ``lambda_plus = s²·N·(1 + 1/√Q)² = s²(√N + √M)²``, and spikes are
the σᵢ² above it.

Decomposition routes (:data:`METHODS`): ``gram64`` forms the float64 Gram matrix of the
smaller side and takes its eigenvalues (symmetric solver) — the fastest route on a CPU
and accurate to ~1e-16·λ_max absolutely; ``svd32`` / ``svd64`` are batched
``torch.linalg.svdvals``. Same-shaped matrices (one matrix type over all layers) are
decomposed together: one batched call per chunk on a GPU; on a CPU a thread pool keeps
every core busy with one single-threaded decomposition each.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from threadpoolctl import threadpool_limits
from torch import nn

from attnscope.architecture import READS_NORM, attention_shape, decoder_layers, kv_head_index, require
from attnscope.circuits import centres, fold, norm_scale
from attnscope.matrices import EMBEDDING_TYPES, MATRIX_FORMS, MATRIX_TYPES
from attnscope.models import torch_threads
from attnscope.shape import SHAPE_COLUMNS, shape_metrics
from attnscope.theory.rmt import gram, marchenko_pastur_edges

METHODS = ("auto", "gram64", "svd32", "svd64")
TOP_K = 10

SPECTRA_COLUMNS = [
    "layer",
    "matrix",
    "form",
    "rows",
    "cols",
    "N",
    "M",
    "Q",
    "init_std",
    "sum_sigma2",
    "sum_sigma2_init",
    "sigma2_mean",
    "sigma2_var",
    "lambda_max",
    "sv_max",
    "top10_sigma2",
    "lambda_plus",
    "num_spikes_init",
    "stable_rank",
    "log_norm",
    "log_spectral_norm",
    *SHAPE_COLUMNS,
]


@dataclass(frozen=True)
class WeightGroup:
    """Same-shaped weight matrices of one type: ``weights[i]`` belongs to ``layers[i]``. A
    ``folded`` group's matrices are ``weights[i]·diag(scales[i])``, centred where its norm is a
    LayerNorm (``centred``; :func:`attnscope.circuits.fold`), folded when decomposed, so no folded
    copy of the model is held."""

    matrix: str
    layers: tuple[int, ...]
    weights: tuple[torch.Tensor, ...]
    scales: tuple[torch.Tensor, ...] | None = None
    centred: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self.weights[0].shape
        return int(rows), int(cols)

    @property
    def form(self) -> str:
        return "raw" if self.scales is None else "folded"

    @property
    def unit_scales(self) -> bool:
        """Whether the group is folded with every gain exactly one (a freshly initialised model): its
        matrices are then its raw ones bit for bit, and so are their shuffled copies (same seeds)."""
        return (
            self.scales is not None
            and not self.centred
            and all(bool((scale == 1).all()) for scale in self.scales)
        )

    @property
    def key(self) -> str:
        """The name of its σ² array: the matrix type, ``{matrix}_folded`` for a folded group."""
        return self.matrix if self.scales is None else f"{self.matrix}_folded"

    def matrix_at(
        self, i: int, device: torch.device | None = None, shuffle_seed: int | None = None
    ) -> torch.Tensor:
        """Its i-th matrix in float64 on ``device`` (default: where it is), folded if the group is;
        with ``shuffle_seed``, its entries permuted (:func:`shuffle_entries`)."""
        weight = self.weights[i].to(device=device or self.weights[i].device, dtype=torch.float64)
        if self.scales is not None:
            weight = fold(weight, self.scales[i], self.centred)
        if shuffle_seed is None:
            return weight
        return shuffle_entries(weight, entry_seed(shuffle_seed, self.matrix, self.layers[i]))


def entry_seed(seed: int, matrix: str, layer: int) -> int:
    """The permutation seed of one matrix: independent of the order matrices are decomposed in,
    and shared by a matrix's raw and folded forms."""
    return int(np.random.SeedSequence([seed, zlib.crc32(matrix.encode()), layer + 1]).generate_state(1)[0])


def shuffle_entries(w: torch.Tensor, seed: int) -> torch.Tensor:
    """``w`` with its entries permuted by a generator seeded with ``seed``: WeightWatcher's
    randomisation test's input (the spectrum a matrix with these entries and no structure would
    have). On the CPU with NumPy's generator, which releases the GIL so the decomposition
    threads shuffle in parallel (``torch.randperm`` does not); elsewhere with torch's on the device."""
    if w.device.type == "cpu":
        return torch.from_numpy(np.random.default_rng(seed).permutation(w.numpy().ravel()).reshape(w.shape))
    gen = torch.Generator(device=w.device).manual_seed(seed)
    flat = w.reshape(-1)
    return flat[torch.randperm(flat.numel(), generator=gen, device=w.device)].reshape(w.shape)


# --- collecting the matrices -------------------------------------------------------------


def weight_groups(
    model: nn.Module, include_embeddings: bool = False, folded: bool = False
) -> list[WeightGroup]:
    """Every attention and MLP weight per layer, grouped by matrix type (detached, as stored).

    The matrices are the family's (:meth:`attnscope.architecture.Family.parameter`: a fused projection's
    slices, [out, in]; no gate where the MLP has none). With ``folded`` the matrices of
    :data:`attnscope.architecture.READS_NORM` follow again in folded form (those that read no norm,
    OLMo 2's, with unit gains: their raw ones). With ``include_embeddings`` the input embedding comes first
    as layer -1 and an untied LM head last as layer ``num_layers``; a tied head is the
    embedding and is counted once.
    """
    decoder = require(model.config, "folded spectra" if folded else "spectra")
    layers = decoder_layers(model)
    indices = tuple(range(len(layers)))
    groups = []
    for matrix in decoder.matrices:
        weights = tuple(decoder.parameter(layer, matrix, model.config).detach() for layer in layers)
        groups.append(WeightGroup(matrix, indices, weights))
    if folded:
        for group in [g for g in groups if g.matrix in READS_NORM]:
            scales = tuple(norm_scale(decoder, layer, group.matrix) for layer in layers)
            centred = centres(decoder, group.matrix)
            groups.append(WeightGroup(group.matrix, indices, group.weights, scales, centred))
    if include_embeddings:
        embed = model.get_input_embeddings().weight.detach()
        groups.insert(0, WeightGroup("embed", (-1,), (embed,)))
        head = model.get_output_embeddings()
        if head is not None and head.weight.data_ptr() != embed.data_ptr():
            groups.append(WeightGroup("lm_head", (len(layers),), (head.weight.detach(),)))
    return groups


# --- decompositions ----------------------------------------------------------------------


def _sigma2_torch(batch: torch.Tensor, method: str) -> torch.Tensor:
    """σ² (ascending) of a [B, rows, cols] batch with torch, on the batch's device."""
    if method == "gram64":
        return torch.linalg.eigvalsh(gram(batch.to(torch.float64))).clamp_min_(0.0)
    dtype = torch.float32 if method == "svd32" else torch.float64
    return torch.linalg.svdvals(batch.to(dtype)).to(torch.float64).square().flip(-1)


def _sigma2_numpy(weight: torch.Tensor) -> np.ndarray:
    """σ² (ascending) of one float64 CPU matrix: its Gram + ``numpy.linalg.eigvalsh``.

    NumPy's BLAS/LAPACK (OpenBLAS) is faster than torch's MKL here on AMD CPUs, and
    ``numpy.linalg`` releases the GIL (SciPy's LAPACK wrappers do not), so worker
    threads run in parallel.
    """
    return np.clip(np.linalg.eigvalsh(gram(weight.numpy())), 0.0, None)


def resolve_method(method: str) -> str:
    """``auto`` → ``gram64``, the fastest route at the accuracy bar (docs/spectra.md)."""
    if method not in METHODS:
        raise ValueError(f"spectra.method: {method!r} is not one of {', '.join(METHODS)}")
    return "gram64" if method == "auto" else method


def available_cores() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def sigma2_groups(
    groups: Sequence[WeightGroup],
    method: str = "auto",
    device: str | torch.device | None = None,
    threads: int | None = None,
    batched: bool | None = None,
    max_batch_mb: float = 512.0,
    shuffle_seed: int | None = None,
) -> dict[str, np.ndarray]:
    """Squared singular values of every matrix: ``{group key: [len(layers), M]}`` float64, descending;
    with ``shuffle_seed``, those of the entry-shuffled matrices (each shuffled where it is decomposed,
    so no shuffled copy of the model is held).

    ``device`` None means where the weights are. ``batched`` (default: on CUDA) decomposes
    each group with one torch call per chunk of at most ``max_batch_mb`` float64 bytes on
    ``device``; otherwise (default on CPU) ``threads`` workers (default: all cores) each run
    one single-threaded decomposition on the CPU, largest first — for matrices this small
    that beats one multi-threaded call at a time. The CPU ``gram64`` route uses NumPy.
    """
    if not groups:
        return {}
    target = torch.device(device) if device is not None else groups[0].weights[0].device
    method = resolve_method(method)
    threads = threads or available_cores()
    same = _same_as_raw(groups)
    todo = [g for g in groups if g.key not in same]
    if target.type != "cpu" if batched is None else batched:
        with torch_threads(threads):
            out = {g.key: _sigma2_batched(g, method, target, max_batch_mb, shuffle_seed) for g in todo}
    else:
        out = _sigma2_pool(todo, method, threads, shuffle_seed)
    return {g.key: out[same[g.key]].copy() if g.key in same else out[g.key] for g in groups}


def _same_as_raw(groups: Sequence[WeightGroup]) -> dict[str, str]:
    """``{folded key: raw key}`` for each folded group with unit gains whose raw group (the same
    weight tensors) is among ``groups``: its σ² are that group's, so it is not decomposed again."""
    raw = {g.matrix: g for g in groups if g.scales is None}
    return {
        g.key: raw[g.matrix].key
        for g in groups
        if g.unit_scales
        and g.matrix in raw
        and g.layers == raw[g.matrix].layers
        and all(a is b for a, b in zip(g.weights, raw[g.matrix].weights, strict=True))
    }


def _sigma2_batched(
    group: WeightGroup, method: str, device: torch.device, max_batch_mb: float, shuffle_seed: int | None
) -> np.ndarray:
    rows, cols = group.shape
    per_chunk = max(1, int(max_batch_mb * 2**20 // (rows * cols * 8)))
    parts = []
    for start in range(0, len(group.weights), per_chunk):
        chunk = range(start, min(start + per_chunk, len(group.weights)))
        batch = torch.stack([group.matrix_at(i, device, shuffle_seed) for i in chunk])
        parts.append(_sigma2_torch(batch, method).flip(-1).cpu())
    return torch.cat(parts).numpy()


def _sigma2_pool(
    groups: Sequence[WeightGroup], method: str, threads: int, shuffle_seed: int | None
) -> dict[str, np.ndarray]:
    tasks = [(g, i) for g in groups for i in range(len(g.weights))]
    tasks.sort(key=lambda t: -t[0].weights[t[1]].numel() * min(t[0].shape))

    def one(task: tuple[WeightGroup, int]) -> np.ndarray:
        weight = task[0].matrix_at(task[1], torch.device("cpu"), shuffle_seed)
        return _sigma2_numpy(weight) if method == "gram64" else _sigma2_torch(weight[None], method)[0].numpy()

    with threadpool_limits(1), torch_threads(1), ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(one, tasks))
    out = {g.key: np.empty((len(g.weights), min(g.shape))) for g in groups}
    for (group, i), evals in zip(tasks, results, strict=True):
        out[group.key][i] = evals[::-1]
    return out


# --- per-matrix statistics ---------------------------------------------------------------


def mp_edge(n: int, m: int, init_std: float) -> float:
    """Marchenko–Pastur bulk edge λ₊ of σ² (unnormalised) for an i.i.d. N(0, init_std²) n × m matrix.

    λ₊ = s²·N·(1 + √q)² with N = max(n, m), q = min(n, m) / N (= 1/Q): the edge of
    X = WᵀW / N (WeightWatcher's normalised units, :func:`marchenko_pastur_edges`), times N.
    """
    big, small = max(n, m), min(n, m)
    return marchenko_pastur_edges(small / big, init_std**2 * big)[1]


def spectrum_stats(
    sigma2: np.ndarray, rows: int, cols: int, init_std: float, rand_sigma2: np.ndarray | None
) -> dict[str, Any]:
    """The spectra table's columns for one matrix from its σ² (any order) and its shuffled copy's
    (None: no randomisation test, its columns NaN)."""
    lam = np.sort(np.asarray(sigma2, dtype=np.float64))[::-1]
    big, small = max(rows, cols), min(rows, cols)
    total = float(lam.sum())
    lambda_max = float(lam[0])
    edge = mp_edge(rows, cols, init_std)
    return {
        "rows": rows,
        "cols": cols,
        "N": big,
        "M": small,
        "Q": big / small,
        "init_std": init_std,
        "sum_sigma2": total,
        "sum_sigma2_init": big * small * init_std**2,
        "sigma2_mean": float(lam.mean()),
        "sigma2_var": float(lam.var()),
        "lambda_max": lambda_max,
        "sv_max": math.sqrt(lambda_max),
        "top10_sigma2": lam[:TOP_K].tolist(),
        "lambda_plus": edge,
        "num_spikes_init": int((lam > edge).sum()),
        "stable_rank": total / lambda_max,
        "log_norm": math.log10(total),
        "log_spectral_norm": math.log10(lambda_max),
        **shape_metrics(lam, rows, cols, rand_sigma2),
    }


def spectra_table(
    sigma2: Mapping[str, np.ndarray],
    groups: Sequence[WeightGroup],
    init_std: float,
    rand_sigma2: Mapping[str, np.ndarray] | None,
) -> pd.DataFrame:
    """One row per layer × matrix × form (:data:`SPECTRA_COLUMNS`): the raw rows, then the folded
    ones, each ordered by layer, then forward order. A matrix whose σ² and shuffled σ² repeat
    another's bit for bit (a folded matrix with unit gains) reuses that matrix's statistics."""
    rows = []
    done: dict[tuple[Any, ...], dict[str, Any]] = {}
    for group in groups:
        n_rows, n_cols = group.shape
        for i, layer in enumerate(group.layers):
            lam = np.asarray(sigma2[group.key][i])
            rand = None if rand_sigma2 is None else np.asarray(rand_sigma2[group.key][i])
            key = (n_rows, n_cols, _content(lam), None if rand is None else _content(rand))
            if key not in done:
                done[key] = spectrum_stats(lam, n_rows, n_cols, init_std, rand)
            rows.append({"layer": layer, "matrix": group.matrix, "form": group.form, **done[key]})
    order = {m: i for i, m in enumerate((EMBEDDING_TYPES[0], *MATRIX_TYPES, EMBEDDING_TYPES[1]))}
    order |= {form: i for i, form in enumerate(MATRIX_FORMS)}
    df = pd.DataFrame(rows, columns=SPECTRA_COLUMNS)
    df = df.sort_values(
        ["form", "layer", "matrix"], key=lambda c: c if c.name == "layer" else c.map(order), kind="stable"
    )
    return df.reset_index(drop=True)


def _content(a: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
    return a.dtype.str, a.shape, a.tobytes()


@dataclass
class Spectra:
    """Squared singular values per matrix type and the per-matrix table."""

    sigma2: dict[str, np.ndarray]
    layers: dict[str, tuple[int, ...]]
    shapes: dict[str, tuple[int, int]]
    table: pd.DataFrame


def compute_spectra(
    model: nn.Module,
    init_std: float,
    include_embeddings: bool = False,
    method: str = "auto",
    device: str | torch.device | None = None,
    threads: int | None = None,
    max_batch_mb: float = 512.0,
    folded: bool = True,
    randomize: bool = True,
    seed: int = 0,
) -> Spectra:
    """All weight spectra of ``model``, raw and (``folded``) norm-folded (see
    :func:`sigma2_groups` for the routes); with ``randomize``, also the spectra of the
    entry-shuffled matrices (permutations seeded from ``seed``) for the randomisation columns."""
    groups = weight_groups(model, include_embeddings, folded)
    options = {"method": method, "device": device, "threads": threads, "max_batch_mb": max_batch_mb}
    sigma2 = sigma2_groups(groups, **options)
    rand = sigma2_groups(groups, **options, shuffle_seed=seed) if randomize else None
    return Spectra(
        sigma2=sigma2,
        layers={g.key: g.layers for g in groups},
        shapes={g.key: g.shape for g in groups},
        table=spectra_table(sigma2, groups, init_std, rand),
    )


# --- base alignment Tr(W_qᵀ W_k) ---------------------------------------------------------

ALIGNMENT_COLUMNS = [
    "layer",
    "scope",
    "head",
    "kv_head",
    "n_terms",
    "trace",
    "trace_std_init",
    "z_score",
    "cosine",
    "frobenius_norm",
    "frobenius_norm_init",
]


def base_alignment(model: nn.Module, init_std: float) -> pd.DataFrame:
    """Tr(W_q,hᵀ W_k,g(h)) per query head h and Tr(W_qᵀ W̃_k) per layer, with z-scores.

    W_q,h are head h's ``head_dim`` rows of ``q_proj.weight`` (head_dim × hidden), W_k,g its
    KV head's rows of ``k_proj.weight``; W̃_k stacks W_k,g(h) for all h (``repeat_kv``), so the
    layer trace is the sum of the head traces. For i.i.d. N(0, s²) entries the trace of a
    sum of n products has mean 0 and variance n·s⁴ (thesis 6.17: n×n matrices, n²s⁴), and
    E‖AᵀB‖_F² = hidden²·rows·s⁴ for A, B of shape rows × hidden. ``cosine`` is the trace
    over ‖A‖_F‖B‖_F (scale-free; ≈ N(0, 1/n) at random init). Rows with ``scope='layer'``
    have ``head = kv_head = -1``.
    """
    n_heads, n_kv, head_dim = attention_shape(model.config)
    kv_of = kv_head_index(n_heads, n_kv)
    decoder = require(model.config, "spectra")
    s2 = init_std**2
    rows = []
    for layer, block in enumerate(decoder_layers(model)):
        wq = decoder.parameter(block, "q", model.config).detach().to(torch.float64)
        wk = decoder.parameter(block, "k", model.config).detach().to(torch.float64)
        hidden = wq.shape[1]
        q = wq.reshape(n_heads, head_dim, hidden)
        k = wk.reshape(n_kv, head_dim, hidden)[kv_of.to(wk.device)]
        traces = (q * k).sum(dim=(1, 2))
        frob = ((q @ q.mT) * (k @ k.mT)).sum(dim=(1, 2)).sqrt()
        cosine = traces / (q.flatten(1).norm(dim=1) * k.flatten(1).norm(dim=1))
        k_full = k.reshape(n_heads * head_dim, hidden)
        layer_trace = traces.sum()
        layer_frob = (wq.mT @ k_full).norm()
        layer_cos = layer_trace / (wq.norm() * k_full.norm())
        per_head = zip(
            range(n_heads), kv_of.tolist(), traces.tolist(), frob.tolist(), cosine.tolist(), strict=True
        )
        entries = [("head", h, g, head_dim, t, f, c) for h, g, t, f, c in per_head]
        entries.append(
            ("layer", -1, -1, n_heads * head_dim, layer_trace.item(), layer_frob.item(), layer_cos.item())
        )
        for scope, head, kv, n_rows, trace, frobenius, cos in entries:
            n_terms = n_rows * hidden
            std = math.sqrt(n_terms) * s2
            rows.append(
                {
                    "layer": layer,
                    "scope": scope,
                    "head": head,
                    "kv_head": kv,
                    "n_terms": n_terms,
                    "trace": trace,
                    "trace_std_init": std,
                    "z_score": trace / std,
                    "cosine": cos,
                    "frobenius_norm": frobenius,
                    "frobenius_norm_init": hidden * math.sqrt(n_rows) * s2,
                }
            )
    return pd.DataFrame(rows, columns=ALIGNMENT_COLUMNS)
