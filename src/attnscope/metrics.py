"""Metrics of attention maps (thesis 7.2.1, 8.2, 8.3), one row per prompt × layer × head.

A *map* is one causal, row-stochastic matrix ``a[query, key]`` of n tokens: one query
head's attention probabilities or the head mean (the thesis's single-head simulation).
Every metric is a function of the map as stored (float16) and of the prompt's token
labels. Row averages run over rows i ≥ 1: row 0's only causal key is itself.

- ``row_entropy``: mean of H(a[i, :i+1]) / log(i+1), so 1 for uniform attention over
  the causal keys and 0 for one-hot rows.
- ``self_mass``, ``previous_mass``, ``sink_mass``: mean of a[i, i], a[i, i-1], a[i, 0].
- ``within_shot_mass``, ``across_shot_mass``: over the query tokens of shots 2..k (those
  with earlier shots to attend to; a shot's tokens are its "Word:" label, word, clue and
  "#"), the mean mass on keys of the query's own shot, and on keys of the other shots.
  The rest goes to the instruction, the chat template and the sink.
- ``clue_target_mass``: over the generated clue's tokens, the mean mass on the target
  word's tokens (NaN without a generated clue).
- ``cosine_pearson``, ``cosine_spearman``: correlation of a[i, j] with the cosine
  similarity of the input embeddings of tokens i and j over the strict causal triangle
  j < i (the diagonal, where the cosine is 1, is left out); Spearman with average ranks.
- ``cosine_pearson_words``, ``cosine_spearman_words``: the same under the thesis's choice
  (:mod:`attnscope.choices` ``words``): only the pairs whose query and key are both word or clue
  tokens (:data:`attnscope.store.WORD_SEGMENTS`), with the values the model gave them (not
  renormalised; a correlation is unchanged by one common scale, not by one scale per row).
- ``stable_rank``: ‖a‖²_F / σ₁², σ₁² by power iteration on aᵀa.
- ``effective_rank``: exp of the entropy of the singular values normalised to sum 1
  (Roy & Vetterli 2007); ``epsilon_rank``: the smallest r with ‖a − a_r‖_F ≤ ε‖a‖_F,
  as ``attnscope.theory.epsilon_rank``. Both need the full spectrum: the capture stores
  the singular values of every stored map (the head mean of every prompt, every head of the
  prompts that keep their heads; ``attnscope.promptgroup.singular_values``) and
  :func:`spectral_ranks` turns them into the ranks, so ε can change without a capture.

For the identity the stable and effective ranks are n and the ε-rank is ⌈n(1 − ε²)⌉ (every
singular value is 1); for b uniform diagonal blocks all three are b.

The capture computes the other metrics (the :data:`STREAMED` ones) for every map while it streams,
in torch on the maps' device: :mod:`attnscope.streamed`. :func:`as_float32` and :func:`xlogx`
(lookup tables of the 65 536 float16 bit patterns) serve :mod:`attnscope.choices`; this module
imports no torch, so the claims, the tables and the metrics table's readers run without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from attnscope.io import markdown_table
from attnscope.stats import cluster_mean_interval
from attnscope.store import (
    HEAD_MEAN,
    WEIGHTS,
    open_store,
    prompt_groups,
    weighted_array,
)
from attnscope.theory.rmt import epsilon_rank_of_spectrum as epsilon_rank

ROW_METRICS = (
    "row_entropy",
    "self_mass",
    "previous_mass",
    "sink_mass",
    "within_shot_mass",
    "across_shot_mass",
)
"""Where a map's rows put their mass: the first metrics of both the streamed metrics and the
analysis choices (:data:`attnscope.choices.CHOICE_METRICS`)."""
STREAMED = (
    *ROW_METRICS,
    "clue_target_mass",
    "cosine_pearson",
    "cosine_spearman",
    "cosine_pearson_words",
    "cosine_spearman_words",
    "stable_rank",
)
"""Metrics computed for every map during the capture."""
SPECTRAL = ("effective_rank", "epsilon_rank")
"""Metrics from the full spectrum, computed from the stored singular values."""
METRICS = STREAMED + SPECTRAL
"""The metric columns of the metrics table, in order."""


_CODES = np.arange(1 << 16, dtype=np.uint16)
_F16_VALUE = _CODES.view(np.float16).astype(np.float32)
with np.errstate(invalid="ignore", divide="ignore"):
    _F16_XLOGX = np.where(_F16_VALUE > 0, _F16_VALUE * np.log(_F16_VALUE), np.float32(0)).astype(np.float32)


def as_float32(a: np.ndarray) -> np.ndarray:
    """``a`` as float32 (float16 through a lookup table: exact and much faster than a cast)."""
    a = np.asarray(a)
    if a.dtype == np.float16:
        return np.take(_F16_VALUE, a.view(np.uint16))
    return a.astype(np.float32, copy=False)


def xlogx(a: np.ndarray) -> np.ndarray:
    """a·log a elementwise, 0 at 0 (float32 from a lookup table for float16, else float64)."""
    if a.dtype == np.float16:
        return np.take(_F16_XLOGX, a.view(np.uint16))
    a = a.astype(np.float64, copy=False)
    return a * np.log(np.where(a > 0, a, 1.0))


def check_causal_rows(windows: Mapping[int, int], n_tokens: int, prompt_id: str) -> None:
    """Refuse a prompt whose maps these metrics (and :mod:`attnscope.choices`) would misread: they
    take row i's visible keys to be all i + 1 causal keys (``row_entropy`` divides by log(i + 1),
    ``sink_mass`` reads key 0), which a sliding-window layer (``windows``: layer → W,
    :func:`attnscope.architecture.sliding_windows`) hides from a query more than W − 1 tokens on."""
    crossed = sorted(layer for layer, window in windows.items() if n_tokens > window)
    if crossed:
        raise ValueError(
            f"prompt {prompt_id}: {n_tokens} tokens, more than the sliding window of layers {crossed} "
            f"({windows[crossed[0]]} keys); the attention metrics assume every causal key is visible and "
            "do not implement sliding-window masks yet; shorten the prompts (a smaller k, "
            "attention.append_clue: false) or use a model without sliding windows"
        )


def effective_rank(sigma: np.ndarray) -> float:
    """exp(entropy of σ / Σσ) (Roy & Vetterli): n for n equal singular values, 1 for rank one."""
    total = sigma.sum()
    if total <= 0:
        return float("nan")
    p = sigma[sigma > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def spectral_ranks(sigma: np.ndarray, epsilon: float) -> np.ndarray:
    """The :data:`SPECTRAL` metrics of one map from its singular values (descending):
    effective rank and ε-rank; NaN for a map whose singular values were not computed (NaN)."""
    if np.isnan(sigma).any():
        return np.full(len(SPECTRAL), np.nan)
    return np.array([effective_rank(sigma), epsilon_rank(sigma, epsilon)])


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per layer, across prompts: the spread of every metric for the head-mean maps
    (``maps = head_mean``) and for the individual heads pooled (``maps = heads``)."""
    long = table.assign(maps=np.where(table["head"] == HEAD_MEAN, "head_mean", "heads")).melt(
        id_vars=["layer", "maps"], value_vars=list(METRICS), var_name="metric"
    )
    grouped = long.dropna(subset=["value"]).groupby(["maps", "layer", "metric"])["value"]
    summary = grouped.agg(
        n="count",
        mean="mean",
        std="std",
        min="min",
        q25=lambda v: v.quantile(0.25),
        median="median",
        q75=lambda v: v.quantile(0.75),
        max="max",
    ).reset_index()
    order = {name: i for i, name in enumerate(METRICS)}
    summary = summary.sort_values(
        ["maps", "layer", "metric"], key=lambda c: c.map(order) if c.name == "metric" else c
    )
    return summary.reset_index(drop=True)


def layer_intervals(rows: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """Per layer and metric of head-mean rows (prompts of one or more shot-seed replicates):
    the mean with its 95 % cluster-bootstrap interval, targets resampled (attnscope.stats)."""
    out = []
    for (layer, metric), values in rows.melt(id_vars=["layer", "target"], value_vars=list(names)).groupby(
        ["layer", "variable"], sort=True
    ):
        interval = cluster_mean_interval(values["value"].to_numpy(), values["target"].to_numpy())
        out.append((layer, metric, interval.estimate, interval.low, interval.high, interval.n))
    return pd.DataFrame(out, columns=["layer", "metric", "mean", "low", "high", "n"])


def summary_markdown(summary: pd.DataFrame, title: str) -> str:
    """The head-mean rows of :func:`summarize` as Markdown: layer × metric, mean ± std."""
    mean_maps = summary[summary["maps"] == "head_mean"]
    cells = mean_maps.assign(
        cell=[
            f"{m:.3g} ± {s:.2g}" if s == s else f"{m:.3g}"
            for m, s in zip(mean_maps["mean"], mean_maps["std"])
        ]
    )
    wide = cells.pivot(index="layer", columns="metric", values="cell")
    wide = wide[[m for m in METRICS if m in wide.columns]].reset_index()
    n_prompts = int(mean_maps["n"].max()) if len(mean_maps) else 0
    return (
        f"# {title}\n\nHead-mean maps, mean ± std over {n_prompts} prompts per layer "
        "(docs/attention.md defines the metrics).\n\n" + markdown_table(wide)
    )


def metrics_table(path: str | os.PathLike, epsilon: float = 0.1, weighting: str = WEIGHTS) -> pd.DataFrame:
    """An attention store's metrics, one row per prompt × layer × head (``head`` -1: the head mean).

    The streamed metrics are each group's ``metrics`` array; the spectral ranks come from its
    ``singular_values`` (NaN for the heads of the prompts that do not keep them). No map is read.
    ``weighting``: of the weights, or of the value-weighted maps (``value_metrics``; their
    spectral ranks are NaN: no singular values are stored for them).
    """
    root = open_store(path)
    num_heads, kv_head = root.attrs["num_heads"], root.attrs["kv_head"]
    frames = []
    for group in prompt_groups(root):
        streamed = group[weighted_array("metrics", weighting)][...]
        if weighting == WEIGHTS:
            spectral = np.apply_along_axis(spectral_ranks, 2, group["singular_values"][...], epsilon)
        else:
            spectral = np.full((*streamed.shape[:2], len(SPECTRAL)), np.nan)
        values = np.concatenate([streamed, spectral], axis=2)
        num_layers = streamed.shape[0]
        layers, maps = np.meshgrid(np.arange(num_layers), np.arange(num_heads + 1), indexing="ij")
        heads = np.where(maps == num_heads, HEAD_MEAN, maps).ravel()
        frame = pd.DataFrame(values.reshape(-1, values.shape[2]), columns=list(METRICS))
        frame.insert(0, "prompt_index", group.attrs["prompt_index"])
        frame.insert(1, "prompt_id", group.attrs["prompt_id"])
        frame.insert(2, "target", group.attrs["target"])
        frame.insert(3, "layer", layers.ravel())
        frame.insert(4, "head", heads)
        frame.insert(5, "kv_head", [kv_head[h] if h >= 0 else -1 for h in heads])
        frame.insert(6, "n_tokens", group.attrs["n_tokens"])
        frame.insert(7, "keep_heads", group.attrs["keep_heads"])
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
