"""The knockout effects figure: per clue scored (the trained model's greedy clue, the reference
clue), the change in its log-probability by layer window and edge set, and the attention mass the
knocked-out edges carry in the trained model, each with the 95 % intervals of
:func:`attnscope.effects.effects_table`."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attnscope.plots.common import STYLE, _wrap
from attnscope.variants import KNOCKOUT_CLUES

PANELS = {
    "delta_token": "Δ log-probability per clue token\n(knocked out − trained)",
    "vs_control": "Δ minus the random control's Δ\n(same window, paired per prompt)",
}
"""The effect panels of each clue scored, by the column (after the clue's prefix) they draw."""
MASS = "blocked_mass"
MASS_LABEL = "attention mass on the blocked edges\n(trained model; ×: control's / set's)"


def _draw(ax: Axes, table: pd.DataFrame, column: str, windows: list[str]) -> None:
    """``column`` of every edge set (controls dashed, grey) over the layer windows, with its interval."""
    position = {window: i for i, window in enumerate(windows)}
    sets = list(dict.fromkeys(zip(table["edges"], table["control"])))
    colors = {edges: f"C{i}" for i, edges in enumerate(dict.fromkeys(table["edges"]))}
    for n, (edges, control) in enumerate(sets):
        rows = table[(table["edges"] == edges) & (table["control"] == control)].dropna(subset=[column])
        if rows.empty:
            continue
        rows = rows.sort_values(["first", "last"])
        x = [position[w] + 0.08 * (n - (len(sets) - 1) / 2) for w in rows["window"]]
        mean, low, high = (rows[c].to_numpy(float) for c in (column, f"{column}_low", f"{column}_high"))
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
        if column == MASS and "mass_ratio" in rows:
            for xi, yi, ratio in zip(x, mean, rows["mass_ratio"], strict=True):
                if pd.notna(ratio):
                    ax.annotate(
                        f"×{ratio:.2f}", (xi, yi), xytext=(4, 4), textcoords="offset points", fontsize=7
                    )
    ax.set_xticks(range(len(windows)), [w.replace("L", "layers ", 1) for w in windows])
    ax.set_xlabel("layer window (0-based)")
    ax.grid(alpha=0.3)


def plot_knockout_effects(table: pd.DataFrame, title: str) -> Figure:
    """One row of panels per clue scored (:data:`attnscope.variants.KNOCKOUT_CLUES` the table
    holds) over the layer windows (x: the window's layers): each edge set's mean Δ log-probability
    per clue token (controls dashed), and a named set's Δ minus its control's; beside the first
    row, each set's and control's blocked attention mass, a named set's point annotated with its
    control's mass over its own (``mass_ratio``). Error bars are the 95 % cluster-bootstrap
    intervals over target words."""
    clues = [p for p in KNOCKOUT_CLUES if f"{p}delta_token" in table]
    mass = MASS in table
    with mpl.rc_context(STYLE):
        width = 4.5 * (len(PANELS) + mass)
        fig = Figure(figsize=(width, 0.4 + 3.2 * len(clues)), layout="constrained")
        axes = fig.subplots(len(clues), len(PANELS) + mass, squeeze=False)
        windows = table.drop_duplicates("window").sort_values(["first", "last"])["window"].tolist()
        for row, prefix in zip(axes, clues, strict=True):
            for ax, (column, label) in zip(row, PANELS.items()):
                _draw(ax, table, prefix + column, windows)
                ax.axhline(0.0, color="black", lw=0.8)
                ax.set_ylabel(label)
            row[0].set_title(KNOCKOUT_CLUES[prefix].capitalize(), loc="left")
        if mass:
            _draw(axes[0, -1], table, MASS, windows)
            axes[0, -1].set_ylabel(MASS_LABEL)
            for ax in axes[1:, -1]:
                ax.remove()
        axes[0, 0].legend(title="edges blocked", frameon=False, loc="best")
        fig.suptitle(_wrap(title, width))
    return fig
