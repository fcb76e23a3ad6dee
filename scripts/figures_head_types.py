"""Rule head_types_figure: a model variant's head-type scores → their layer × head heatmaps, a dot
on each head typed at heads.threshold."""

import pandas as pd

from attnscope import io, plots

log = io.setup_script_logging(snakemake.log[0])
p = snakemake.params
table = pd.read_parquet(snakemake.input.table)
meta = io.read_parquet_metadata(snakemake.input.table)
probe = meta["heads"]
bos = f"{meta['bos']} + " if meta["bos"] is not None else ""
title = (
    f"{meta['model']} · {meta['variant']} · head types on {probe['probe_count']} probes of "
    f"{bos}2 × {probe['probe_length']} repeated random tokens (seed {probe['seed']})"
)
plots.save_figure(
    plots.plot_head_types(table, p.heads["threshold"], title),
    [snakemake.output.png, snakemake.output.svg],
    p.dpi,
)
log.info("head types of %s/%s at threshold %g", meta["model"], meta["variant"], p.heads["threshold"])
