"""The numbers of the theory figures, from seeded simulations: the Marchenko–Pastur density (thesis
fig. 2.4) and the SLERP–KL curve with its fitted cosine (fig. 5.1).

:func:`theory_figure_inputs` gives, per figure, the arrays and labels that
:func:`attnscope.plots.theory_figures` draws; this package imports no plotting code, and the
plots import no theory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnscope.theory.rmt import marchenko_pastur_curve, marchenko_pastur_edges, mp_figure_samples
from attnscope.theory.softmax import slerp_kl_curve


def theory_figure_inputs(
    seed: int, mp_shapes: Sequence[Sequence[int]], slerp_dim: int, slerp_pairs: int, slerp_length: float
) -> dict[str, dict[str, Any]]:
    """Figure stem → the keyword arguments of its plot. ``mp_density``: eigenvalues of Gaussian
    matrices of ``mp_shapes`` with the MP density and upper edge of each panel; ``slerp_kl``: the
    SLERP–KL curve of ``slerp_pairs`` orthogonal pairs (mean, 10–90 % band) with its cosine fit."""
    panels = []
    for label, eigenvalues, q, sigma2 in mp_figure_samples(seed, mp_shapes):
        x, density = marchenko_pastur_curve(q, sigma2)
        panels.append((label, eigenvalues, q, x, density, marchenko_pastur_edges(q, sigma2)[1]))
    curve = slerp_kl_curve(seed=seed, dim=slerp_dim, pairs=slerp_pairs, length=slerp_length)
    fit = curve.fit
    fit_text = (
        f"fit a·cos(πt/2 + b) + c: a = {float(fit.a):.3g}, b = {float(fit.b):.3g}, c = {float(fit.c):.3g}"
        f"\nrelative RMS residual {float(fit.rel_residual):.2%}"
    )
    title = (
        f"SLERP–KL for {slerp_pairs} orthogonal pairs, n = {slerp_dim}, "
        f"radius {slerp_length:g} (thesis fig. 5.1)"
    )
    return {
        "mp_density": {
            "panels": panels,
            "title": "Marchenko–Pastur law of WᵀW for Gaussian random matrices (thesis fig. 2.4)",
        },
        "slerp_kl": {
            "t": curve.t,
            "mean": curve.kl_mean,
            "band": (np.quantile(curve.kl, 0.1, axis=0), np.quantile(curve.kl, 0.9, axis=0)),
            "pairs": len(curve.kl),
            "fitted": fit.fitted,
            "fit_text": fit_text,
            "title": title,
        },
    }
