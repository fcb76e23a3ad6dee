"""Rule head_types: a model variant → previous-token, duplicate-token and induction scores per
layer × head on a seeded probe of repeated random tokens (Parquet)."""

from pathlib import Path

import torch

from attnscope import headtypes, io, models

log = io.setup_script_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
p = snakemake.params
heads = p.heads
loaded = models.load_model(Path(snakemake.input.manifest).parent, snakemake.wildcards.variant, **p.load)
table = headtypes.measure_head_types(
    loaded.model, loaded.tokenizer, heads["probe_length"], heads["probe_count"], heads["seed"]
)
tokenizer = loaded.tokenizer
meta = io.job_metadata(
    snakemake,
    io.job_digest(snakemake, loaded.variant, inputs=["manifest"]),
    model=loaded.name,
    variant=loaded.variant,
    heads=heads,
    bos=tokenizer.bos_token if tokenizer.bos_token_id is not None else None,  # the probe's first token
    notes=loaded.notes,
)
io.write_parquet(table.assign(model=loaded.name, variant=loaded.variant), snakemake.output.table, meta)
log.info(
    "head-type scores of %s/%s, highest: %s",
    loaded.name,
    loaded.variant,
    table[list(headtypes.SCORES)].max().round(3).to_dict(),
)
