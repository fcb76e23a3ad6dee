"""What every figure shares: the style, colours, layer selection, title wrapping and writing."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterable
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from attnscope import io

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


def _wrap(title: str, width_inches: float, fontsize: float = 10.0) -> str:
    """``title`` wrapped to the figure width (each of its lines separately)."""
    chars = max(20, int(width_inches * 72 / (fontsize * 0.55)))
    return "\n".join(textwrap.fill(line, chars) for line in title.split("\n"))


def save_figure(fig: Figure, paths: Iterable[str | os.PathLike], dpi: int = 120) -> None:
    """Write ``fig`` to every path (format from the suffix: .png, .svg, .pdf), atomically,
    without a creation date, so the same figure gives the same bytes.

    The figure's layout (constrained) is computed once, when the PNG (else the first file) is
    written, and every other format draws that layout: matplotlib would otherwise lay the
    figure out again, an extra full draw, for each file."""
    ordered = sorted((Path(path) for path in paths), key=lambda path: path.suffix != ".png")
    engine = fig.get_layout_engine()
    try:
        with mpl.rc_context(STYLE):
            for path in ordered:
                fmt = path.suffix.lstrip(".")
                metadata = {"Date": None} if fmt in ("svg", "pdf") else None
                with io.atomic_path(path) as tmp:
                    fig.savefig(tmp, format=fmt, dpi=dpi, metadata=metadata)
                fig.set_layout_engine(None)  # the axes keep the positions just computed
    finally:
        fig.set_layout_engine(engine)
