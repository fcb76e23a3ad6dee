"""Intervals, paired layer tests and verdicts from intervals, on data with known effects."""

import numpy as np
import pytest
from scipy import stats as scipy_stats

from attnscope import stats


def test_interval_of_independent_values_matches_scipy_directly():
    values = np.random.default_rng(1).normal(0.3, 1.0, 40)
    mine = stats.cluster_mean_interval(values, seed=3)
    reference = scipy_stats.bootstrap(
        (values,), np.mean, n_resamples=stats.N_RESAMPLES, method="BCa", rng=np.random.default_rng(3)
    ).confidence_interval
    assert mine.estimate == pytest.approx(values.mean())
    # Same resampler, a different (but equivalent) statistic: the intervals agree closely.
    assert mine.low == pytest.approx(reference.low, abs=0.03) and mine.high == pytest.approx(
        reference.high, abs=0.03
    )
    assert (mine.n, mine.n_clusters) == (40, 40)


def test_identical_replicates_do_not_narrow_a_cluster_interval():
    values = np.random.default_rng(2).normal(0.0, 1.0, 30)
    single = stats.cluster_mean_interval(values, clusters=range(30))
    replicated = stats.cluster_mean_interval(np.tile(values, 5), clusters=np.tile(np.arange(30), 5))
    naive = stats.cluster_mean_interval(np.tile(values, 5))
    width = lambda i: i.high - i.low  # noqa: E731
    assert replicated.n == 150 and replicated.n_clusters == 30
    assert width(replicated) >= 0.95 * width(single)
    assert width(naive) < 0.6 * width(single), "without clusters, replicates fake precision"


def test_nan_values_are_left_out_and_constant_values_have_a_point_interval():
    interval = stats.cluster_mean_interval([1.0, np.nan, 1.0, 1.0])
    assert (interval.estimate, interval.low, interval.high, interval.n) == (1.0, 1.0, 1.0, 3)
    assert np.isnan(stats.cluster_mean_interval([np.nan]).estimate)


@pytest.mark.parametrize(
    ("low", "high", "side"),
    [
        (0.05, 0.09, 1),  # wholly above the supported bar 0.02
        (-0.04, -0.01, -1),  # wholly below the contradicted bar 0
        (0.01, 0.05, 0),  # straddles the supported bar
        (-0.01, 0.01, 0),  # straddles the contradicted bar
    ],
)
def test_interval_side_needs_the_whole_interval(low, high, side):
    interval = stats.Interval((low + high) / 2, low, high, 30, 30)
    assert stats.interval_side(interval, supported_at=0.02, contradicted_at=0.0) == side
    # The same claim stated for the negated quantity: smaller supports.
    flipped = stats.Interval(-interval.estimate, -high, -low, 30, 30)
    assert stats.interval_side(flipped, supported_at=-0.02, contradicted_at=0.0) == side


def test_clear_none_and_borderline_effects_get_the_three_verdicts():
    rng = np.random.default_rng(5)
    clear = stats.cluster_mean_interval(rng.normal(0.10, 0.05, 30))
    none = stats.cluster_mean_interval(rng.normal(-0.05, 0.05, 30))
    borderline = stats.cluster_mean_interval(rng.normal(0.02, 0.05, 30))
    assert [stats.interval_side(i, 0.02, 0.0) for i in (clear, none, borderline)] == [1, -1, 0]


def test_paired_layer_test_finds_the_layers_with_an_effect():
    rng = np.random.default_rng(7)
    differences = rng.normal(0.0, 1.0, (30, 12))
    differences[:, :4] -= 1.5  # lower in the first four layers only
    test = stats.paired_layer_test(differences)
    assert test.count(-1) == 4 and test.count(1) == 0
    assert test.describe(-1, "lower") == "lower in 4 of 12 layers (adjusted p < 0.05)"
    raw = scipy_stats.ttest_1samp(differences, 0.0).pvalue
    assert np.all(test.p_adjusted[4:] > 0.05) and np.all(raw[:4] < 1e-4)


@pytest.mark.parametrize(
    ("low", "high", "text"),
    [(0.1234, 0.1456, "0.135 [0.123, 0.146]"), (1.0, 9.0, "5.0 [1.0, 9.0]"), (10.0, 50.0, "30 [10, 50]")],
)
def test_printed_precision_follows_the_interval(low, high, text):
    assert str(stats.Interval((low + high) / 2, low, high, 10, 10)) == text
