"""Rule extract_attention: prompts (+ generated clues) + model variant → Zarr attention store."""

from pathlib import Path

import pandas as pd
import torch

from attnscope import architecture, attention, io, metrics, models
from attnscope.store import experiment_attrs

log = io.setup_script_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
p = snakemake.params
options = p.attention
prompt_table = pd.read_parquet(snakemake.input.prompts)
loaded = models.load_model(
    Path(snakemake.input.manifest).parent,
    snakemake.wildcards.variant,
    **p.load,
)
clues = pd.read_parquet(snakemake.input.clues) if options["append_clue"] else None
inputs = attention.prompt_inputs(prompt_table, loaded.tokenizer, clues, options["keep_heads"])
windows = architecture.sliding_windows(loaded.model.config)
for prompt in inputs:  # the metrics computed in the capture assume no sliding window cuts a row
    metrics.check_causal_rows(windows, len(prompt.annotation.input_ids), prompt.prompt_id)
kept = [prompt.target for prompt in inputs if prompt.keep_heads]
log.info(
    "capturing %d prompts with %s/%s on %s; per-head maps kept for %s",
    len(inputs),
    loaded.name,
    loaded.variant,
    loaded.device,
    kept or "none",
)
attrs = io.job_metadata(
    snakemake,
    io.job_digest(
        snakemake, snakemake.wildcards.variant, attention.STORE_VERSION, inputs=["prompts", "clues"]
    ),
    model=loaded.name,
    variant=loaded.variant,
    experiment=snakemake.wildcards.experiment,
    **experiment_attrs(prompt_table),
    append_clue=options["append_clue"],
    kernel=options["kernel"],
    share_prefix=options["share_prefix"],
    head_spectra=options["head_spectra"],
    device=str(loaded.device),
    dtype=p.load["dtype"],
    notes=loaded.notes,
)
counts = attention.extract(
    loaded.model,
    inputs,
    snakemake.output.store,
    attrs,
    kernel=options["kernel"],
    share_prefix=options["share_prefix"],
    head_spectra=options["head_spectra"],
)
log.info(
    "%s: %d prompts computed, %d resumed from a partial store; %.1f MB (attn %.1f MB, head_mean %.1f MB)",
    snakemake.output.store,
    counts["computed"],
    counts["resumed"],
    attention.store_bytes(snakemake.output.store) / 1e6,
    attention.store_bytes(snakemake.output.store, "attn") / 1e6,
    attention.store_bytes(snakemake.output.store, "head_mean") / 1e6,
)
