"""Theory figures: the Marchenko–Pastur density and the SLERP–KL curve."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from attnscope.plots.common import STYLE, _wrap


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
