"""Attention-map figures: token- and word-level maps of several layers on one scale, the
embedding cosine beside attention, and the figure of each kind of `figures.maps`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from attnscope.mapview import ATTENTION_CMAP, BOUNDARY_COLOR, COSINE_CMAP, MAP_KINDS, MASK_COLOR, MapAxis
from attnscope.plots.common import STYLE, _wrap, resolve_layers

if TYPE_CHECKING:
    from attnscope.mapdata import PromptMaps

PASS_PANEL_INCHES = 3.2

THESIS_GRID_LAYERS = (1, 11, 21, 31)
"""The layers of the thesis's 2×2 grids (1-based, of Mistral-7B's 32; postprocess_images.ipynb)."""
THESIS_DEPTH = 32


def thesis_layers(num_layers: int) -> list[int]:
    """The thesis's grid layers mapped onto a model of ``num_layers`` layers (0-based): the same
    relative depth, so a 32-layer model gets exactly 0, 10, 20, 30."""
    return sorted(
        {round((layer - 1) / (THESIS_DEPTH - 1) * (num_layers - 1)) for layer in THESIS_GRID_LAYERS}
    )


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


def attention_figure(maps: PromptMaps, kind: str, options: Mapping[str, Any], header: str) -> Figure:
    """The figure of one ``figures.maps`` kind for one prompt's maps: token_grid / word_grid
    (``options["grid_layers"]`` in a 2×2 grid), cosine (the embedding cosine beside
    ``options["cosine_layers"]``), token_pass / word_pass (every layer), thesis_grid (the
    thesis's words and layers, each panel on its own scale)."""
    if kind not in MAP_KINDS:
        raise ValueError(f"no attention-map figure of kind {kind!r}; the kinds: {', '.join(MAP_KINDS)}")
    color_max = options["color_max"]
    region = "prompt + generated clue" if maps.clue is not None else "prompt only"
    if kind == "thesis_grid":
        layers = thesis_layers(maps.num_layers)
        title = (
            f"{header}\nthe thesis's word-level maps (its notebook's words, the prompt only), "
            "each panel its own scale"
        )
        return plot_attention_maps(
            maps.thesis_word_maps(layers), layers, maps.thesis_words, title, "word", per_panel=True
        )
    if kind == "cosine":
        layers = resolve_layers(options["cosine_layers"], maps.num_layers)
        return plot_cosine_and_attention(
            maps.cosine(),
            maps.token_maps(layers),
            layers,
            maps.tokens,
            f"{header}\ninput-embedding cosine vs attention (token level, {region})",
            maps.correlations(layers),
            color_max["token"],
        )
    level, extent = kind.split("_")
    if extent == "grid":
        layers = resolve_layers(options["grid_layers"], maps.num_layers)
        layout: dict[str, Any] = {"ncols": 2}
    else:
        layers = list(range(maps.num_layers))
        layout = {"ncols": options["pass_columns"], "panel_inches": PASS_PANEL_INCHES, "progress": True}
    if level == "token":
        data, axis, subtitle = maps.token_maps(layers), maps.tokens, "token level"
        colorbar = "attention (head mean)"
    else:
        data, axis, subtitle = maps.word_maps(layers), maps.words, "word level (sum over subword pairs)"
        colorbar = "attention summed over subword pairs"
    if extent == "pass":
        subtitle += ", every layer"
    title = f"{header}\n{subtitle}, {region}"
    return plot_attention_maps(
        data, layers, axis, title, level, color_max[level], colorbar_label=colorbar, **layout
    )
