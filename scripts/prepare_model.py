"""Rule prepare_model: a model spec → results/models/{model}/ (weights cache + manifest)."""

from pathlib import Path

import torch

from attnscope import io, models

log = io.setup_script_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
manifest = models.prepare_model(
    snakemake.wildcards.model,
    snakemake.params.spec,
    Path(snakemake.output.manifest).parent,
    snakemake.input.get("tokenizer"),
)
log.info("prepared %s: %s", snakemake.wildcards.model, manifest)
