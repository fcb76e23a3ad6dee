"""Rule rollout_figures: a store's rollout table → a figure of the rollout of the weights and one
of the value-weighted maps (plots.ROLLOUT_FIGURES)."""

import pandas as pd

from attnscope import io, plots
from attnscope.store import WEIGHTS

log = io.setup_script_logging(snakemake.log[0])
p = snakemake.params
table = pd.read_parquet(snakemake.input.table)
meta = io.read_parquet_metadata(snakemake.input.table)
for stem, weighting in plots.ROLLOUT_FIGURES.items():
    maps = "head-mean maps" if weighting == WEIGHTS else "value-weighted head-mean maps"
    title = (
        f"{meta['model']} · {meta['variant']} · {meta['experiment']} ({p.experiment['category']}, "
        f"k = {p.experiment['k']}) · attention rollout with the residual (½A + ½I through the layers, {maps})"
    )
    plots.save_figure(
        plots.plot_rollout(table[table["weighting"] == weighting], title),
        [snakemake.output[f"{stem}_png"], snakemake.output[f"{stem}_svg"]],
        p.dpi,
    )
log.info("rollout figures of %s/%s/%s", meta["model"], meta["variant"], meta["experiment"])
