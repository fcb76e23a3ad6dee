"""The theory figures from seeded simulations: the Marchenko–Pastur density (thesis fig. 2.4)
and the SLERP–KL curve with its fitted cosine (fig. 5.1).

The simulations are this package's; the drawing is :mod:`attnscope.plots`'s. Not imported
by :mod:`attnscope.theory` itself, so the checks do not load matplotlib.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from attnscope import plots
from attnscope.theory.rmt import mp_figure_samples
from attnscope.theory.softmax import slerp_kl_curve


def theory_figures(
    seed: int, mp_shapes: Sequence[Sequence[int]], slerp_dim: int, slerp_pairs: int, slerp_length: float
) -> dict[str, Figure]:
    """``mp_density``: eigenvalue histograms of Gaussian matrices of ``mp_shapes`` against the MP
    density; ``slerp_kl``: the SLERP–KL curve of ``slerp_pairs`` orthogonal pairs with its fit."""
    mp_density = plots.plot_mp_density(
        mp_figure_samples(seed, mp_shapes),
        "Marchenko–Pastur law of WᵀW for Gaussian random matrices (thesis fig. 2.4)",
    )
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
        "mp_density": mp_density,
        "slerp_kl": plots.plot_slerp_kl(curve.t, curve.kl, fit.fitted, fit_text, title),
    }
