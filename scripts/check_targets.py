"""Rule check_targets: one experiment's targets against the clue files → a JSON report.

A target without a clue is normal (the clue files are the shot pool); a near miss of a
clue word is logged as a warning (a likely typo), never refused.
"""

import json
from pathlib import Path

import pandas as pd

from attnscope import data, io

log = io.setup_script_logging(snakemake.log[0])
p = snakemake.params
clues = pd.read_parquet(snakemake.input.clues)
rejections = json.loads(Path(snakemake.input.report).read_text(encoding="utf-8"))["rejections"]
report = data.target_report(clues, rejections, p.category, p.targets)
log.info(
    "%s: %d targets, %d with a reference clue, %d without",
    snakemake.wildcards.experiment,
    report["targets"],
    report["with_reference"],
    len(report["without_reference"]),
)
for warning in report["warnings"]:
    log.warning("%s: %s", snakemake.wildcards.experiment, warning)
digest = io.job_digest(snakemake, inputs=["clues"])
io.write_json(
    io.job_metadata(snakemake, digest, experiment=snakemake.wildcards.experiment, **report),
    snakemake.output.report,
)
