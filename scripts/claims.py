"""Rule claims: the thesis-claims table of every selected model (Parquet, Markdown, and an
HTML page for the report)."""

import pandas as pd

from attnscope import claims, evidence, io, report

log = io.setup_script_logging(snakemake.log[0])
layout = evidence.evidence_layout(**snakemake.params.claims)
tables = []
for model, entry in layout.items():
    table = claims.evaluate(evidence.load_evidence(model, entry))
    for row in table.itertuples():
        log.info("%s %s: %s (%s)", model, row.claim, row.verdict, row.measured)
    tables.append(table)
table = pd.concat(tables, ignore_index=True)
# The layout names the inputs; their digests say what they hold (generation, attention, spectra settings).
thresholds = claims.Thresholds().__dict__
digest = io.config_digest(layout, evidence.input_digests(snakemake.input), thresholds)
meta = io.job_metadata(snakemake, digest, thresholds=thresholds)
io.write_parquet(table, snakemake.output.table, meta)
io.write_text(claims.claims_markdown(table), snakemake.output.markdown)
sections = [
    (
        f"{model} (experiment {rows['experiment'].iloc[0]})",
        ", ".join(f"{n} {v}" for v, n in rows["verdict"].value_counts().items()),
        rows.drop(columns=["model", "claim", "value", "experiment"]),
    )
    for model, rows in table.groupby("model", sort=False)
]
intro = (
    "Each qualitative claim of the thesis (ch. 7.2.2, 8, 9.1), the metric that tests it, the measured values "
    "and the verdict at the stated threshold; attention metrics are head-mean maps averaged over the prompts."
)
io.write_text(
    report.html_page("Thesis claims against the measurements", sections, intro), snakemake.output.html
)
