"""Theory figures: the Marchenko–Pastur density and the SLERP–KL curve, drawn from the numbers that
:func:`attnscope.theory.figures.theory_figure_inputs` computes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from attnscope.plots.common import STYLE, _wrap


def plot_mp_density(
    panels: Sequence[tuple[str, np.ndarray, float, np.ndarray, np.ndarray, float]], title: str
) -> Figure:
    """Histograms of sampled eigenvalues against the Marchenko–Pastur density (thesis fig. 2.4).

    ``panels``: (label, eigenvalues of WᵀW/N, ratio q = M/N, x, the MP density at x, the upper
    bulk edge λ₊) per panel."""
    with mpl.rc_context(STYLE):
        width = 4.2 * len(panels)
        fig = Figure(figsize=(width, 3.4), layout="constrained")
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (label, values, q, x, density, upper) in zip(axes, panels):
            heights, _, _ = ax.hist(
                values, bins=60, density=True, color="#9ecae1", edgecolor="white", lw=0.3, label="sampled"
            )
            ax.plot(x, density, color="#d62728", lw=1.4, label="Marchenko–Pastur")
            ax.axvline(upper, color="#d62728", ls="--", lw=0.8, label=rf"$\lambda_+$ = {upper:.3g}")
            ax.set_ylim(0, 1.3 * float(np.max(heights)))  # q = 1: the density diverges at 0
            ax.set_xlabel(r"eigenvalue $\lambda$ of $W^\top W$")
            ax.set_ylabel("density")
            ax.set_title(f"{label} (q = {q:.3g})")
            ax.legend(frameon=False)
        fig.suptitle(_wrap(title, width))
    return fig


def plot_slerp_kl(
    t: np.ndarray,
    mean: np.ndarray,
    band: tuple[np.ndarray, np.ndarray],
    pairs: int,
    fitted: np.ndarray,
    fit_text: str,
    title: str,
) -> Figure:
    """KL(Softmax(w) ‖ Softmax(SLERP(v, w, t))) over t for orthogonal pairs (thesis fig. 5.1):
    the mean over ``pairs`` pairs, the 10–90 % ``band`` (low, high) over them and the fitted cosine."""
    with mpl.rc_context(STYLE):
        fig = Figure(figsize=(5.4, 3.8), layout="constrained")
        ax = fig.subplots()
        ax.fill_between(t, *band, color="#c6dbef", lw=0, label="10–90 % of pairs")
        ax.plot(t, mean, color="#08519c", lw=1.8, label=f"mean over {pairs} pairs")
        ax.plot(t, fitted, color="#d62728", ls="--", lw=1.4, label=fit_text)
        ax.set_xlabel("interpolation time t")
        ax.set_ylabel(r"$D_{KL}$(Softmax(w) ‖ Softmax(SLERP(v, w, t)))")
        ax.legend(frameon=False)
        ax.grid(alpha=0.3)
        fig.suptitle(_wrap(title, 5.4))
    return fig


THEORY_PLOTS = {"mp_density": plot_mp_density, "slerp_kl": plot_slerp_kl}
"""Figure stem → the function that draws it."""


def theory_figures(inputs: Mapping[str, Mapping[str, Any]]) -> dict[str, Figure]:
    """Each theory figure drawn from its keyword arguments (figure stem → arguments)."""
    return {name: THEORY_PLOTS[name](**arguments) for name, arguments in inputs.items()}
