"""Rule spectra_figures: squared singular values of the random-init model (thesis fig. A.19),
learned attention (A.20) and MLP (A.21) matrices against random init with the
Marchenko–Pastur edge, and the base alignment Tr(W_qᵀW_k) per layer (A.22)."""

import pandas as pd

from attnscope import io, plots, spectra

log = io.setup_script_logging(snakemake.log[0])
inp, out, params = snakemake.input, snakemake.output, snakemake.params
model, random_variant = snakemake.wildcards.model, params.random_variant

trained = {m: sv**2 for m, sv in spectra.read_singular_values(inp.trained_sv).items()}
random = {m: sv**2 for m, sv in spectra.read_singular_values(inp.random_sv).items()}
table = pd.read_parquet(inp.trained)
edges = table.groupby("matrix")["lambda_plus"].first().to_dict()
notes = io.read_parquet_metadata(inp.trained).get("notes", [])
note = f" ({'; '.join(notes)})" if notes else ""


def save(fig, prefix):
    plots.save_figure(fig, [out[f"{prefix}_png"], out[f"{prefix}_svg"]], params.dpi)


def pick(values, matrices):
    return {m: values[m] for m in matrices if m in values}


attention_types, mlp_types = ("q", "k", "v", "o"), ("gate", "up", "down")
save(
    plots.plot_squared_singular_values(
        pick(random, attention_types + mlp_types),
        edges,
        f"{model} · {random_variant}: squared singular values at random init, every layer (thesis fig. A.19)",
        label=random_variant,
    ),
    "random",
)
save(
    plots.plot_squared_singular_values(
        pick(trained, attention_types),
        edges,
        f"{model} · trained vs {random_variant}: attention weights W_q, W_k, W_v, W_o "
        f"(thesis fig. A.20){note}",
        reference=pick(random, attention_types),
        reference_label=random_variant,
    ),
    "attention",
)
save(
    plots.plot_squared_singular_values(
        pick(trained, mlp_types),
        edges,
        f"{model} · trained vs {random_variant}: MLP weights W_gate, W_up, W_down (thesis fig. A.21){note}",
        reference=pick(random, mlp_types),
        reference_label=random_variant,
    ),
    "mlp",
)
alignment = {
    "trained": pd.read_parquet(inp.trained_alignment),
    random_variant: pd.read_parquet(inp.random_alignment),
}
save(
    plots.plot_base_alignment(
        alignment, f"{model}: base alignment Tr(W_qᵀW_k) against random init (thesis fig. A.22){note}"
    ),
    "alignment",
)
log.info("spectra figures of %s (trained vs %s)", model, random_variant)
