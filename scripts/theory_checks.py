"""Rule theory_checks: Monte-Carlo checks of the thesis's formulas -> Parquet table + Markdown."""

import time

from attnscope import io, theory
from attnscope.verdicts import THEORY_VERDICTS

log = io.setup_script_logging(snakemake.log[0])
config = dict(snakemake.params.theory)
log.info("theory checks with %s", io.canonical_json(config))
start = time.perf_counter()
table = theory.run_checks(**config)
log.info(
    "%d rows in %.1f s; verdicts: %s",
    len(table),
    time.perf_counter() - start,
    table["verdict"].value_counts().to_dict(),
)
for row in table[table["verdict"] == THEORY_VERDICTS["thesis"][1]].itertuples():
    log.info(
        "thesis formula fails: %s (%s): predicted %.6g, estimated %.6g ± %.2g",
        row.check,
        row.equation,
        row.prediction,
        row.estimate,
        row.std_error,
    )
io.write_parquet(
    table,
    snakemake.output.table,
    metadata=io.job_metadata(snakemake, io.job_digest(snakemake), theory=config),
)
io.write_text(theory.checks_markdown(table), snakemake.output.markdown)
