"""Publication figures: pure functions from arrays and tables to matplotlib figures.

Every ``plot_*`` function takes numbers (NumPy arrays, DataFrames) and returns a
:class:`matplotlib.figure.Figure` built with the object-oriented API (no pyplot state,
Agg canvas), so figures are cheap to build in a loop and safe in worker processes;
:func:`save_figure` writes one as PNG and SVG. Which thesis figure each function
reproduces is in its docstring and in ``docs/figures.md``. The modules: :mod:`.common`
(style, colours, writing), :mod:`.maps` (attention maps), :mod:`.curves` (metric curves),
:mod:`.spectra` (weight spectra), :mod:`.theory` (the theory figures), :mod:`.heads` (head types,
attention rollout, head-table correlations), :mod:`.knockout` (knockout effects).

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

import importlib
from typing import Any

_HOME = {
    "stems": ("HEAD_FIGURES", "KNOCKOUT_FIGURE", "ROLLOUT_FIGURES", "SPECTRA_FIGURES", "THEORY_FIGURES"),
    "common": ("STYLE", "resolve_layers", "save_figure", "variant_color"),
    "curves": ("METRIC_LABELS", "plot_metric_curves"),
    "heads": ("plot_head_correlations", "plot_head_types", "plot_rollout"),
    "knockout": ("plot_knockout_effects",),
    "maps": (
        "attention_figure",
        "causal_masked",
        "plot_attention_maps",
        "plot_cosine_and_attention",
        "thesis_layers",
    ),
    "spectra": ("plot_base_alignment", "plot_squared_singular_values", "spectra_figures"),
    "theory": ("plot_mp_density", "plot_slerp_kl", "theory_figures"),
}
"""Each public name's module. They load on first use (PEP 562), so the rule files read the
figure stems (:mod:`.stems`) without importing matplotlib when the workflow is parsed."""
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = sorted(_MODULE_OF)
