"""The figures' file stems and their labels in the report, without matplotlib: the rule files
read them when the workflow is parsed, the plotting modules when they name what they draw."""

from __future__ import annotations

from attnscope.store import VALUE_WEIGHTED, WEIGHTS

SPECTRA_FIGURES = {
    "spectra_random": "A.19 random init",
    "spectra_attention": "A.20 W_q, W_k, W_v, W_o",
    "spectra_mlp": "A.21 MLP",
    "base_alignment": "A.22 Tr(W_qᵀW_k)",
}
"""The figures of :func:`attnscope.plots.spectra_figures`: file stem (also its caption's name in
report/) → thesis figure."""
THEORY_FIGURES = {"mp_density": "2.4 Marchenko–Pastur", "slerp_kl": "5.1 SLERP–KL"}
"""The figures of :func:`attnscope.plots.theory_figures`: file stem → thesis figure."""
HEAD_FIGURES = {
    "head_types": "head types",
    "rollout": "attention rollout",
    "rollout_value": "value-weighted rollout",
    "head_correlations": "weights vs behaviour of heads",
}
"""The heads stage's figures: file stem (also its caption's name in report/) → the figure's label
in the report."""
ROLLOUT_FIGURES = {"rollout": WEIGHTS, "rollout_value": VALUE_WEIGHTED}
"""The rollout figures of a store: file stem → the maps rolled out (the ``weighting`` column of
:func:`attnscope.rollout.rollout_table`)."""
KNOCKOUT_FIGURE = "knockout_effects"
"""The knockout effects figure's file stem in its rule's outputs (also its caption's name in report/)."""
