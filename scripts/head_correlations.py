"""Rule head_correlations: a model's head tables → Spearman's ρ over heads of every weight-side
column with every behaviour-side column, per variant, with bootstrap intervals (Parquet), and
their heatmaps."""

import pandas as pd

from attnscope import headtable, io, plots

log = io.setup_script_logging(snakemake.log[0])
tables = [pd.read_parquet(path) for path in snakemake.input.tables]
correlations = pd.concat(
    [
        headtable.weight_behaviour_correlations(table, seed=headtable.BOOTSTRAP_SEED).assign(
            model=table["model"].iloc[0], variant=table["variant"].iloc[0]
        )
        for table in tables
    ],
    ignore_index=True,
)
model = tables[0]["model"].iloc[0]
meta = io.job_metadata(
    snakemake,
    io.job_digest(snakemake, headtable.BOOTSTRAP_SEED, inputs=["tables"]),
    model=model,
    variants=list(correlations["variant"].unique()),
)
io.write_parquet(correlations, snakemake.output.table, meta)
title = (
    f"{model} · Spearman ρ over heads of weight-side (rows) and behaviour-side (columns) columns of "
    "the head table, 95% bootstrap interval over heads"
)
plots.save_figure(
    plots.plot_head_correlations(correlations, title),
    [snakemake.output.png, snakemake.output.svg],
    snakemake.params.dpi,
)
log.info("head correlations of %s: %d variants", model, len(tables))
