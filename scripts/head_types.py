"""Rule head_types: a model variant → previous-token, duplicate-token and induction scores per
layer × head on a seeded probe of repeated random tokens (Parquet), and their layer × head heatmaps."""

from pathlib import Path

import torch

from attnscope import headtypes, io, models, plots

log = io.setup_script_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
p = snakemake.params
heads = p.heads
loaded = models.load_model(Path(snakemake.input.manifest).parent, snakemake.wildcards.variant, **p.load)
table = headtypes.measure_head_types(
    loaded.model,
    loaded.tokenizer,
    heads["probe_length"],
    heads["probe_count"],
    heads["seed"],
    heads["threshold"],
)
meta = io.job_metadata(
    snakemake,
    io.job_digest(snakemake, loaded.variant, inputs=["manifest"]),
    model=loaded.name,
    variant=loaded.variant,
    heads=heads,
    bos=loaded.tokenizer.bos_token,
    notes=loaded.notes,
)
io.write_parquet(table.assign(model=loaded.name, variant=loaded.variant), snakemake.output.table, meta)
bos = f"{loaded.tokenizer.bos_token} + " if loaded.tokenizer.bos_token_id is not None else ""
title = (
    f"{loaded.name} · {loaded.variant} · head types on {heads['probe_count']} probes of "
    f"{bos}2 × {heads['probe_length']} repeated random tokens (seed {heads['seed']})"
)
fig = plots.plot_head_types(table, heads["threshold"], title)
plots.save_figure(fig, [snakemake.output.png, snakemake.output.svg], p.dpi)
log.info("head types of %s/%s: %s", loaded.name, loaded.variant, table["head_type"].value_counts().to_dict())
