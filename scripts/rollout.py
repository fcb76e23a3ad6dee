"""Rule rollout: an attention store → attention rollout with the residual (½A + ½I through the
layers, head-mean maps) of the weights and of the value-weighted maps per prompt × query unit ×
layer × source (Parquet)."""

from attnscope import io, rollout
from attnscope.store import open_store

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
log.info("rollout of %d prompts × %d layers", table["prompt_index"].nunique(), table["layer"].nunique())
