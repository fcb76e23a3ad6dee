"""Per-layer metric curves of the head-mean maps, one line per variant."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import matplotlib as mpl
import pandas as pd
from matplotlib.figure import Figure

from attnscope.plots.common import STYLE, _wrap, variant_color

METRIC_LABELS = {
    "row_entropy": "normalised row entropy",
    "self_mass": "self (diagonal) mass",
    "previous_mass": "previous-token mass",
    "sink_mass": "first-token (sink) mass",
    "within_shot_mass": "within-shot mass",
    "across_shot_mass": "across-shot mass",
    "clue_target_mass": "clue → target mass",
    "cosine_pearson": "Pearson r with cosine",
    "cosine_spearman": "Spearman ρ with cosine",
    "cosine_pearson_words": "Pearson r with cosine, words and clues",
    "cosine_spearman_words": "Spearman ρ with cosine, words and clues",
    "stable_rank": "stable rank",
    "effective_rank": "effective rank",
    "epsilon_rank": "ε-rank",
}


def plot_metric_curves(
    summary: pd.DataFrame,
    metrics: Sequence[str],
    title: str,
    band: tuple[str, str] = ("q25", "q75"),
    band_label: str = "25th–75th percentile across prompts",
) -> Figure:
    """Per-layer metrics of the head-mean maps, one line per variant (its mean over
    prompts) with a band (default: the 25th–75th percentile across prompts; the metric-curves
    rule draws the mean's 95 % interval).

    ``summary`` has columns variant, layer, metric, mean and the two band columns (one
    row per variant × layer × metric, e.g. :func:`attnscope.metrics.summarize` rows with
    ``maps == 'head_mean'`` and a variant column)."""
    with mpl.rc_context(STYLE):
        width = 4.2 * len(metrics) + 1.2
        fig = Figure(figsize=(width, 3.6), layout="constrained")
        axes = fig.subplots(1, len(metrics), squeeze=False)[0]
        variants = list(dict.fromkeys(summary["variant"]))
        for ax, metric in zip(axes, metrics):
            rows = summary[summary["metric"] == metric]
            for variant in variants:
                curve = rows[rows["variant"] == variant].sort_values("layer")
                if curve.empty:
                    continue
                color = variant_color(variant)
                ax.plot(curve["layer"], curve["mean"], color=color, lw=1.4, label=variant)
                ax.fill_between(curve["layer"], curve[band[0]], curve[band[1]], color=color, alpha=0.15, lw=0)
            ax.set_xlabel("layer")
            ax.set_ylabel(METRIC_LABELS.get(metric, metric))
            ax.set_title(METRIC_LABELS.get(metric, metric))
            ax.grid(alpha=0.3)
        axes[-1].legend(
            title="variant\n" + textwrap.fill(f"(band: {band_label})", 24),
            frameon=False,
            loc="upper left",
            bbox_to_anchor=(1.02, 1),
        )
        fig.suptitle(_wrap(title, width))
    return fig
