"""Rule build_prompts: clues + a model's tokenizer → results/prompts/{model}/{experiment}.parquet."""

from pathlib import Path

import pandas as pd

from attnscope import io, prepared, prompts

log = io.setup_script_logging(snakemake.log[0])
p = snakemake.params
model_dir = Path(snakemake.input.manifest).parent
tokenizer = prepared.load_tokenizer(model_dir, p.chat_template)
clues = pd.read_parquet(snakemake.input.clues)
manifest = prepared.read_manifest(model_dir)
table = prompts.build_prompts(
    clues,
    snakemake.wildcards.experiment,
    p.experiment,
    p.targets,
    tokenizer,
    prompts.PromptFormat(**p.prompt_format),
    max_length=manifest["max_position_embeddings"],
)
log.info("%d prompts, %d-%d tokens", len(table), table["n_tokens"].min(), table["n_tokens"].max())
digest = io.job_digest(snakemake, inputs=["clues", "manifest"])
io.write_parquet(
    table,
    snakemake.output.prompts,
    io.job_metadata(snakemake, digest, model=snakemake.wildcards.model),
)
