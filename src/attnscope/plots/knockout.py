"""The knockout effects figure: the change in the trained clue's log-probability by layer window
and edge set, with the 95 % intervals of :func:`attnscope.effects.effects_table`."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from attnscope.plots.common import STYLE, _wrap

PANELS = {
    "delta_token": "Δ log-probability per clue token\n(knocked out − trained)",
    "vs_control": "Δ minus the random control's Δ\n(same window, paired per prompt)",
}


def plot_knockout_effects(table: pd.DataFrame, title: str) -> Figure:
    """Two panels over the layer windows (x: the window's layers): each edge set's mean Δ
    log-probability per clue token (controls dashed), and a named set's Δ minus its control's;
    error bars are the 95 % cluster-bootstrap intervals over target words."""
    with mpl.rc_context(STYLE):
        width = 9.0
        fig = Figure(figsize=(width, 3.6), layout="constrained")
        axes = fig.subplots(1, len(PANELS), squeeze=False)[0]
        windows = table.drop_duplicates("window").sort_values(["first", "last"])["window"].tolist()
        position = {window: i for i, window in enumerate(windows)}
        sets = list(dict.fromkeys(zip(table["edges"], table["control"])))
        colors = {edges: f"C{i}" for i, edges in enumerate(dict.fromkeys(table["edges"]))}
        for ax, (column, label) in zip(axes, PANELS.items()):
            for n, (edges, control) in enumerate(sets):
                rows = table[(table["edges"] == edges) & (table["control"] == control)].dropna(
                    subset=[column]
                )
                if rows.empty:
                    continue
                rows = rows.sort_values(["first", "last"])
                x = [position[w] + 0.08 * (n - (len(sets) - 1) / 2) for w in rows["window"]]
                mean, low, high = (
                    rows[c].to_numpy(float) for c in (column, f"{column}_low", f"{column}_high")
                )
                ax.errorbar(
                    x,
                    mean,
                    yerr=np.vstack([mean - low, high - mean]),
                    color="#8c8c8c" if control else colors[edges],
                    ls="--" if control else "-",
                    marker="o",
                    ms=4,
                    capsize=3,
                    label=("control of " if control else "") + edges,
                )
            ax.axhline(0.0, color="black", lw=0.8)
            ax.set_xticks(range(len(windows)), [w.replace("L", "layers ", 1) for w in windows])
            ax.set_xlabel("layer window (0-based)")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        axes[0].legend(title="edges blocked", frameon=False, loc="best")
        fig.suptitle(_wrap(title, width))
    return fig
