"""Publication figures: pure functions from arrays and tables to matplotlib figures.

Every ``plot_*`` function takes numbers (NumPy arrays, DataFrames) and returns a
:class:`matplotlib.figure.Figure` built with the object-oriented API (no pyplot state,
Agg canvas), so figures are cheap to build in a loop and safe in worker processes;
:func:`save_figure` writes one as PNG and SVG. Which thesis figure each function
reproduces is in its docstring and in ``docs/figures.md``.

Conventions shared by all figures:

- layers are 0-based, as in the stores and tables (the thesis counts from 1);
- attention maps are drawn on one colour scale per figure (``vmax``, the same in every
  panel, one colour bar); the non-causal upper triangle is grey, shot boundaries and the
  start of the target word and of the generated clue are dark lines;
- tick labels name the tokens or words; a shot's word is prefixed ``Word:``, the target
  ``Target Word:`` (the thesis's axis order: Word → Example Clue → … → Target Word →);
- each variant has one colour in every figure (:func:`variant_color`).
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from attnscope import io
from attnscope.store import GENERATED, SHOT_WORD, TARGET, TEMPLATE
from attnscope.store import WORD_SEGMENTS as PLOTTED_SEGMENTS

# PLOTTED_SEGMENTS, the tokens drawn in the maps: the shots' words and clues, the target and
# the generated clue (the thesis left out the instruction, the chat template and the separators).

STYLE = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "figure.titlesize": 10,
    "legend.fontsize": 8,
    "svg.fonttype": "none",  # text stays text in the SVG
    "svg.hashsalt": "attnscope",  # fixed element ids: same figure, same SVG bytes
    "image.interpolation": "nearest",
}
ATTENTION_CMAP = "Blues"
COSINE_CMAP = "RdBu_r"
MASK_COLOR = "#e6e6e6"
BOUNDARY_COLOR = "#333333"

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
    "stable_rank": "stable rank",
    "effective_rank": "effective rank",
    "epsilon_rank": "ε-rank",
}


# --------------------------------------------------------------------------- helpers


def variant_color(variant: str) -> str:
    """One colour per variant, the same in every figure: trained black, random grey,
    α > 1 reds, α < 1 blues, top-r edits orange, flattened spectra green."""
    from attnscope.variants import parse

    v = parse(variant)
    if v.kind == "trained":
        return "#000000"
    if v.kind == "random":
        return "#8c8c8c"
    if v.kind == "qkscale":
        return "#d62728" if v.alpha > 1 else "#1f77b4" if v.alpha < 1 else "#000000"
    if v.kind == "qktop":
        return "#ff7f0e" if v.alpha >= 1 else "#17becf"
    return "#2ca02c"


def resolve_layers(requested: Iterable[int], num_layers: int) -> list[int]:
    """The requested layers that exist (0-based, first occurrence kept, negative counts from
    the end); if none exist, up to four evenly spaced layers."""
    layers: list[int] = []
    for layer in requested:
        layer = layer + num_layers if layer < 0 else layer
        if 0 <= layer < num_layers and layer not in layers:
            layers.append(layer)
    if not layers:
        layers = sorted({round(x) for x in np.linspace(0, num_layers - 1, min(4, num_layers))})
    return layers


THESIS_GRID_LAYERS = (1, 11, 21, 31)
"""The layers of the thesis's 2×2 grids (1-based, of Mistral-7B's 32; postprocess_images.ipynb)."""
THESIS_DEPTH = 32


def thesis_layers(num_layers: int) -> list[int]:
    """The thesis's grid layers mapped onto a model of ``num_layers`` layers (0-based): the same
    relative depth, so a 32-layer model gets exactly 0, 10, 20, 30."""
    return sorted(
        {round((layer - 1) / (THESIS_DEPTH - 1) * (num_layers - 1)) for layer in THESIS_GRID_LAYERS}
    )


def thesis_word_axis(words: Sequence[str], segments: Sequence[str], shots: Sequence[int]) -> MapAxis:
    """The axis of the thesis's word-level maps, labelled as its notebook labels them: a
    format word of a shot turn ("Word") reads "Word:", the target turn's "Target Word:"."""
    segments = np.asarray(segments)
    target_label = max((i for i, s in enumerate(segments) if s == TEMPLATE), default=-1)
    labels = [
        ("Target Word:" if i == target_label else f"{word}:") if segments[i] == TEMPLATE else word
        for i, word in enumerate(words)
    ]
    return MapAxis(labels, segments, np.asarray(shots))


def token_text(token: str) -> str:
    """A tokenizer piece as readable text (byte-level BPE ``Ġ``/``Ċ``, SentencePiece ``▁``)."""
    text = token.replace("Ġ", " ").replace("▁", " ").replace("Ċ", "\\n").strip()
    return text or "<space>"


@dataclass(frozen=True)
class MapAxis:
    """What runs along both axes of an attention map: labels, and per position its
    segment and shot (for the boundary lines)."""

    labels: list[str]
    segment: np.ndarray
    shot: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def boundaries(self) -> list[int]:
        """Positions p where a new block starts (a line is drawn between p - 1 and p): a new
        shot, the target word, the generated clue."""
        starts = []
        for p in range(1, len(self)):
            new_shot = self.shot[p] != self.shot[p - 1]
            new_block = self.segment[p] in (TARGET, GENERATED) and self.segment[p] != self.segment[p - 1]
            if new_shot or new_block:
                starts.append(p)
        return starts


def axis_labels(
    texts: Sequence[str], segments: Sequence[str], word_ids: Sequence[int] | None = None
) -> list[str]:
    """Tick labels: the first token of a shot's word gets ``Word:``, of the target ``Target Word:``."""
    labels = []
    for i, (text, segment) in enumerate(zip(texts, segments)):
        first = word_ids is None or i == 0 or word_ids[i] != word_ids[i - 1]
        prefix = {SHOT_WORD: "Word: ", TARGET: "Target Word: "}.get(segment, "") if first else ""
        labels.append(prefix + text)
    return labels


def token_axis(
    tokens: Sequence[str], segments: Sequence[str], shots: Sequence[int], words: Sequence[int]
) -> tuple[np.ndarray, MapAxis]:
    """(indices of the plotted tokens, their axis) from a prompt's per-token labels."""
    segments = np.asarray(segments)
    keep = np.flatnonzero(np.isin(segments, PLOTTED_SEGMENTS))
    texts = [token_text(tokens[i]) for i in keep]
    labels = axis_labels(texts, segments[keep], np.asarray(words)[keep])
    return keep, MapAxis(labels, segments[keep], np.asarray(shots)[keep])


def word_axis(words: Sequence[str], segments: Sequence[str], shots: Sequence[int]) -> MapAxis:
    """The axis of a word-level map (its words are already the plotted ones)."""
    return MapAxis(axis_labels(list(words), list(segments)), np.asarray(segments), np.asarray(shots))


def causal_masked(a: np.ndarray) -> np.ma.MaskedArray:
    """``a`` (…, n, n) as float32 with the non-causal upper triangle masked."""
    a = np.asarray(a, dtype=np.float32)
    n = a.shape[-1]
    return np.ma.masked_array(a, mask=np.broadcast_to(np.triu(np.ones((n, n), bool), 1), a.shape))


def _tick_size(n: int, panel_inches: float) -> float:
    """Font size (pt) at which n labels fit along a panel side."""
    return float(np.clip(panel_inches * 72 / max(n, 1) * 0.85, 2.5, 8.0))


def _cmap(name: str) -> mpl.colors.Colormap:
    return mpl.colormaps[name].with_extremes(bad=MASK_COLOR)


def _vmax(maps: np.ndarray, vmax: float | None) -> float:
    if vmax is not None:
        return float(vmax)
    values = causal_masked(maps).compressed()
    return float(values.max()) if values.size and values.max() > 0 else 1.0


@dataclass(frozen=True)
class _PanelGrid:
    """A fixed layout of square map panels (inches), so large grids need no layout engine and
    no tight bounding box: margins come from the label lengths and font sizes."""

    n_panels: int
    ncols: int
    panel: float
    left: float
    bottom: float
    top: float
    right: float = 1.3
    gap: float = 0.15
    title: float = 0.42

    @property
    def nrows(self) -> int:
        return math.ceil(self.n_panels / self.ncols)

    @property
    def size(self) -> tuple[float, float]:
        width = self.left + self.ncols * self.panel + (self.ncols - 1) * self.gap + self.right
        height = self.top + self.nrows * (self.panel + self.title) + (self.nrows - 1) * self.gap + self.bottom
        return width, height

    def axes(self, fig: Figure) -> list[Axes]:
        width, height = self.size
        axes = []
        for i in range(self.n_panels):
            row, col = divmod(i, self.ncols)
            x = self.left + col * (self.panel + self.gap)
            y = height - self.top - (row + 1) * (self.panel + self.title) - row * self.gap
            axes.append(fig.add_axes((x / width, y / height, self.panel / width, self.panel / height)))
        return axes

    def colorbar_axes(self, fig: Figure, offset: float = 0.25) -> Axes:
        width, height = self.size
        span = min(self.nrows * (self.panel + self.title), 4.5)
        y = height - self.top - (self.nrows * (self.panel + self.title) + span) / 2
        x = width - self.right + offset
        return fig.add_axes((x / width, y / height, 0.16 / width, span / height))


def _wrap(title: str, width_inches: float, fontsize: float = 10.0) -> str:
    """``title`` wrapped to the figure width (each of its lines separately)."""
    chars = max(20, int(width_inches * 72 / (fontsize * 0.55)))
    return "\n".join(textwrap.fill(line, chars) for line in title.split("\n"))


def _layout(
    axis: MapAxis,
    n_panels: int,
    ncols: int,
    panel: float,
    title: str,
    extra_left: float = 0.0,
    title_room: float = 0.42,
) -> tuple[_PanelGrid, float, str]:
    """The panel grid of a map figure, its tick font size and its title wrapped to fit."""
    ncols = max(1, min(ncols, n_panels))
    size = _tick_size(len(axis), panel)
    label = max((len(s) for s in axis.labels), default=1) * size * 0.62 / 72

    def grid(top: float) -> _PanelGrid:
        return _PanelGrid(
            n_panels, ncols, panel, label + 0.45 + extra_left, label + 0.45, top, title=title_room
        )

    wrapped = _wrap(title, grid(0.0).size[0])
    return grid(0.25 + 0.2 * (wrapped.count("\n") + 1)), size, wrapped


def _draw_map(
    ax: Axes,
    a: np.ndarray,
    axis: MapAxis,
    norm: Normalize,
    cmap: mpl.colors.Colormap,
    show_x: bool,
    show_y: bool,
    tick_size: float,
    level: str,
) -> mpl.image.AxesImage:
    """One map: image, boundary lines, and tick labels only where asked (ticks are the
    costly part of drawing a large grid)."""
    image = ax.imshow(causal_masked(a), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    n = len(axis)
    lines = np.array(axis.boundaries()) - 0.5
    if lines.size:  # within the causal triangle only: the thesis's "subdivided triangles"
        ax.vlines(lines, lines, n - 0.5, color=BOUNDARY_COLOR, lw=0.6)
        ax.hlines(lines, -0.5, lines, color=BOUNDARY_COLOR, lw=0.6)
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xticks(range(n) if show_x else [])
    ax.set_yticks(range(n) if show_y else [])
    if show_x:
        ax.set_xticklabels(axis.labels, rotation=90, fontsize=tick_size)
        ax.set_xlabel(f"key {level} (attended to)")
    if show_y:
        ax.set_yticklabels(axis.labels, fontsize=tick_size)
        ax.set_ylabel(f"query {level} (attending)")
    ax.tick_params(length=1.5, pad=1)
    return image


def _edges(i: int, n_panels: int, ncols: int) -> tuple[bool, bool]:
    """(bottom of its column, first column) for panel i of a row-major grid."""
    return i + ncols >= n_panels, i % ncols == 0


# --------------------------------------------------------------------------- attention maps


def plot_attention_maps(
    maps: np.ndarray,
    layers: Sequence[int],
    axis: MapAxis,
    title: str,
    level: str = "token",
    vmax: float | None = None,
    ncols: int = 2,
    panel_inches: float = 4.2,
    colorbar_label: str = "attention (head mean)",
    progress: bool = False,
    per_panel: bool = False,
) -> Figure:
    """Attention maps of several layers on one colour scale (thesis fig. 8.4, 8.5, 8.7–8.9,
    A.1–A.18): ``maps`` [len(layers), n, n] over ``axis``; 2 columns give the thesis's
    2×2 grids, more columns a full pass over all layers. Tick labels are drawn on the left
    column and the bottom panel of each column (every panel shares them); values above
    ``vmax`` saturate (the colour bar then has an arrow); ``progress`` shows a tqdm bar over
    the panels. ``per_panel``: every panel on its own scale, 0 to its maximum (the thesis's
    figures), each titled with that maximum, and no shared colour bar."""
    maps = np.asarray(maps)
    if maps.shape[0] != len(layers) or maps.shape[1:] != (len(axis), len(axis)):
        raise ValueError(f"maps {maps.shape} do not match {len(layers)} layers × {len(axis)} positions")
    grid, size, title = _layout(axis, len(layers), ncols, panel_inches, title)
    with mpl.rc_context(STYLE):
        fig = Figure(figsize=grid.size)
        norm = Normalize(0.0, _vmax(maps, vmax))
        cmap = _cmap(ATTENTION_CMAP)
        image = None
        panels = tqdm(grid.axes(fig), desc="layers", unit="panel", disable=not progress)
        for i, ax in enumerate(panels):
            show_x, show_y = _edges(i, len(layers), grid.ncols)
            panel_norm = Normalize(0.0, _vmax(maps[i], None)) if per_panel else norm
            image = _draw_map(ax, maps[i], axis, panel_norm, cmap, show_x, show_y, size, level)
            scale = f" (scale 0–{panel_norm.vmax:.2g})" if per_panel else ""
            ax.set_title(f"layer {layers[i]}{scale}", pad=3)
        if not per_panel:
            extend = "max" if vmax is not None and float(np.nanmax(maps)) > vmax else "neither"
            fig.colorbar(image, cax=grid.colorbar_axes(fig), label=colorbar_label, extend=extend)
        fig.suptitle(title, y=1 - 0.12 / grid.size[1], va="top")
    return fig


def plot_cosine_and_attention(
    cosine: np.ndarray,
    maps: np.ndarray,
    layers: Sequence[int],
    axis: MapAxis,
    title: str,
    correlations: Mapping[int, tuple[float, float]] | None = None,
    vmax: float | None = None,
    panel_inches: float = 4.2,
) -> Figure:
    """Input-embedding cosine similarity beside the token-level attention of a few layers
    (thesis fig. 8.6: layers 1–3): the first panel is the cosine [n, n] on a diverging
    scale symmetric about 0 (its colour bar on the left), the others the maps
    [len(layers), n, n] on one attention scale; ``correlations`` {layer: (Pearson,
    Spearman)} go into the panel titles."""
    n = len(axis)
    grid, size, title = _layout(axis, len(layers) + 1, 2, panel_inches, title, extra_left=1.1, title_room=0.6)
    with mpl.rc_context(STYLE):
        fig = Figure(figsize=grid.size)
        axes = grid.axes(fig)
        off_diagonal = np.asarray(cosine, dtype=np.float32)[np.tril_indices(n, -1)]
        bound = float(np.abs(off_diagonal).max()) if off_diagonal.size and off_diagonal.any() else 1.0
        show_x, _ = _edges(0, grid.n_panels, grid.ncols)
        cos_image = _draw_map(
            axes[0], cosine, axis, Normalize(-bound, bound), _cmap(COSINE_CMAP), show_x, True, size, "token"
        )
        axes[0].set_title("input-embedding cosine similarity", pad=3)
        norm = Normalize(0.0, _vmax(maps, vmax))
        image = None
        for i, layer in enumerate(layers, start=1):
            show_x, show_y = _edges(i, grid.n_panels, grid.ncols)
            image = _draw_map(
                axes[i], maps[i - 1], axis, norm, _cmap(ATTENTION_CMAP), show_x, show_y, size, "token"
            )
            subtitle = f"layer {layer} attention"
            if correlations and layer in correlations:
                r, rho = correlations[layer]
                subtitle += f"\nPearson r = {r:.2f}, Spearman ρ = {rho:.2f} with the cosine"
            axes[i].set_title(subtitle, pad=3)
        width, height = grid.size
        cax = fig.add_axes(
            (
                0.25 / width,
                1 - (grid.top + grid.title + grid.panel * 0.9) / height,
                0.16 / width,
                grid.panel * 0.8 / height,
            )
        )
        fig.colorbar(cos_image, cax=cax, label="cosine similarity")
        cax.yaxis.set_label_position("left")
        extend = "max" if vmax is not None and float(np.nanmax(maps)) > vmax else "neither"
        fig.colorbar(image, cax=grid.colorbar_axes(fig), label="attention (head mean)", extend=extend)
        fig.suptitle(title, y=1 - 0.12 / height, va="top")
    return fig


# --------------------------------------------------------------------------- metric curves


def plot_metric_curves(
    summary: pd.DataFrame,
    metrics: Sequence[str],
    title: str,
    band: tuple[str, str] = ("q25", "q75"),
) -> Figure:
    """Per-layer metrics of the head-mean maps, one line per variant (its mean over
    prompts) with a band of the spread across prompts (default: 25th–75th percentile).

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
            title=f"variant\n(band: {band[0]}–{band[1]}\nacross prompts)",
            frameon=False,
            loc="upper left",
            bbox_to_anchor=(1.02, 1),
        )
        fig.suptitle(_wrap(title, width))
    return fig


# --------------------------------------------------------------------------- weight spectra


def plot_squared_singular_values(
    sigma2: Mapping[str, np.ndarray],
    edges: Mapping[str, float],
    title: str,
    reference: Mapping[str, np.ndarray] | None = None,
    label: str = "learned",
    reference_label: str = "random init",
) -> Figure:
    """Squared singular values σᵢ² (descending) of one matrix type per panel, one line per
    layer coloured by layer, against the Marchenko–Pastur bulk edge λ₊ of a random matrix
    of the same shape and init std (thesis fig. A.19–A.21). ``sigma2[matrix]`` is
    [layer, i]; ``reference`` (e.g. the random-init model) is drawn in grey behind."""
    matrices = list(sigma2)
    with mpl.rc_context(STYLE):
        width = 4.0 * len(matrices) + 0.8
        fig = Figure(figsize=(width, 3.6), layout="constrained")
        axes = fig.subplots(1, len(matrices), squeeze=False)[0]
        n_layers = max(np.asarray(s).shape[0] for s in sigma2.values())
        norm = Normalize(0, max(n_layers - 1, 1))
        cmap = mpl.colormaps["viridis"]
        for ax, matrix in zip(axes, matrices):
            if reference is not None and matrix in reference:
                ref = np.asarray(reference[matrix])
                index = np.arange(1, ref.shape[1] + 1)
                for layer, row in enumerate(ref):
                    ax.plot(
                        index, row, color="#b0b0b0", lw=0.7, label=reference_label if layer == 0 else None
                    )
            values = np.asarray(sigma2[matrix])
            index = np.arange(1, values.shape[1] + 1)
            for layer, row in enumerate(values):
                ax.plot(index, row, color=cmap(norm(layer)), lw=0.8, alpha=0.85)
            if matrix in edges:
                ax.axhline(edges[matrix], color="#d62728", ls="--", lw=1.2, label=r"MP edge $\lambda_+$")
            ax.set_yscale("log")
            ax.set_xlabel("index i (descending)")
            ax.set_ylabel(r"$\sigma_i^2$")
            ax.set_title(rf"$W_{{\mathrm{{{matrix}}}}}$ ({label})")
            ax.grid(alpha=0.3, which="both", lw=0.4)
            ax.legend(frameon=False, loc="upper right")
        fig.colorbar(mpl.cm.ScalarMappable(norm, cmap), ax=axes, label="layer", shrink=0.8)
        fig.suptitle(_wrap(title, width))
    return fig


def plot_base_alignment(alignment: Mapping[str, pd.DataFrame], title: str) -> Figure:
    """Tr(W_qᵀW_k) against random matrices (thesis fig. A.22), one colour per variant.

    ``alignment`` maps a variant to its base-alignment table (columns layer, scope, trace,
    trace_std_init, z_score, cosine, n_terms). Left: the layer trace (scope ``layer``) with
    the ±1σ/±2σ band of i.i.d. random matrices at the init std. Middle: every head's z-score
    against that band. Right: every head's scale-free cosine·√n (trace over ‖W_q‖_F‖W_k‖_F,
    ≈ N(0, 1) for independent random matrices of any scale). Symmetric-log axes keep the
    random band and large trained values readable in one panel."""
    with mpl.rc_context(STYLE):
        fig = Figure(figsize=(14.0, 4.0), layout="constrained")
        left, middle, right = fig.subplots(1, 3)
        first = next(iter(alignment.values()))
        layer_rows = first[first["scope"] == "layer"].sort_values("layer")
        std = layer_rows["trace_std_init"].to_numpy()
        x = layer_rows["layer"].to_numpy()
        left.fill_between(x, -2 * std, 2 * std, color="#d9d9d9", lw=0, label="random ±2σ")
        left.fill_between(x, -std, std, color="#bdbdbd", lw=0, label="random ±1σ")
        for ax in (middle, right):
            ax.axhspan(-2, 2, color="#d9d9d9", lw=0, label="within ±2")
        for offset, (variant, table) in enumerate(alignment.items()):
            color = variant_color(variant)
            rows = table[table["scope"] == "layer"].sort_values("layer")
            left.plot(rows["layer"], rows["trace"], "o-", color=color, ms=3, lw=1, label=variant)
            heads = table[table["scope"] == "head"]
            jitter = heads["layer"] + (offset - (len(alignment) - 1) / 2) * 0.2
            scale_free = heads["cosine"] * np.sqrt(heads["n_terms"])
            middle.scatter(jitter, heads["z_score"], s=7, color=color, alpha=0.7, label=variant)
            right.scatter(jitter, scale_free, s=7, color=color, alpha=0.7, label=variant)
        left.set_yscale("symlog", linthresh=float(2 * std.max()) if std.size and std.max() > 0 else 1.0)
        left.set_ylabel(r"$\mathrm{Tr}(W_q^\top W_k)$ (layer, all heads)")
        left.set_title("trace per layer")
        middle.set_ylabel(r"z-score of $\mathrm{Tr}(W_{q,h}^\top W_{k,h})$ vs random init")
        middle.set_title("per head, against random init")
        right.set_ylabel(r"cosine$\cdot\sqrt{n}$ = Tr / ($\|W_{q,h}\|_F \|W_{k,h}\|_F$) $\cdot\sqrt{n}$")
        right.set_title("per head, scale-free")
        for ax in (left, middle, right):
            if ax is not left:
                ax.set_yscale("symlog", linthresh=2.0)
            ax.axhline(0, color="black", lw=0.5)
            ax.set_xlabel("layer")
            ax.grid(alpha=0.3)
            ax.legend(frameon=False, fontsize=7)
        fig.suptitle(_wrap(title, 14.0))
    return fig


# --------------------------------------------------------------------------- theory


def plot_mp_density(samples: Sequence[tuple[str, np.ndarray, float, float]], title: str) -> Figure:
    """Histograms of sampled eigenvalues against the Marchenko–Pastur density (thesis fig. 2.4).

    ``samples``: (label, eigenvalues of WᵀW/N, ratio q = M/N, entry variance σ²) per panel."""
    from attnscope import theory

    with mpl.rc_context(STYLE):
        width = 4.2 * len(samples)
        fig = Figure(figsize=(width, 3.4), layout="constrained")
        axes = fig.subplots(1, len(samples), squeeze=False)[0]
        for ax, (label, values, q, sigma2) in zip(axes, samples):
            lo, hi = theory.marchenko_pastur_edges(q, sigma2)
            heights, _, _ = ax.hist(
                values, bins=60, density=True, color="#9ecae1", edgecolor="white", lw=0.3, label="sampled"
            )
            x = np.linspace(lo, hi, 400)[1:-1]
            ax.plot(
                x,
                theory.marchenko_pastur_pdf(x, q, sigma2),
                color="#d62728",
                lw=1.4,
                label="Marchenko–Pastur",
            )
            ax.axvline(hi, color="#d62728", ls="--", lw=0.8, label=rf"$\lambda_+$ = {hi:.3g}")
            ax.set_ylim(0, 1.3 * float(np.max(heights)))  # q = 1: the density diverges at 0
            ax.set_xlabel(r"eigenvalue $\lambda$ of $W^\top W$")
            ax.set_ylabel("density")
            ax.set_title(f"{label} (q = {q:.3g})")
            ax.legend(frameon=False)
        fig.suptitle(_wrap(title, width))
    return fig


def plot_slerp_kl(t: np.ndarray, kl: np.ndarray, fitted: np.ndarray, fit_text: str, title: str) -> Figure:
    """KL(Softmax(w) ‖ Softmax(SLERP(v, w, t))) over t for orthogonal pairs (thesis fig. 5.1):
    the pair mean, the 10–90 % band over pairs (``kl`` [pairs, T]) and the fitted cosine."""
    kl = np.asarray(kl)
    with mpl.rc_context(STYLE):
        fig = Figure(figsize=(5.4, 3.8), layout="constrained")
        ax = fig.subplots()
        ax.fill_between(
            t,
            np.quantile(kl, 0.1, axis=0),
            np.quantile(kl, 0.9, axis=0),
            color="#c6dbef",
            lw=0,
            label="10–90 % of pairs",
        )
        ax.plot(t, kl.mean(axis=0), color="#08519c", lw=1.8, label=f"mean over {len(kl)} pairs")
        ax.plot(t, fitted, color="#d62728", ls="--", lw=1.4, label=fit_text)
        ax.set_xlabel("interpolation time t")
        ax.set_ylabel(r"$D_{KL}$(Softmax(w) ‖ Softmax(SLERP(v, w, t)))")
        ax.legend(frameon=False)
        ax.grid(alpha=0.3)
        fig.suptitle(_wrap(title, 5.4))
    return fig


# --------------------------------------------------------------------------- writing


def save_figure(fig: Figure, paths: Iterable[str | os.PathLike], dpi: int = 120) -> None:
    """Write ``fig`` to every path (format from the suffix: .png, .svg, .pdf), atomically,
    without a creation date, so the same figure gives the same bytes."""
    with mpl.rc_context(STYLE):
        for path in paths:
            path = Path(path)
            fmt = path.suffix.lstrip(".")
            metadata = {"Date": None} if fmt in ("svg", "pdf") else None
            with io.atomic_path(path) as tmp:
                fig.savefig(tmp, format=fmt, dpi=dpi, metadata=metadata)
