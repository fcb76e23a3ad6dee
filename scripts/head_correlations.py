"""Rule head_correlations: a model's head tables → Spearman's ρ over heads of every weight-side
column with every behaviour-side column, per variant, with bootstrap intervals (Parquet)."""

import pandas as pd

from attnscope import headtable, io

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
log.info("head correlations of %s: %d variants", model, len(tables))
