"""Rule report: the Snakemake HTML report of this run (`snakemake --report`), written by a
nested Snakemake on the same Snakefile, working directory and config. It only reads the
finished results and Snakemake's metadata, so it runs without the workflow lock."""

import os
import subprocess
import sys
import tempfile
import time

import yaml

from attnscope import io

log = io.setup_script_logging(snakemake.log[0])
start = time.perf_counter()
with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="report-config-", delete=False) as handle:
    yaml.safe_dump(dict(snakemake.params.config), handle, sort_keys=False, allow_unicode=True)
command = [
    sys.executable,
    "-m",
    "snakemake",
    "--snakefile",
    str(snakemake.params.snakefile),
    "--directory",
    os.getcwd(),
    "--configfile",
    handle.name,
    "--workflow-profile",
    "none",
    "--nolock",
    "--report",
    snakemake.output[0],
    "report",
]
log.info("running %s", " ".join(command))
try:
    run = subprocess.run(command, capture_output=True, text=True)
finally:
    os.unlink(handle.name)
log.info("snakemake --report output:\n%s%s", run.stdout, run.stderr)
if run.returncode != 0 or not os.path.exists(snakemake.output[0]):
    raise RuntimeError(f"snakemake --report failed (exit {run.returncode}); see {snakemake.log[0]}")
log.info(
    "report written in %.1f s (%.1f MB)",
    time.perf_counter() - start,
    os.path.getsize(snakemake.output[0]) / 1e6,
)
