"""Rule clue_comparison: the generated clues of every variant of one experiment side by side
(CSV, Markdown), and an HTML page for the report with that table and each variant's clue
table (thesis tab. A.1-A.3)."""

import pandas as pd

from attnscope import io, report

log = io.setup_script_logging(snakemake.log[0])
wc, variants = snakemake.wildcards, snakemake.params.variants
clues = {v: pd.read_parquet(p) for v, p in zip(variants, snakemake.input.clues)}
comparison = report.clue_comparison(clues)
first = next(iter(clues.values()))
title = (
    f"{wc.model} · {wc.experiment}: generated clues ({first['category'].iloc[0]}, k = {first['k'].iloc[0]})"
)
io.write_text(comparison.to_csv(index=False), snakemake.output.csv)
io.write_text(f"# {title}, every variant\n\n" + io.markdown_table(comparison), snakemake.output.markdown)
sections = [("All variants", "One column per variant: its greedy clue for each target word.", comparison)]
for variant, path in zip(variants, snakemake.input.tables):
    sections.append(
        (
            f"{variant}",
            f"The clue table of {variant} (thesis tab. A.1–A.3 layout).",
            pd.read_csv(path, keep_default_na=False),
        )
    )
io.write_text(report.html_page(title, sections), snakemake.output.html)
log.info("compared %d variants on %d targets", len(variants), len(comparison))
