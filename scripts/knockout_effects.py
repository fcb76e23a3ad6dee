"""Rule knockout_effects: one experiment's knockouts → the effects table (Parquet, Markdown)."""

import pandas as pd

from attnscope import effects, io

log = io.setup_script_logging(snakemake.log[0])
rows = pd.concat([pd.read_parquet(path) for path in snakemake.input.rows], ignore_index=True)
table = effects.effects_table(rows)
wc = snakemake.wildcards
digest = io.job_digest(snakemake, inputs=["rows"])
io.write_parquet(table, snakemake.output.table, io.job_metadata(snakemake, digest))
io.write_text(
    effects.effects_markdown(table, effects.effects_title(wc.model, wc.experiment)), snakemake.output.markdown
)
log.info("%d knockouts, %d prompts each", len(table), table["n_prompts"].max())
