"""Rule generate_clues: prompts + model variant → generated clues, scores and timings."""

from pathlib import Path

import pandas as pd
import torch

from attnscope import generation, io, models, prompts

log = io.setup_script_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
p = snakemake.params
prompt_table = pd.read_parquet(snakemake.input.prompts)
model_dir = Path(snakemake.input.manifest).parent
# Before loading the weights: a prompt too long for the model fails in seconds.
generation.check_context(prompt_table, p.generation["max_new_tokens"], models.read_manifest(model_dir))
loaded = models.load_model(
    model_dir,
    snakemake.wildcards.variant,
    **p.load,
)
log.info(
    "generating %d clues with %s/%s on %s", len(prompt_table), loaded.name, loaded.variant, loaded.device
)
results = generation.generate(
    loaded.model,
    loaded.tokenizer,
    list(prompt_table["input_ids"]),
    p.generation["max_new_tokens"],
    p.generation["batch_size"],
    end_marker=prompts.table_format(prompt_table).end_marker,
    clean_up=p.generation["clean_up"],
)
clues = generation.clue_table(prompt_table, results)
summary = generation.summarize(clues)
digest = io.job_digest(snakemake, snakemake.wildcards.variant, inputs=["prompts"])
meta = io.job_metadata(snakemake, digest, model=loaded.name, variant=loaded.variant, notes=loaded.notes)
io.write_parquet(clues, snakemake.output.clues, meta)
io.write_json({**meta, **summary}, snakemake.output.summary)
timing = pd.DataFrame(
    {
        "prompt_id": clues["prompt_id"],
        "target": clues["target"],
        "seconds": [round(r.seconds, 3) for r in results],
    }
)
io.write_text(timing.to_csv(sep="\t", index=False), snakemake.output.timing)
log.info("summary: %s", summary)
