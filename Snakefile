"""attnscope: attention maps, weight spectra and ablations of an instruction-tuned LLM
on few-shot crossword-clue generation (the thesis's chapter 8 as a cached DAG).

    snakemake --cores 2                 # the default run (config.yaml)
    snakemake --cores 2 clues           # a named target: data, prompts, clues, attention,
                                        #   spectra, heads, knockouts, theory_checks, figures,
                                        #   claims, report
    snakemake --cores 2 --report results/report.html --report-after-run
                                        # the run, then Snakemake's HTML report of it
    snakemake -n                        # what would run

The config is validated (schemas/config.schema.yaml, then cross-checks) before any job.

`snakemake --lint` finding left on purpose (tests/test_lint.py checks it is the only one):
- "Specify a conda environment or container for each rule": every rule runs in one
  environment, the installed attnscope package (envs/attnscope-cpu.yaml or -cuda.yaml, README
  "Environments"); per-rule environments would each reinstall the library and torch for no
  isolation gain.
Rule files hold rules only: what a rule decides from the config is in the library
(attnscope.config's plan and slices, attnscope.paths, attnscope.resources), the Snakemake
helpers that several rule files share (figure outputs, resource requests) in rules/common.smk.
"""

import sys
from pathlib import Path

from snakemake.utils import min_version

from attnscope import config as attnscope_config
from attnscope import configfile as attnscope_configfile
from attnscope import mapview as attnscope_mapview
from attnscope import paths as attnscope_paths
from attnscope.plots import stems as attnscope_stems
from attnscope import variants as attnscope_variants

min_version("9.0")


if Path("config.yaml").is_file():  # before Snakemake reads it: a syntax error with its line and column
    attnscope_configfile.check_yaml_file("config.yaml")


configfile: "config.yaml"


for _configfile in workflow.configfiles:  # the --configfile ones (config.yaml is checked above)
    if Path(_configfile).resolve() != Path("config.yaml").resolve():
        attnscope_configfile.check_yaml_file(_configfile)
attnscope_configfile.validate(config, Path(workflow.basedir, "schemas", "config.schema.yaml"))
PLAN = attnscope_config.plan(config)
for _warning in PLAN.warnings:  # also in results/logs/check_targets/ and results/data/targets/
    print(f"warning: {_warning}", file=sys.stderr)


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/models.smk"
include: "rules/prompts.smk"
include: "rules/generate.smk"
include: "rules/attention.smk"
include: "rules/spectra.smk"
include: "rules/theory.smk"
include: "rules/figures.smk"
include: "rules/heads.smk"
include: "rules/knockout.smk"
include: "rules/report.smk"
include: "rules/explore.smk"


rule all:
    default_target: True
    input:
        rules.data.input,
        rules.clues.input,
        rules.attention.input,
        rules.spectra.input,
        rules.heads.input,
        rules.theory_checks.output,
        rules.knockouts.input,
        rules.report.input,
