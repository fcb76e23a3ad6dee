"""Rules metric_curves and metric_curves_across_models: per-layer metrics of every variant of one
experiment (its shot-seed replicates pooled), one line per variant with the 95 % interval of the
mean (targets resampled; head-mean maps of the attention_metrics tables), one row of panels per model."""

import pandas as pd

from attnscope import io, metrics, plots
from attnscope.store import HEAD_MEAN

log = io.setup_script_logging(snakemake.log[0])
params = snakemake.params
frames = []
for (model, variant, experiment), path in zip(params.tables, snakemake.input.metrics):
    table = pd.read_parquet(path)
    frames.append(
        table[table["head"] == HEAD_MEAN].assign(model=model, variant=variant, experiment=experiment)
    )
rows = pd.concat(frames, ignore_index=True)
models = list(dict.fromkeys(model for model, _, _ in params.tables))
variants = list(dict.fromkeys(variant for _, variant, _ in params.tables))
summary = pd.concat(
    [
        metrics.layer_intervals(of_curve, params.metrics).assign(model=model, variant=variant)
        for (model, variant), of_curve in rows.groupby(["model", "variant"], sort=False)
    ],
    ignore_index=True,
)
experiment = params.experiment
seeds = rows["experiment"].nunique()
title = (
    f"{', '.join(models)} · {snakemake.wildcards.experiment} ({experiment['category']}, "
    f"k = {experiment['k']}, {seeds} shot seed{'s' if seeds > 1 else ''}) · head-mean maps by layer, "
    f"variants {', '.join(variants)}"
)
fig = plots.plot_metric_curves(
    summary, params.metrics, title, band=("low", "high"), band_label="95 % interval of the mean"
)
plots.save_figure(fig, [snakemake.output.png, snakemake.output.svg], params.dpi)
log.info(
    "metric curves of %d models × %d variants × %d metrics, %d replicates",
    len(models),
    len(variants),
    len(params.metrics),
    seeds,
)
