"""Rule head_table: a model variant's QK circuits, head types and metrics on the claims'
experiments → one row per layer × head with its OV-circuit norms (computed here from the weights)."""

from pathlib import Path

import pandas as pd
import torch

from attnscope import circuits, headtable, io, models

log = io.setup_script_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
loaded = models.load_model(
    Path(snakemake.input.manifest).parent, snakemake.wildcards.variant, **snakemake.params.load
)
ov = circuits.ov_circuits(loaded.model)
table = headtable.head_table(
    pd.read_parquet(snakemake.input.qk),
    ov,
    pd.read_parquet(snakemake.input.types),
    [pd.read_parquet(path) for path in snakemake.input.metrics],
)
meta = io.job_metadata(
    snakemake,
    io.job_digest(snakemake, loaded.variant, headtable.FORM, inputs=["manifest", "qk", "types", "metrics"]),
    model=loaded.name,
    variant=loaded.variant,
    form=headtable.FORM,
    metrics=list(snakemake.input.metrics),
    notes=loaded.notes,
)
io.write_parquet(table.assign(model=loaded.name, variant=loaded.variant), snakemake.output.table, meta)
log.info(
    "head table of %s/%s: %d heads, %d prompts",
    loaded.name,
    loaded.variant,
    len(table),
    table["n_prompts"].max(),
)
