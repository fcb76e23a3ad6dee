"""Rule theory_figures: the Marchenko–Pastur density (thesis fig. 2.4) and the SLERP–KL
curve with its fitted cosine (fig. 5.1), from seeded simulations."""

import numpy as np

from attnscope import io, plots, theory

log = io.setup_script_logging(snakemake.log[0])
params = snakemake.params
th = params.theory

rng = np.random.default_rng([th["seed"], 24])
samples = []
for rows, cols in params.mp_shapes:
    big, small = max(rows, cols), min(rows, cols)
    w = rng.standard_normal((big, small)) / np.sqrt(big)  # entries N(0, 1/N): WᵀW has the MP law with σ² = 1
    samples.append((f"{rows}×{cols}, entries N(0, 1/N)", np.linalg.eigvalsh(w.T @ w), small / big, 1.0))
fig = plots.plot_mp_density(
    samples, "Marchenko–Pastur law of WᵀW for Gaussian random matrices (thesis fig. 2.4)"
)
plots.save_figure(fig, [snakemake.output.mp_density_png, snakemake.output.mp_density_svg], params.dpi)

curve = theory.slerp_kl_curve(
    seed=th["seed"], dim=th["slerp_dim"], pairs=th["slerp_pairs"], length=th["slerp_length"]
)
fit = curve.fit
fit_text = (
    f"fit a·cos(πt/2 + b) + c: a = {float(fit.a):.3g}, b = {float(fit.b):.3g}, c = {float(fit.c):.3g}"
    f"\nrelative RMS residual {float(fit.rel_residual):.2%}"
)
title = (
    f"SLERP–KL for {th['slerp_pairs']} orthogonal pairs, n = {th['slerp_dim']}, "
    f"radius {th['slerp_length']:g} (thesis fig. 5.1)"
)
fig = plots.plot_slerp_kl(curve.t, curve.kl, fit.fitted, fit_text, title)
plots.save_figure(fig, [snakemake.output.slerp_kl_png, snakemake.output.slerp_kl_svg], params.dpi)
log.info("MP shapes %s; SLERP fit residual %.3g", params.mp_shapes, float(fit.rel_residual))
