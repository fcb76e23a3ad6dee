"""`snakemake --lint` on this workflow finds only the deliberate note (one environment for every
rule, see the Snakefile's docstring)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import snakemake_command, workflow_config

DELIBERATE = {"Specify a conda environment or container for each rule."}


def lint_titles(command: list[str], cwd: Path) -> list[str]:
    """The title of every finding `snakemake --lint` prints (its text format)."""
    run = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert "Lints for" in run.stdout + run.stderr or run.returncode == 0, run.stderr[-3000:]
    return re.findall(r"^    \* (.+?):$", run.stdout + run.stderr, re.M)


def test_lint_finds_only_the_deliberate_note(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(workflow_config(), sort_keys=False))
    titles = lint_titles(snakemake_command(tmp_path, "--lint"), tmp_path)
    assert titles and set(titles) == DELIBERATE, sorted(set(titles) - DELIBERATE)


def test_lint_check_sees_other_findings(tmp_path):
    """The check above can fail: an included rule file with a function and a rule without a log
    is found (the lint checks functions in included files only)."""
    (tmp_path / "Snakefile").write_text('include: "a.smk"\n')
    (tmp_path / "a.smk").write_text(
        'def name(wildcards):\n    return "x"\n\n\nrule a:\n    output:\n        "a.txt",\n'
        '    shell:\n        "touch {output}"\n'
    )
    titles = lint_titles([sys.executable, "-m", "snakemake", "--lint"], tmp_path)
    assert {"Mixed rules and functions in same snakefile.", "No log directive defined"} <= set(titles)
