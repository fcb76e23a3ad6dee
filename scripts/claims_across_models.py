"""Rule claims_across_models: the claims table of every selected model side by side, one row per
claim × model, with whether the models agree (Parquet, Markdown, and an HTML page for the report)."""

import pandas as pd

from attnscope import io
from attnscope.claims import across

log = io.setup_script_logging(snakemake.log[0])
table = pd.read_parquet(snakemake.input.table)
rows = across.across_models(table)
for claim, agree in rows.drop_duplicates("claim")[["claim", "models_agree"]].itertuples(index=False):
    log.info("%s: models agree %s", claim, agree)
meta = io.job_metadata(snakemake, io.job_digest(snakemake, across.ACROSS_COLUMNS, inputs=["table"]))
io.write_parquet(rows, snakemake.output.table, meta)
io.write_text(across.across_markdown(rows), snakemake.output.markdown)
io.write_text(across.across_html(rows), snakemake.output.html)
