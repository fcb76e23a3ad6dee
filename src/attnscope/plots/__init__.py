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

from attnscope.plots.common import STYLE, resolve_layers, save_figure, variant_color
from attnscope.plots.curves import METRIC_LABELS, plot_metric_curves
from attnscope.plots.heads import (
    HEAD_FIGURES,
    ROLLOUT_FIGURES,
    plot_head_correlations,
    plot_head_types,
    plot_rollout,
)
from attnscope.plots.knockout import KNOCKOUT_FIGURE, plot_knockout_effects
from attnscope.plots.maps import (
    attention_figure,
    causal_masked,
    plot_attention_maps,
    plot_cosine_and_attention,
    thesis_layers,
)
from attnscope.plots.spectra import (
    SPECTRA_FIGURES,
    plot_base_alignment,
    plot_squared_singular_values,
    spectra_figures,
)
from attnscope.plots.theory import plot_mp_density, plot_slerp_kl

__all__ = [
    "HEAD_FIGURES",
    "KNOCKOUT_FIGURE",
    "METRIC_LABELS",
    "ROLLOUT_FIGURES",
    "SPECTRA_FIGURES",
    "STYLE",
    "attention_figure",
    "causal_masked",
    "plot_attention_maps",
    "plot_base_alignment",
    "plot_cosine_and_attention",
    "plot_head_correlations",
    "plot_head_types",
    "plot_knockout_effects",
    "plot_metric_curves",
    "plot_mp_density",
    "plot_rollout",
    "plot_slerp_kl",
    "plot_squared_singular_values",
    "resolve_layers",
    "save_figure",
    "spectra_figures",
    "thesis_layers",
    "variant_color",
]
