"""Rule spectra_figures: squared singular values of the random-init model (thesis fig. A.19),
learned attention (A.20) and MLP (A.21) matrices against random init with the
Marchenko–Pastur edge, and the base alignment Tr(W_qᵀW_k) per layer (A.22)."""

import pandas as pd

from attnscope import io, plots, spectrastore

log = io.setup_script_logging(snakemake.log[0])
inp, out, params = snakemake.input, snakemake.output, snakemake.params
model, random_variant = snakemake.wildcards.model, params.random_variant


def squared(path: str) -> dict:
    return {m: sv**2 for m, sv in spectrastore.read_singular_values(path).items()}


figures = plots.spectra_figures(
    trained=squared(inp.trained_sv),
    randoms={variant: squared(path) for variant, path in zip(params.random_seeds, inp.seeds_sv)},
    edges=pd.read_parquet(inp.trained).groupby("matrix")["lambda_plus"].first().to_dict(),
    alignment={
        "trained": pd.read_parquet(inp.trained_alignment),
        random_variant: pd.read_parquet(inp.random_alignment),
    },
    model=model,
    random_variant=random_variant,
    notes=io.read_parquet_metadata(inp.trained).get("notes", []),
)
for name, fig in figures.items():
    plots.save_figure(fig, [out[f"{name}_png"], out[f"{name}_svg"]], params.dpi)
log.info("spectra figures of %s (trained vs %s)", model, ", ".join(params.random_seeds))
