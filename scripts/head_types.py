"""Rule head_types: each variant of a model's spectra, loaded in turn in one job (one model start)
→ its previous-token, duplicate-token and induction scores per layer × head on a seeded probe of
repeated random tokens (Parquet)."""

import gc
from pathlib import Path

import torch

from attnscope import headtypes, io, models

log = io.setup_script_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
p = snakemake.params
heads = p.heads


def variant_head_types(variant: str, path: str) -> None:
    """One variant's table; its model is freed when this returns."""
    loaded = models.load_model(Path(snakemake.input.manifest).parent, variant, **p.load)
    table = headtypes.measure_head_types(
        loaded.model, loaded.tokenizer, heads["probe_length"], heads["probe_count"], heads["seed"]
    )
    tokenizer = loaded.tokenizer
    meta = io.job_metadata(
        snakemake,
        io.job_digest(snakemake, loaded.variant, inputs=["manifest"], leave_out=["variants"]),
        model=loaded.name,
        variant=loaded.variant,
        heads=heads,
        bos=tokenizer.bos_token if tokenizer.bos_token_id is not None else None,  # the probe's first token
        notes=loaded.notes,
    )
    io.write_parquet(table.assign(model=loaded.name, variant=loaded.variant), path, meta)
    log.info(
        "head-type scores of %s/%s, highest: %s",
        loaded.name,
        loaded.variant,
        table[list(headtypes.SCORES)].max().round(3).to_dict(),
    )


for variant, path in zip(p.variants, snakemake.output.table, strict=True):
    variant_head_types(variant, path)
    gc.collect()
