"""Rule import_clues: clue files → results/data/clues.parquet + import_report.json."""

from attnscope import data, io

log = io.setup_script_logging(snakemake.log[0])
clue_files = snakemake.params.clue_files
clues, report = data.import_clues(clue_files)
digest = io.job_digest(snakemake, [io.file_digest(path) for path in snakemake.input])
report["config_digest"] = digest
for rejection in report["rejections"]:
    log.warning(
        "rejected %s:%s (%s): %s",
        rejection["file"],
        rejection["line"],
        rejection["reason"],
        rejection["text"],
    )
log.info(
    "accepted %d clues in %d categories, rejected %d rows",
    len(clues),
    len(report["categories"]),
    report["rejected"],
)
io.write_parquet(clues, snakemake.output.clues, io.job_metadata(snakemake, digest))
io.write_json(report, snakemake.output.report)
