"""Rule knockout_effects: one experiment's knockouts → the effects table (Parquet, Markdown) and
the figure of effect by layer window × edge set."""

import pandas as pd

from attnscope import effects, io, plots

log = io.setup_script_logging(snakemake.log[0])
rows = pd.concat([pd.read_parquet(path) for path in snakemake.input.rows], ignore_index=True)
table = effects.effects_table(rows)
wc = snakemake.wildcards
title = f"{wc.model} · {wc.experiment} · knockout effects on the trained clue"
digest = io.job_digest(snakemake, inputs=["rows"])
io.write_parquet(table, snakemake.output.table, io.job_metadata(snakemake, digest))
io.write_text(effects.effects_markdown(table, title), snakemake.output.markdown)
plots.save_figure(
    plots.plot_knockout_effects(table, title),
    [snakemake.output.png, snakemake.output.svg],
    snakemake.params.dpi,
)
log.info("%d knockouts, %d prompts each", len(table), table["n_prompts"].max())
