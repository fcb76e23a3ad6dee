"""Rule head_correlations_figure: a model's head correlations → their weight × behaviour heatmaps,
one row of panels per variant."""

import pandas as pd

from attnscope import io, plots

log = io.setup_script_logging(snakemake.log[0])
correlations = pd.read_parquet(snakemake.input.table)
model = snakemake.wildcards.model
title = (
    f"{model} · Spearman ρ over heads of weight-side (rows) and behaviour-side (columns) columns of "
    "the head table, 95% bootstrap interval over heads"
)
plots.save_figure(
    plots.plot_head_correlations(correlations, title),
    [snakemake.output.png, snakemake.output.svg],
    snakemake.params.dpi,
)
log.info("head correlations figure of %s: %d variants", model, correlations["variant"].nunique())
