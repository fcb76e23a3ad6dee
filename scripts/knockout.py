"""Rule knockout: per prompt, the trained clue's log-probability with and without one knockout
(and the knocked-out greedy clue with knockout.greedy)."""

from pathlib import Path

import pandas as pd
import torch

from attnscope import io, knockout, models

log = io.setup_script_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
p = snakemake.params
variant = snakemake.wildcards.variant
prompt_table = pd.read_parquet(snakemake.input.prompts)
loaded = models.load_model(Path(snakemake.input.manifest).parent, "trained", **p.load)
log.info("knockout %s on %d prompts of %s (greedy: %s)", variant, len(prompt_table), loaded.name, p.greedy)
rows = knockout.prompt_effects(
    loaded.model,
    loaded.tokenizer,
    prompt_table,
    pd.read_parquet(snakemake.input.clues),
    variant,
    greedy=p.greedy,
    max_new_tokens=p.generation["max_new_tokens"],
    clean_up=p.generation["clean_up"],
)
digest = io.job_digest(snakemake, variant, inputs=["clues"])
io.write_parquet(
    rows, snakemake.output.rows, io.job_metadata(snakemake, digest, model=loaded.name, variant=variant)
)
log.info("mean Δ log-probability per clue token: %.4g", rows["delta_token"].mean())
