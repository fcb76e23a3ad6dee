"""Rule rollout: an attention store → attention rollout with the residual (½A + ½I through the
layers, head-mean maps) of the weights and of the value-weighted maps per prompt × query unit ×
layer × source (Parquet), and a figure of each."""

from attnscope import io, plots, rollout
from attnscope.store import VALUE_WEIGHTED, WEIGHTS, open_store

log = io.setup_script_logging(snakemake.log[0])
store = open_store(snakemake.input.store).attrs
table = rollout.rollout_table(snakemake.input.store)
meta = io.job_metadata(
    snakemake,
    io.job_digest(snakemake, "rollout", inputs=["store"]),
    model=store["model"],
    variant=store["variant"],
    experiment=store["experiment"],
    notes=store["notes"],
)
io.write_parquet(table, snakemake.output.table, meta)
for weighting, prefix in ((WEIGHTS, ""), (VALUE_WEIGHTED, "value_")):
    maps = "head-mean maps" if weighting == WEIGHTS else "value-weighted head-mean maps"
    title = (
        f"{store['model']} · {store['variant']} · {store['experiment']} ({store['category']}, "
        f"k = {store['k']}) · attention rollout with the residual (½A + ½I through the layers, {maps})"
    )
    plots.save_figure(
        plots.plot_rollout(table[table["weighting"] == weighting], title),
        [snakemake.output[f"{prefix}png"], snakemake.output[f"{prefix}svg"]],
        snakemake.params.dpi,
    )
log.info("rollout of %d prompts × %d layers", table["prompt_index"].nunique(), table["layer"].nunique())
