"""Rule knockout: per prompt, the trained clue's log-probability with and without each knockout of
one edge set (every window; and the knocked-out greedy clue with knockout.greedy)."""

from pathlib import Path

import pandas as pd
import torch

from attnscope import io, knockout, models

log = io.setup_script_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
p = snakemake.params
knockouts = snakemake.wildcards.knockouts
prompt_table = pd.read_parquet(snakemake.input.prompts)
loaded = models.load_model(Path(snakemake.input.manifest).parent, "trained", **p.load)
log.info(
    "%s on %d prompts of %s (greedy: %s)", ", ".join(p.knockouts), len(prompt_table), loaded.name, p.greedy
)
rows = knockout.prompt_effects(
    loaded.model,
    loaded.tokenizer,
    prompt_table,
    pd.read_parquet(snakemake.input.clues),
    p.knockouts,
    greedy=p.greedy,
    max_new_tokens=p.generation["max_new_tokens"],
    clean_up=p.generation["clean_up"],
)
digest = io.job_digest(snakemake, knockouts, inputs=["clues"])
io.write_parquet(
    rows, snakemake.output.rows, io.job_metadata(snakemake, digest, model=loaded.name, knockouts=knockouts)
)
for variant, mean in rows.groupby("variant", sort=False)["delta_token"].mean().items():
    log.info("%s: mean Δ log-probability per clue token %.4g", variant, mean)
