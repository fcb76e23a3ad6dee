"""Rule claims: the thesis-claims table of every selected model with intervals and verdicts
(Parquet, Markdown, and an HTML page for the report), and its sensitivity table."""

import pandas as pd

from attnscope import claims, evidence, io

log = io.setup_script_logging(snakemake.log[0])
layout = evidence.evidence_layout(**snakemake.params.claims)
bands = snakemake.params.bands
tables, sensitivities, headers = [], [], {}
for model, entry in layout.items():
    ev = evidence.load_evidence(model, entry)
    table, sensitivity = claims.evaluate(ev, bands=bands)
    for row in table.itertuples():
        log.info("%s %s: %s, robust %s (%s)", model, row.claim, row.verdict, row.robust, row.measured)
    tables.append(table)
    sensitivities.append(sensitivity)
    headers[model] = claims.measured_on(ev)
table = pd.concat(tables, ignore_index=True)
sensitivity = pd.concat(sensitivities, ignore_index=True)
# The layout names the inputs; their digests say what they hold (generation, attention, spectra settings).
thresholds = claims.Thresholds().__dict__
digest = io.config_digest(layout, evidence.input_digests(snakemake.input), thresholds, bands)
meta = io.job_metadata(snakemake, digest, thresholds=thresholds, bands=bands)
io.write_parquet(table, snakemake.output.table, meta)
io.write_parquet(sensitivity, snakemake.output.sensitivity, meta)
io.write_text(claims.claims_markdown(table, sensitivity, headers), snakemake.output.markdown)
io.write_text(claims.claims_html(table, headers), snakemake.output.html)
