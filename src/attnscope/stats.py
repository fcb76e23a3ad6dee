"""Uncertainty of measured values: cluster-bootstrap intervals, paired permutation tests over
layers, verdicts from intervals, and numbers printed to the precision their interval allows.

A prompt's target word is the resampling unit: the prompts of one target under several
shot seeds form one cluster, so identical replicates cannot narrow an interval. Resampling
and permutation are SciPy's (``scipy.stats.bootstrap``, ``permutation_test``,
``false_discovery_control``); this module only arranges the data for them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
N_RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval and the sample it rests on."""

    estimate: float
    low: float
    high: float
    n: int  # observations (e.g. prompts × seeds)
    n_clusters: int  # resampling units (target words)

    def __str__(self) -> str:
        return f"{fmt(self.estimate, self)} [{fmt(self.low, self)}, {fmt(self.high, self)}]"


def cluster_interval(
    values: np.ndarray,
    clusters: Sequence[object] | None,
    statistic: Callable[[np.ndarray], np.ndarray],
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """A statistic of column means with a bootstrap interval that resamples whole clusters.

    ``values`` [observation, column] (NaN: missing), ``clusters`` labels each observation
    (default: every observation its own cluster). The column means are pooled over the
    resampled clusters (Σ sums / Σ counts per column) and ``statistic`` maps them
    [..., column] → [...] (e.g. a ratio of two layer bands, or the lowest layer). BCa
    interval, percentile where BCa is degenerate.
    """
    values = np.asarray(values, dtype=np.float64)
    values = values[:, None] if values.ndim == 1 else values
    observed = ~np.isnan(values)
    keep = observed.any(axis=1)
    labels = np.arange(len(values)) if clusters is None else np.asarray(clusters, dtype=object)
    values, observed, labels = values[keep], observed[keep], labels[keep]
    if len(values) == 0:
        return Interval(math.nan, math.nan, math.nan, 0, 0)
    _, cluster_of = np.unique(labels.astype(str), return_inverse=True)
    n_clusters = cluster_of.max() + 1
    sums = np.stack(
        [
            np.bincount(cluster_of, np.where(observed[:, c], values[:, c], 0), n_clusters)
            for c in range(values.shape[1])
        ]
    )  # [column, cluster]
    counts = np.stack([np.bincount(cluster_of, observed[:, c], n_clusters) for c in range(values.shape[1])])

    # Columns often share their counts (every layer observed): the bootstrap resamples each
    # distinct row once, and the pooled statistic reads it for every column that has it.
    sum_rows, sum_of = np.unique(sums, axis=0, return_inverse=True)
    count_rows, count_of = np.unique(counts, axis=0, return_inverse=True)

    def pooled(*arrays: np.ndarray, axis: int = -1) -> np.ndarray:
        totals = [a.sum(axis=axis) for a in arrays]
        s = np.stack([totals[k] for k in sum_of.ravel()], axis=-1)
        n = np.stack([totals[len(sum_rows) + k] for k in count_of.ravel()], axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return statistic(s / n)

    data = (*sum_rows, *count_rows)
    estimate = float(pooled(*data))
    with np.errstate(invalid="ignore", divide="ignore"):
        per_cluster = np.asarray([statistic(sums[:, c] / counts[:, c]) for c in range(n_clusters)], float)
    finite = per_cluster[np.isfinite(per_cluster)]
    if not np.isfinite(estimate):
        return Interval(estimate, math.nan, math.nan, len(values), int(n_clusters))
    if n_clusters < 2 or len(finite) == 0 or finite.max() == finite.min():  # nothing to resample
        return Interval(estimate, estimate, estimate, len(values), int(n_clusters))
    low, high = paired_bootstrap(data, pooled, confidence, n_resamples, seed)
    return Interval(estimate, low, high, len(values), int(n_clusters))


def paired_bootstrap(
    data: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray],
    confidence: float,
    n_resamples: int,
    seed: int,
) -> tuple[float, float]:
    """The (low, high) bootstrap interval of a vectorised ``statistic`` of paired samples
    (``scipy.stats.bootstrap``): BCa, or the percentile interval where BCa is degenerate (e.g. two
    clusters); NaN if neither is finite."""
    low = high = math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)  # BCa's acceleration of a degenerate jackknife
        for method in ("BCa", "percentile"):
            low, high = stats.bootstrap(
                tuple(data),
                statistic,
                paired=True,
                vectorized=True,
                confidence_level=confidence,
                n_resamples=n_resamples,
                method=method,
                rng=np.random.default_rng(seed),
            ).confidence_interval
            if np.isfinite(low) and np.isfinite(high):
                break
    return float(low), float(high)


def cluster_mean_interval(
    values: Sequence[float],
    clusters: Sequence[object] | None = None,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """The pooled mean of ``values`` with a cluster-bootstrap interval (:func:`cluster_interval`)."""
    return cluster_interval(
        np.asarray(values, dtype=np.float64),
        clusters,
        lambda means: means[..., 0],
        confidence,
        n_resamples,
        seed,
    )


def interval_side(interval: Interval, supported_at: float, contradicted_at: float) -> int:
    """+1 if the whole interval clears the supported bar, −1 if it lies wholly on the other
    side of the contradicted bar, 0 otherwise (the claims module names these verdicts).

    The bars are oriented by their order: ``supported_at > contradicted_at`` means larger
    values support the claim, ``supported_at < contradicted_at`` smaller ones.
    """
    if math.isnan(interval.estimate):
        return 0
    sign = 1.0 if supported_at >= contradicted_at else -1.0
    ends = sorted((sign * interval.low, sign * interval.high))
    if ends[0] >= sign * supported_at:
        return 1
    if ends[1] <= sign * contradicted_at:
        return -1
    return 0


@dataclass(frozen=True)
class LayerTest:
    """A paired difference tested layer by layer."""

    mean_difference: np.ndarray  # [layer]
    p_adjusted: np.ndarray  # [layer], Benjamini–Hochberg over layers
    alpha: float

    def count(self, direction: int) -> int:
        """Layers whose difference has ``direction``'s sign (+1/−1) at adjusted p < alpha."""
        return int(((np.sign(self.mean_difference) == direction) & (self.p_adjusted < self.alpha)).sum())

    def describe(self, direction: int, word: str) -> str:
        """E.g. "lower in 21 of 30 layers (adjusted p < 0.05)"."""
        n = len(self.mean_difference)
        return f"{word} in {self.count(direction)} of {n} layers (adjusted p < {self.alpha:g})"


def paired_layer_test(
    differences: np.ndarray, alpha: float = 0.05, n_resamples: int = N_RESAMPLES, seed: int = 0
) -> LayerTest:
    """Sign-flip permutation test of the mean of paired differences [prompt, layer], per layer,
    two-sided, with a Benjamini–Hochberg correction over the layers."""
    differences = np.asarray(differences, dtype=np.float64)
    p_values = np.empty(differences.shape[1])
    for layer in range(differences.shape[1]):
        d = differences[:, layer]
        d = d[~np.isnan(d)]
        if len(d) == 0 or np.all(d == 0):
            p_values[layer] = 1.0
            continue
        p_values[layer] = stats.permutation_test(
            (d,),
            np.mean,
            permutation_type="samples",
            n_resamples=n_resamples,
            alternative="two-sided",
            rng=np.random.default_rng([seed, layer]),
        ).pvalue
    return LayerTest(
        np.nanmean(differences, axis=0), stats.false_discovery_control(p_values, method="bh"), alpha
    )


def decimals(interval: Interval) -> int:
    """Decimal places that the interval's width supports: two significant digits of the width,
    at most four significant digits of the estimate (a near-zero width shows no noise digits)."""
    width = interval.high - interval.low
    size = abs(interval.estimate)
    most = 3 - math.floor(math.log10(size)) if np.isfinite(size) and size > 0 else 3
    if not np.isfinite(width) or width <= 0:
        return max(0, min(3, most))
    return max(0, min(1 - math.floor(math.log10(width)), most))


def fmt(value: float, interval: Interval) -> str:
    """``value`` rounded to the interval's precision."""
    return "nan" if math.isnan(value) else f"{value:.{decimals(interval)}f}"
