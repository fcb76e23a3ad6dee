"""Rule clue_table: generated clues → the thesis's clue table (A.1-A.3) as CSV and Markdown."""

import pandas as pd

from attnscope import io, report

log = io.setup_script_logging(snakemake.log[0])
clues = pd.read_parquet(snakemake.input.clues)
meta = io.read_parquet_metadata(snakemake.input.clues)
table = report.thesis_table(clues)
io.write_text(table.to_csv(index=False), snakemake.output.csv)
title = (
    f"Generated clues ({clues['k'].iloc[0]} shots), {meta['model']} / {meta['variant']}, "
    f"category {clues['category'].iloc[0]}"
)
io.write_text(f"# {title}\n\n" + io.markdown_table(table), snakemake.output.markdown)
log.info("wrote %d rows", len(table))
