"""One table per head: a layer × head's weights (QK and OV circuits), its behaviour on the reference
experiment's prompts and its head-type scores, and the rank correlations between the two sides.

The weight side is the folded form of both circuits (:mod:`attnscope.circuits`: W·diag(γ) of the
norm q, k, v read, the matrices the residual stream sees): the QK circuit's σ_max, stable rank and
trace, the OV circuit's Frobenius norm and σ_max. The behaviour side is the mean over the prompts
of the metrics table's per-head rows (:mod:`attnscope.metrics`; every prompt has them), of the
weights and of the value-weighted maps (``value_*``: the share of what the head writes that each
key gives), and the head-type scores (:mod:`attnscope.headtypes`, on their own probe). A
correlation is Spearman's ρ over the heads with a bootstrap interval that resamples heads
(``scipy.stats.bootstrap``, BCa, percentile where BCa is degenerate): the heads are the sample,
the prompts only average.

No torch here: the tables come from their jobs' files (the OV norms from
:func:`attnscope.circuits.ov_circuits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from attnscope.headtypes import SCORES, head_types
from attnscope.stats import CONFIDENCE, N_RESAMPLES, paired_bootstrap

FORM = "folded"
"""The circuits' form the table takes (:data:`attnscope.matrices.MATRIX_FORMS`)."""
QK_STATS = {"sigma_max": "qk_sigma_max", "stable_rank": "qk_stable_rank", "trace": "qk_trace"}
OV_STATS = {"frobenius_norm": "ov_frobenius_norm", "sigma_max": "ov_sigma_max"}
WEIGHT_COLUMNS = (*QK_STATS.values(), *OV_STATS.values())
"""The weight-side columns of the head table."""
BEHAVIOUR_METRICS = ("row_entropy", "self_mass", "previous_mass", "sink_mass", "within_shot_mass")
"""The metrics of :mod:`attnscope.metrics` averaged over the prompts, per head."""
VALUE_METRICS = tuple(f"value_{name}" for name in BEHAVIOUR_METRICS)
"""The same of the head's value-weighted maps (what it writes, not only where it looks)."""
BEHAVIOUR_COLUMNS = (*BEHAVIOUR_METRICS, *VALUE_METRICS, *SCORES)
"""The behaviour-side columns: the prompt means of the weights and of the value-weighted maps, then
the head-type scores."""
COLUMNS = (
    "layer",
    "head",
    "kv_head",
    *WEIGHT_COLUMNS,
    *BEHAVIOUR_METRICS,
    *VALUE_METRICS,
    "n_prompts",
    *SCORES,
    "head_type",
)
CORRELATION_COLUMNS = ("scope", "weight", "behaviour", "rho", "low", "high", "n_heads")
SCOPES = ("heads", "within_layer")
"""What a correlation ranks: every head by its value (``heads``), or every head by its value's
percentile rank among the heads of its layer (``within_layer``: depth, which drives both sides
of many pairs, taken out)."""
BOOTSTRAP_SEED = 0
"""Seeds the bootstrap of the workflow's correlations."""
RANK_BLOCK = 2**16
"""Resampled pairs ranked at once by a correlation's bootstrap statistic."""


def prompt_means(metrics: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Per layer × head (head ≥ 0; −1 is the head mean), the mean of :data:`BEHAVIOUR_METRICS` over
    the prompts of the metrics tables ``metrics`` (pooled) and ``n_prompts``."""
    rows = pd.concat([m[m["head"] >= 0] for m in metrics], ignore_index=True)
    rows = rows.assign(prompt=rows["prompt_id"].astype(str))
    grouped = rows.groupby(["layer", "head"], sort=True)
    out = grouped[list(BEHAVIOUR_METRICS)].mean()
    out["n_prompts"] = grouped["prompt"].nunique()
    return out.reset_index()


def _circuit(table: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    chosen = table[table["form"] == FORM]
    return chosen[["layer", "head", "kv_head", *names]].rename(columns=names)


def head_table(
    qk: pd.DataFrame,
    ov: pd.DataFrame,
    types: pd.DataFrame,
    metrics: Sequence[pd.DataFrame],
    value_metrics: Sequence[pd.DataFrame],
    threshold: float,
) -> pd.DataFrame:
    """One row per layer × head (:data:`COLUMNS`) from the QK-circuits table, the OV-circuits
    table (:func:`attnscope.circuits.ov_circuits`), the head-types table (its scores, typed here at
    ``threshold``: :func:`attnscope.headtypes.head_types`) and the metrics tables of the reference
    prompts, of the weights and of the value-weighted maps; refuses sources that do not cover the
    same heads."""
    keys = ["layer", "head", "kv_head"]
    values = prompt_means(value_metrics).drop(columns=["n_prompts"])
    values = values.rename(columns=dict(zip(BEHAVIOUR_METRICS, VALUE_METRICS)))
    table = _circuit(qk, QK_STATS).merge(_circuit(ov, OV_STATS), on=keys, how="outer", validate="1:1")
    table = table.merge(types[[*keys, *SCORES]], on=keys, how="outer", validate="1:1")
    table["head_type"] = head_types(table, threshold)
    table = table.merge(prompt_means(metrics), on=["layer", "head"], how="outer", validate="1:1")
    table = table.merge(values, on=["layer", "head"], how="outer", validate="1:1")
    expected = qk[qk["form"] == FORM][["layer", "head"]].drop_duplicates()
    missing = table[list(COLUMNS)].drop(columns=["n_prompts"]).isna().any(axis=1)
    if len(table) != len(expected) or missing.any():
        bad = table.loc[missing, ["layer", "head"]].head(5).to_dict("records")
        raise ValueError(
            f"head table: {len(table)} heads joined, the QK circuits have {len(expected)}; heads missing "
            f"from a source (circuits, head types or metrics), e.g. {bad}"
        )
    return table[list(COLUMNS)].sort_values(["layer", "head"], ignore_index=True)


def average_ranks(codes: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The average ranks (``scipy.stats.rankdata``'s) along the last axis of ``values[indices]``,
    where ``codes`` are the values' dense tie-group codes (``np.unique(values, return_inverse=True)``).

    Counts each resample's group sizes instead of sorting it (rankdata's sort of every resample
    was the correlations' cost). A group's average rank is the count of values below it plus (its
    size + 1) / 2: a multiple of one half, exact in float64, so rankdata's bits.
    """
    n_groups = int(codes.max()) + 1
    flat = codes[indices].reshape(-1, indices.shape[-1])
    rows = len(flat)
    flat += np.arange(0, rows * n_groups, n_groups)[:, None]  # each resample's groups apart
    sizes = np.bincount(flat.ravel(), minlength=rows * n_groups).reshape(rows, n_groups)
    twice = 2 * np.cumsum(sizes, axis=1) - sizes + 1  # twice each group's average rank
    return twice.ravel().take(flat).reshape(indices.shape) / 2


def _pearson(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    """Pearson's r along the last axis (of average ranks: Spearman's ρ)."""
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(axis=-1) / np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))


def _resampled_spearman(x: np.ndarray, y: np.ndarray) -> Callable[..., np.ndarray]:
    """Spearman's ρ of the pairs ``(x[i], y[i])`` as a function of observation indices ``i``
    [..., pair], vectorised over the leading axes: the statistic of a bootstrap of the indices
    (``axis``, scipy's, is always the last)."""
    codes = [np.unique(v, return_inverse=True)[1].reshape(-1) for v in (x, y)]

    def statistic(indices: np.ndarray, axis: int = -1) -> np.ndarray:
        rows = indices.reshape(-1, indices.shape[-1])
        rho = np.empty(len(rows))
        # a block of rows at a time: a whole batch's temporaries are page-faulted in afresh on
        # every call, a block's are reused
        step = max(1, RANK_BLOCK // rows.shape[1])
        for start in range(0, len(rows), step):
            block = rows[start : start + step]
            rho[start : start + step] = _pearson(
                average_ranks(codes[0], block), average_ranks(codes[1], block)
            )
        return rho.reshape(indices.shape[:-1])[()]

    return statistic


def rank_correlation(
    x: np.ndarray,
    y: np.ndarray,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Spearman's ρ of ``x`` and ``y`` (pairs with a NaN dropped) and its bootstrap interval over
    the pairs: (ρ, low, high); NaN where either side is constant.

    The bootstrap resamples the pairs' indices (what ``scipy.stats.bootstrap`` does with paired
    samples, so the same resamples and jackknife) and ranks each resample by counting
    (:func:`average_ranks`)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) <= 2:
        return math.nan, math.nan, math.nan
    statistic = _resampled_spearman(x, y)
    indices = np.arange(len(x))
    rho = float(statistic(indices))
    if not np.isfinite(rho):
        return math.nan, math.nan, math.nan
    low, high = paired_bootstrap((indices,), statistic, confidence, n_resamples, seed)
    return rho, low, high


def weight_behaviour_correlations(
    table: pd.DataFrame,
    weights: Sequence[str] = WEIGHT_COLUMNS,
    behaviours: Sequence[str] = BEHAVIOUR_COLUMNS,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per scope (:data:`SCOPES`) × weight × behaviour column of a head table
    (:data:`CORRELATION_COLUMNS`): Spearman's ρ over the heads and its bootstrap interval
    (:func:`rank_correlation`)."""
    columns = [*weights, *behaviours]
    within = table.groupby("layer")[columns].rank(pct=True)
    rows = []
    for scope, values in zip(SCOPES, (table[columns], within)):
        for weight in weights:
            for behaviour in behaviours:
                x, y = values[weight], values[behaviour]
                rho, low, high = rank_correlation(x, y, confidence, n_resamples, seed)
                rows.append((scope, weight, behaviour, rho, low, high, len(table)))
    return pd.DataFrame(rows, columns=list(CORRELATION_COLUMNS))
