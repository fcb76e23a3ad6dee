"""Uncertainty of measured values: cluster-bootstrap intervals, paired permutation tests over
layers, verdicts from intervals, and numbers printed to the precision their interval allows.

A prompt's target word is the resampling unit: the prompts of one target under several
shot seeds form one cluster, so identical replicates cannot narrow an interval. Resampling
and permutation are SciPy's (``scipy.stats.bootstrap``, ``permutation_test``,
``false_discovery_control``); this module only arranges the data for them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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


def cluster_mean_interval(
    values: Sequence[float],
    clusters: Sequence[object] | None = None,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """The mean of ``values`` with a bootstrap interval that resamples whole clusters.

    ``clusters`` labels each value (default: every value its own cluster). The statistic is
    the pooled mean Σ sums / Σ counts of the resampled clusters (BCa interval).
    """
    values = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(values)
    values = values[keep]
    labels = np.arange(len(values)) if clusters is None else np.asarray(clusters, dtype=object)[keep]
    if len(values) == 0:
        return Interval(math.nan, math.nan, math.nan, 0, 0)
    _, cluster_of = np.unique(labels.astype(str), return_inverse=True)
    sums = np.bincount(cluster_of, weights=values)
    counts = np.bincount(cluster_of).astype(np.float64)
    estimate = float(sums.sum() / counts.sum())
    if len(sums) < 2 or np.ptp(sums / counts) == 0:  # nothing to resample: the interval is the point
        return Interval(estimate, estimate, estimate, len(values), len(sums))
    low = high = math.nan
    for method in ("BCa", "percentile"):  # BCa can be degenerate (e.g. two clusters)
        low, high = stats.bootstrap(
            (sums, counts),
            lambda s, c, axis=-1: s.sum(axis=axis) / c.sum(axis=axis),
            paired=True,
            vectorized=True,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method=method,
            rng=np.random.default_rng(seed),
        ).confidence_interval
        if np.isfinite(low) and np.isfinite(high):
            break
    return Interval(estimate, float(low), float(high), len(values), len(sums))


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
    """Decimal places that the interval's width supports: two significant digits of the width."""
    width = interval.high - interval.low
    if not np.isfinite(width) or width <= 0:
        return 3
    return max(0, 1 - math.floor(math.log10(width)))


def fmt(value: float, interval: Interval) -> str:
    """``value`` rounded to the interval's precision."""
    return "nan" if math.isnan(value) else f"{value:.{decimals(interval)}f}"
