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

The capture computes the other metrics for every map while it streams, so they must be
cheap: float16 maps are read through lookup tables over their 65 536 bit patterns
(value and x·log x), and ranks of float16 values come from a histogram of those patterns.
Each metric takes a batch of maps [map, query, key] (the capture's: a layer's heads and head
mean) and gives one value per map, with one numpy call per step for the whole batch, and every
map's value is bit for bit the one it gets in a batch of its own: sums run over the last axis of
C-contiguous arrays (each row its own pairwise sum: ``np.take``, not fancy indexing, which can
return other layouts), and the dot and matrix-vector products are BLAS's of each map on its own
(numpy's matmul loops over the batch).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from attnscope.io import markdown_table
from attnscope.stats import cluster_mean_interval
from attnscope.store import (
    GENERATED,
    HEAD_MEAN,
    TARGET,
    WEIGHTS,
    WORD_SEGMENTS,
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

BATCH_BYTES = 4 << 20
"""Largest batch of maps, in float32, that :func:`streamed_metrics` measures at once (a layer of
SmolLM2's 9 heads and head mean up to n = 323): its temporaries are a few float32 and int64
copies of the batch, bounded so for long prompts."""
POWER_ITERATIONS = 1000
POWER_TOLERANCE = 1e-6
"""Power iteration stops when σ₁² changes by less than this (relative): about 6 steps on
SmolLM2's maps, stable ranks within 1e-5 of the SVD's."""

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


def row_entropy(maps: np.ndarray) -> np.ndarray:
    """Per map [map, query, key]: the mean over rows i ≥ 1 of the row's entropy divided by log(i + 1)."""
    maps = np.asarray(maps)
    if maps.shape[-1] < 2:
        return np.full(len(maps), np.nan)
    entropy = -xlogx(maps[:, 1:]).sum(axis=2, dtype=np.float64)
    return np.mean(entropy / np.log(np.arange(2, maps.shape[-1] + 1)), axis=1)


def _row_mean(values: np.ndarray) -> np.ndarray:
    """Per map, the mean of its values [map, row i ≥ 1] in float64 (NaN without rows)."""
    if not values.shape[1]:
        return np.full(len(values), np.nan)
    return np.mean(as_float32(values), axis=1, dtype=np.float64)


def self_mass(maps: np.ndarray) -> np.ndarray:
    """Per map: the mean attention of rows i ≥ 1 on their own token."""
    return _row_mean(np.diagonal(maps, axis1=1, axis2=2)[:, 1:])


def previous_mass(maps: np.ndarray) -> np.ndarray:
    """Per map: the mean attention of rows i ≥ 1 on the token before."""
    return _row_mean(np.diagonal(maps, -1, axis1=1, axis2=2))


def sink_mass(maps: np.ndarray) -> np.ndarray:
    """Per map: the mean attention of rows i ≥ 1 on the first token (the attention sink)."""
    return _row_mean(maps[:, 1:, 0])


def shot_masses(maps: np.ndarray, token_shot: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per map, (within, across): the mean mass of the queries in shots ≥ 2 on their own shot's
    keys and on the other shots' keys."""
    shot = np.asarray(token_shot)
    queries = np.flatnonzero(shot >= 2)
    if not len(queries):
        return np.full(len(maps), np.nan), np.full(len(maps), np.nan)
    one_hot = (shot[:, None] == np.arange(shot.max() + 1)).astype(np.float32)
    mass = (as_float32(np.take(maps, queries, axis=1)) @ one_hot).astype(np.float64)  # [map, query, shot]
    within = np.take_along_axis(mass, shot[queries][None, :, None], axis=2)[:, :, 0]
    across = mass[:, :, 1:].sum(axis=2) - within
    return within.mean(axis=1), across.mean(axis=1)


def block_mass(maps: np.ndarray, queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Per map: the mean over ``queries`` of their total attention on ``keys`` (NaN if either is
    empty)."""
    if not len(queries) or not len(keys):
        return np.full(len(maps), np.nan)
    block = as_float32(np.take(np.take(maps, queries, axis=1), keys, axis=2))  # [map, query, key]
    return block.sum(axis=2, dtype=np.float64).mean(axis=1)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of each row of ``values`` [row, value] with ties averaged (as
    ``scipy.stats.rankdata``, whose exact values they are); for non-negative float16 from a
    histogram of the bit patterns of all rows at once (O(n), no sort)."""
    values = np.asarray(values)
    codes = values.view(np.uint16) if values.dtype == np.float16 else None
    if codes is None or (codes >= 0x7C00).any():  # negatives, infinities, NaNs: codes do not sort like values
        return rankdata(values, axis=1)
    bins = int(codes.max()) + 1  # up to 0x3C00 (1.0) for probabilities
    row_codes = codes + np.arange(0, len(codes) * bins, bins)[:, None]  # each row its own bins
    counts = np.bincount(row_codes.ravel(), minlength=len(codes) * bins)
    below = np.cumsum(counts.reshape(len(codes), bins), axis=1).ravel() - counts
    return np.take(below + (counts + 1) / 2.0, row_codes)


def row_dots(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The dot product of each row of ``x`` [row, value] with the same row of ``y`` (or with ``y``
    [value]): numpy's ``x[i] @ y[i]`` (BLAS's dot, one call per row), as a matmul of rows by columns."""
    return (x[:, None, :] @ y[..., None])[:, 0, 0]


def _unit_centered(values: np.ndarray) -> np.ndarray | None:
    centered = np.asarray(values, dtype=np.float64) - np.mean(values, dtype=np.float64)
    norm = np.linalg.norm(centered)
    return centered / norm if norm > 0 else None


def correlation(x: np.ndarray, y_unit: np.ndarray | None) -> np.ndarray:
    """Pearson correlation of each row of ``x`` [row, value] with a reference given as its
    centred, unit-norm vector (NaN for a row without spread), each row's value as the row on its
    own gives it (:func:`row_dots`; the square of its sum is Python's, as ``float ** 2``)."""
    x = np.ascontiguousarray(x, dtype=np.float64)  # a row's sum over the last axis: its own pairwise sum
    if y_unit is None:
        return np.full(len(x), np.nan)
    squares = row_dots(x, x)
    sums = np.array([total**2 for total in x.sum(axis=1).tolist()])
    spread = squares - sums / x.shape[1]  # ‖x − x̄‖²
    flat = spread <= 1e-12 * squares
    r = row_dots(x, y_unit) / np.sqrt(np.where(flat, 1.0, spread))
    return np.where(flat, np.nan, np.clip(r, -1.0, 1.0))


def stable_rank(maps: np.ndarray) -> np.ndarray:
    """Per map: ‖a‖²_F / σ₁², σ₁² the largest eigenvalue of aᵀa by power iteration from the ones
    vector, batched over the maps still iterating: each stops at its own convergence, and each
    step is BLAS's matrix-vector products and dots of the map on its own (numpy's matmul runs
    them map by map)."""
    a = as_float32(maps)
    # ‖a‖²_F map by map: numpy splits a whole-map sum into buffer-sized chunks of its own
    frobenius = np.array([np.einsum("ij,ij->", m, m, dtype=np.float64) for m in a])
    out = np.full(len(a), np.nan)
    running = np.flatnonzero(frobenius != 0)
    running_maps = a if len(running) == len(a) else a[running]
    n = a.shape[-1]
    v = np.full((len(running), n, 1), 1 / np.sqrt(n), dtype=np.float32)  # [map, key, 1]: columns
    largest = np.zeros(len(running))
    for step in range(POWER_ITERATIONS):
        w = np.swapaxes(running_maps, 1, 2) @ (running_maps @ v)
        estimate = row_dots(v[:, :, 0], w[:, :, 0]).astype(np.float64)
        v = w / np.sqrt(row_dots(w[:, :, 0], w[:, :, 0]))[:, None, None]
        done = np.abs(estimate - largest) <= POWER_TOLERANCE * estimate
        largest = estimate
        if step == POWER_ITERATIONS - 1:
            done[:] = True
        if done.any():
            out[running[done]] = frobenius[running[done]] / largest[done]
            if done.all():
                break
            running, running_maps, v, largest = running[~done], running_maps[~done], v[~done], largest[~done]
    return out


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


@dataclass(frozen=True)
class CosinePairs:
    """The token pairs a cosine correlation runs over (flat indices into a [query, key] map) and
    the embedding cosine on them as centred unit vectors, of its values and of its ranks."""

    index: np.ndarray
    unit: np.ndarray | None
    rank_unit: np.ndarray | None

    @classmethod
    def of(cls, cosine: np.ndarray, tokens: np.ndarray) -> CosinePairs:
        """The pairs j < i with both tokens in the boolean mask ``tokens``."""
        pairs = np.tri(len(tokens), len(tokens), -1, dtype=bool) & tokens[:, None] & tokens[None, :]
        index = np.flatnonzero(pairs)
        if len(index) < 2:
            return cls(index, None, None)
        values = np.asarray(cosine).ravel()[index]
        return cls(index, _unit_centered(as_float32(values)), _unit_centered(average_ranks(values[None])[0]))


@dataclass
class MapLayout:
    """A prompt's token labels and embedding cosine, prepared once for all of its maps."""

    token_shot: np.ndarray
    token_segment: np.ndarray
    cosine: np.ndarray
    cosine_pairs: CosinePairs = field(init=False)
    word_cosine_pairs: CosinePairs = field(init=False)
    clue_queries: np.ndarray = field(init=False)
    target_keys: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        segment = np.asarray(self.token_segment)
        self.cosine_pairs = CosinePairs.of(self.cosine, np.ones(len(segment), dtype=bool))
        self.word_cosine_pairs = CosinePairs.of(self.cosine, np.isin(segment, WORD_SEGMENTS))
        self.clue_queries = np.flatnonzero(segment == GENERATED)
        self.target_keys = np.flatnonzero(segment == TARGET)


def cosine_correlations(maps: np.ndarray, pairs: CosinePairs) -> tuple[np.ndarray, np.ndarray]:
    """Per map, (Pearson, Spearman) with the embedding cosine over ``pairs`` (NaN with fewer than
    two pairs or no spread)."""
    values = np.take(np.asarray(maps).reshape(len(maps), -1), pairs.index, axis=1)  # [map, pair]
    if values.shape[1] < 2:
        return np.full(len(maps), np.nan), np.full(len(maps), np.nan)
    return correlation(as_float32(values), pairs.unit), correlation(average_ranks(values), pairs.rank_unit)


def streamed_metrics(maps: np.ndarray, layout: MapLayout) -> np.ndarray:
    """The :data:`STREAMED` metrics of maps [map, query, key] (a layer's heads and head mean:
    one numpy call per metric for a batch of them, not per map; batches of :data:`BATCH_BYTES`),
    as [map, metric]. Each map's values are those it has measured on its own, bit for bit
    (tested)."""
    maps = np.asarray(maps)
    step = max(1, BATCH_BYTES // (4 * maps.shape[-1] ** 2))
    if len(maps) > step:
        batches = [maps[i : i + step] for i in range(0, len(maps), step)]
        return np.concatenate([streamed_metrics(batch, layout) for batch in batches])
    a32 = as_float32(maps)
    return np.stack(
        [
            row_entropy(maps),
            self_mass(a32),
            previous_mass(a32),
            sink_mass(a32),
            *shot_masses(a32, layout.token_shot),
            block_mass(a32, layout.clue_queries, layout.target_keys),
            *cosine_correlations(maps, layout.cosine_pairs),
            *cosine_correlations(maps, layout.word_cosine_pairs),
            stable_rank(a32),
        ],
        axis=1,
    )


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
