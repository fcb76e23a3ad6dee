"""Rule attention_metrics: Zarr attention store → metrics per prompt × layer × head, per-layer
summary, and the head-mean metrics per prompt × layer × analysis choice, of the weights and of
the value-weighted maps, assembled from the arrays the capture computed (no map is read)."""

from attnscope import choices, io, metrics
from attnscope.store import VALUE_WEIGHTED, open_store

log = io.setup_script_logging(snakemake.log[0])
epsilon = snakemake.params.epsilon
store = open_store(snakemake.input.store).attrs
table = metrics.metrics_table(snakemake.input.store, epsilon)
summary = metrics.summarize(table)
meta = io.job_metadata(
    snakemake,
    io.job_digest(snakemake, inputs=["store"]),
    model=store["model"],
    variant=store["variant"],
    experiment=store["experiment"],
    epsilon=epsilon,
    notes=store["notes"],
)
io.write_parquet(table, snakemake.output.metrics, meta)
io.write_parquet(summary, snakemake.output.summary, meta)
io.write_parquet(choices.choices_table(snakemake.input.store), snakemake.output.choices, meta)
value_metrics = metrics.metrics_table(snakemake.input.store, epsilon, VALUE_WEIGHTED)
io.write_parquet(value_metrics, snakemake.output.value_metrics, meta)
value_choices = choices.choices_table(snakemake.input.store, VALUE_WEIGHTED)
io.write_parquet(value_choices, snakemake.output.value_choices, meta)
title = f"Attention metrics, {store['model']} / {store['variant']}, {store['experiment']}"
io.write_text(metrics.summary_markdown(summary, title), snakemake.output.markdown)
log.info(
    "%d rows (%d prompts), summary of %d layers",
    len(table),
    table["prompt_index"].nunique(),
    table["layer"].nunique(),
)
