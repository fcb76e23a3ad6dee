"""Rule metric_curves: per-layer metrics of every variant of one experiment, one line per
variant with the spread across prompts (head-mean maps; the summaries of attention_metrics)."""

import pandas as pd

from attnscope import io, plots

log = io.setup_script_logging(snakemake.log[0])
params = snakemake.params
frames = []
for variant, path in zip(params.variants, snakemake.input.summaries):
    summary = pd.read_parquet(path)
    frames.append(summary[summary["maps"] == "head_mean"].assign(variant=variant))
summary = pd.concat(frames, ignore_index=True)
experiment = params.experiment
title = (
    f"{snakemake.wildcards.model} · {snakemake.wildcards.experiment} ({experiment['category']}, "
    f"k = {experiment['k']}) · head-mean maps by layer, variants {', '.join(params.variants)}"
)
fig = plots.plot_metric_curves(summary, params.metrics, title)
plots.save_figure(fig, [snakemake.output.png, snakemake.output.svg], params.dpi)
log.info("metric curves of %d variants × %d metrics", len(params.variants), len(params.metrics))
