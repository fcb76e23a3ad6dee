"""Rule knockout_figure: one experiment's knockout effects table → the figure of effect by layer
window × edge set."""

import pandas as pd

from attnscope import effects, io, plots

log = io.setup_script_logging(snakemake.log[0])
table = pd.read_parquet(snakemake.input.table)
wc = snakemake.wildcards
plots.save_figure(
    plots.plot_knockout_effects(table, effects.effects_title(wc.model, wc.experiment)),
    [snakemake.output.png, snakemake.output.svg],
    snakemake.params.dpi,
)
log.info("knockout effects figure of %s/%s: %d knockouts", wc.model, wc.experiment, len(table))
