"""Rule head_table: a model variant's QK and OV circuits (from weight_spectra), head types and
metrics (weights and value-weighted maps) on the claims' experiments → one row per layer × head,
typed at heads.threshold."""

import pandas as pd

from attnscope import headtable, io

log = io.setup_script_logging(snakemake.log[0])
wc = snakemake.wildcards
table = headtable.head_table(
    pd.read_parquet(snakemake.input.qk),
    pd.read_parquet(snakemake.input.ov),
    pd.read_parquet(snakemake.input.types),
    [pd.read_parquet(path) for path in snakemake.input.metrics],
    [pd.read_parquet(path) for path in snakemake.input.value_metrics],
    snakemake.params.threshold,
)
meta = io.job_metadata(
    snakemake,
    io.job_digest(
        snakemake, wc.variant, headtable.FORM, inputs=["qk", "ov", "types", "metrics", "value_metrics"]
    ),
    model=wc.model,
    variant=wc.variant,
    form=headtable.FORM,
    metrics=list(snakemake.input.metrics),
)
io.write_parquet(table.assign(model=wc.model, variant=wc.variant), snakemake.output.table, meta)
log.info(
    "head table of %s/%s: %d heads, %d prompts", wc.model, wc.variant, len(table), table["n_prompts"].max()
)
