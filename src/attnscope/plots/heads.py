"""What heads do and where information flows: the head-type scores as layer × head heatmaps, the
attention rollout of a store's prompts and the weight-behaviour correlations of the head table (no
thesis figure: extensions)."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from attnscope.headtypes import SCORES, head_types
from attnscope.plots.common import STYLE, _wrap
from attnscope.rollout import PER_SHOT, QUERIES, SOURCES, source_order

SCORE_LABELS = {
    "previous_token": "previous-token score (BOS key excluded)",
    "duplicate_token": "duplicate-token score",
    "induction": "induction score",
}
SOURCE_COLORS = {
    "sink": "#404040",
    "template": "#a6a6a6",
    "instruction": "#bc8f5a",
    "shot_word": "#1f77b4",
    "shot_clue": "#2ca02c",
    "target": "#d62728",
    "generated": "#9467bd",
}
SHARE_FLOOR = 1e-6
"""The bottom of the rollout's log colour scale: smaller shares are drawn in its lowest colour."""


def plot_head_types(table: pd.DataFrame, threshold: float, title: str) -> Figure:
    """One layer × head heatmap per score of :data:`attnscope.headtypes.SCORES` (colour 0 to 1),
    a dot on each head typed by that score (its highest score, at least ``threshold``).

    ``table``: :func:`attnscope.headtypes.head_types_table`, one row per layer × head."""
    num_layers, num_heads = table["layer"].max() + 1, table["head"].max() + 1
    types = head_types(table, threshold)
    with mpl.rc_context(STYLE):
        width = 1.2 + len(SCORES) * (0.9 + 0.18 * num_heads)
        fig = Figure(figsize=(width, 1.6 + 0.16 * num_layers), layout="constrained")
        axes = fig.subplots(1, len(SCORES), sharey=True)
        for ax, score in zip(axes, SCORES):
            grid = np.full((num_layers, num_heads), np.nan)
            grid[table["layer"], table["head"]] = table[score]
            image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="upper")
            typed = table[types == score]
            ax.plot(typed["head"], typed["layer"], "o", ms=3, color="white", mec="black", mew=0.5)
            ax.set_title(SCORE_LABELS[score])
            ax.set_xlabel("head")
            ax.set_xticks(range(num_heads))
        axes[0].set_ylabel("layer")
        fig.colorbar(image, ax=axes, label=f"score (dot: head type, ≥ {threshold:g})", shrink=0.8)
        fig.suptitle(_wrap(title, width))
    return fig


def _source_label(kind: str, shot: int) -> str:
    return f"shot {shot} {kind.split('_')[1]}" if kind in PER_SHOT else kind


def plot_rollout(table: pd.DataFrame, title: str) -> Figure:
    """Attention rollout of one store: per query unit (target word, generated clue) a heatmap
    target × source of the share of the final state (after the last layer) that traces back to
    each source (log colour scale), and the prompt-mean share of each source kind after every
    layer (shots summed; solid: target word, dashed: generated clue).

    ``table``: :func:`attnscope.rollout.rollout_table`."""
    last = table[table["layer"] == table["layer"].max()]
    order = source_order(last)
    queries = [q for q in QUERIES if (table["query"] == q).any()]
    targets = list(dict.fromkeys(last.sort_values("prompt_index")["target"]))
    with mpl.rc_context(STYLE):
        width = 2.0 + 0.28 * len(order) * len(queries) + 4.2
        fig = Figure(figsize=(width, 2.2 + 0.16 * len(targets)), layout="constrained")
        axes = fig.subplots(1, len(queries) + 1, width_ratios=[len(order)] * len(queries) + [14])
        norm = LogNorm(vmin=SHARE_FLOOR, vmax=1, clip=True)
        for ax, query in zip(axes, queries):
            rows = last[last["query"] == query].pivot_table(
                index="target", columns=["source", "shot"], values="share", aggfunc="sum"
            )
            grid = rows.reindex(index=targets, columns=pd.MultiIndex.from_tuples(order)).to_numpy()
            image = ax.imshow(np.clip(grid, SHARE_FLOOR, 1), norm=norm, cmap="magma", aspect="auto")
            ax.set_xticks(range(len(order)), [_source_label(*pair) for pair in order], rotation=90)
            ax.set_yticks(range(len(targets)), targets)
            ax.set_title(f"{query} ← sources, after the last layer")
        fig.colorbar(image, ax=axes[: len(queries)], label="share of the final state", shrink=0.8)
        curves = table.groupby(["query", "layer", "source", "prompt_index"])["share"].sum()
        curves = curves.groupby(["query", "layer", "source"]).mean()
        flow, drawn = axes[-1], {}
        for query, style in zip(queries, ("-", "--")):
            present = set(curves.loc[query].index.get_level_values("source"))
            for kind in (kind for kind in SOURCES if kind in present):
                line = curves.loc[query].xs(kind, level="source")
                flow.plot(line.index, line.to_numpy(), style, color=SOURCE_COLORS[kind], lw=1.3)
                drawn[kind] = Line2D([], [], color=SOURCE_COLORS[kind], lw=1.3)
        flow.set_yscale("log")
        flow.set_ylim(SHARE_FLOOR, 1.5)
        flow.set_xlabel("layer (rollout through layers 0..l)")
        flow.set_ylabel("prompt-mean share")
        flow.set_title("share by layer (solid: target, dashed: generated)")
        flow.legend(drawn.values(), drawn.keys(), frameon=False, loc="lower left", ncols=2)
        flow.grid(alpha=0.3)
        fig.suptitle(_wrap(title, width))
    return fig


def plot_head_correlations(correlations: pd.DataFrame, title: str) -> Figure:
    """Per variant (rows) and scope (columns: all heads, within layer) a weight × behaviour heatmap
    of Spearman's ρ over heads (colour −1 to 1), each cell labelled with ρ and its interval, in
    bold where the interval excludes 0.

    ``correlations``: :func:`attnscope.headtable.weight_behaviour_correlations` with a ``variant``
    column (its order is the panels' order)."""
    variants = list(dict.fromkeys(correlations["variant"]))
    scopes = list(dict.fromkeys(correlations["scope"]))
    weights = list(dict.fromkeys(correlations["weight"]))
    behaviours = list(dict.fromkeys(correlations["behaviour"]))
    with mpl.rc_context(STYLE):
        width = 2.0 + 1.15 * len(behaviours) * len(scopes)
        fig = Figure(figsize=(width, 1.0 + len(variants) * (0.9 + 0.55 * len(weights))), layout="constrained")
        axes = np.asarray(fig.subplots(len(variants), len(scopes), sharex=True, sharey=True, squeeze=False))
        panels = [(variant, scope) for variant in variants for scope in scopes]
        for ax, (variant, scope) in zip(axes.ravel(), panels):
            chosen = (correlations["variant"] == variant) & (correlations["scope"] == scope)
            rows = correlations[chosen].set_index(["weight", "behaviour"])
            grid = np.array([[rows.loc[(w, b), "rho"] for b in behaviours] for w in weights], float)
            image = ax.imshow(grid, vmin=-1, vmax=1, cmap="RdBu_r", aspect="auto")
            for i, w in enumerate(weights):
                for j, b in enumerate(behaviours):
                    rho, low, high = rows.loc[(w, b), ["rho", "low", "high"]]
                    if not np.isfinite(rho):
                        continue
                    weight = "bold" if low > 0 or high < 0 else "normal"
                    color = "white" if abs(rho) > 0.6 else "black"
                    label = f"{rho:.2f}\n[{low:.2f}, {high:.2f}]"
                    ax.text(j, i, label, ha="center", va="center", fontsize=6, fontweight=weight, color=color)
            ax.set_yticks(range(len(weights)), weights)
            ax.set_title(f"{variant} · {scope.replace('_', ' ')}")
        for ax in axes[-1]:
            ax.set_xticks(range(len(behaviours)), behaviours, rotation=30, ha="right")
        fig.colorbar(
            image,
            ax=axes.ravel().tolist(),
            label="Spearman ρ over heads (bold: 95% interval excludes 0)",
            shrink=0.6,
        )
        fig.suptitle(_wrap(title, width))
    return fig
