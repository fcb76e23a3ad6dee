"""Rule spectra_comparison (docs/spectra.md): trained + random spectra → learned-vs-random
table (Parquet + Markdown)."""

import pandas as pd

from attnscope import comparison, io

log = io.setup_script_logging(snakemake.log[0])
params = snakemake.params
wc = snakemake.wildcards
trained, random = pd.read_parquet(snakemake.input.trained), pd.read_parquet(snakemake.input.random)
table = comparison.compare_learned_random(trained, random)
meta = io.job_metadata(
    snakemake,
    io.job_digest(snakemake, inputs=["trained", "random"]),
    model=wc.model,
    random_variant=params.random_variant,
    notes=io.read_parquet_metadata(snakemake.input.trained)["notes"],
)
io.write_parquet(table, snakemake.output.table, meta)
title = f"{wc.model}: learned (trained) vs random ({params.random_variant}) weight spectra"
io.write_text(comparison.comparison_markdown(table, title, meta["notes"]), snakemake.output.markdown)
for row in table[table["row_type"] == "observation"].itertuples():
    log.info("%s %s: ratio %.3g, holds=%s", row.matrix, row.statement, row.ratio, row.holds)
