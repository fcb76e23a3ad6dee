"""Weight-spectra figures: squared singular values against random init and the MP edge, and
the base alignment Tr(W_qᵀW_k)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from attnscope.matrices import ATTENTION_TYPES, MLP_TYPES
from attnscope.plots.common import STYLE, _wrap, variant_color
from attnscope.plots.stems import SPECTRA_FIGURES


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
    [layer, i]; ``reference`` [seed × layer, i] (the random-init models) is drawn in grey
    behind as the band of its rows: the range over every layer of every init seed."""
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
                ax.fill_between(
                    index, ref.min(axis=0), ref.max(axis=0), color="#c8c8c8", lw=0, label=reference_label
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


def spectra_figures(
    trained: Mapping[str, np.ndarray],
    randoms: Mapping[str, Mapping[str, np.ndarray]],
    edges: Mapping[str, float],
    alignment: Mapping[str, pd.DataFrame],
    model: str,
    random_variant: str,
    notes: Sequence[str],
) -> dict[str, Figure]:
    """The four spectra figures of a model, by file stem (:data:`SPECTRA_FIGURES`): squared
    singular values at random init (thesis fig. A.19, ``random_variant``), learned attention (A.20)
    and MLP (A.21) matrices against the band of every random init seed, and the base alignment
    (A.22). ``trained`` and each of ``randoms`` (variant → its matrices) map a matrix type to its
    σ² [layer, i]."""

    def pick(values: Mapping[str, np.ndarray], matrices: Sequence[str]) -> dict[str, np.ndarray]:
        return {m: values[m] for m in matrices if m in values}

    note = f" ({'; '.join(notes)})" if notes else ""
    random = randoms[random_variant]
    band = {m: np.concatenate([np.asarray(r[m]) for r in randoms.values()]) for m in random}
    seeds = f"{len(randoms)} init seed{'s' if len(randoms) > 1 else ''}"
    band_label = f"random init ({seeds} × layers: range)"
    figures = (
        plot_squared_singular_values(
            pick(random, ATTENTION_TYPES + MLP_TYPES),
            edges,
            f"{model} · {random_variant}: squared singular values at random init, every layer "
            "(thesis fig. A.19)",
            label=random_variant,
        ),
        *(
            plot_squared_singular_values(
                pick(trained, types),
                edges,
                f"{model} · trained vs random init ({seeds}): {what} (thesis fig. {figure}){note}",
                reference=pick(band, types),
                reference_label=band_label,
            )
            for types, what, figure in (
                (ATTENTION_TYPES, "attention weights W_q, W_k, W_v, W_o", "A.20"),
                (MLP_TYPES, "MLP weights W_gate, W_up, W_down", "A.21"),
            )
        ),
        plot_base_alignment(
            alignment, f"{model}: base alignment Tr(W_qᵀW_k) against random init (thesis fig. A.22){note}"
        ),
    )
    return dict(zip(SPECTRA_FIGURES, figures, strict=True))
