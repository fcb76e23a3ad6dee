"""The default pipeline through SLURM (profiles/slurm) on a single-node cluster equals a local run.

Needs a running cluster: `eval "$(tests/slurm_cluster.sh start)"` (CI's .ci/run does it and
sets ATTNSCOPE_SLURM=1, which turns a missing or broken cluster into a failure). Without
one, these tests skip and say how to start it. Every wait is bounded: a cluster that
accepts jobs but never runs them fails the test after SLURM_RUN_TIMEOUT seconds.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from attnscope import configfile as attnscope_configfile
from attnscope import resources
from tests.conftest import REPO, snakemake_command
from tests.helpers import tiny_config

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

SLURM_RUN_TIMEOUT = 900


def cluster_problem() -> str | None:
    """Why no usable SLURM cluster answers here, or None when one does."""
    missing = [tool for tool in ("sbatch", "squeue", "sinfo", "scancel") if shutil.which(tool) is None]
    if missing:
        return f"SLURM client tools not installed ({', '.join(missing)})"
    try:
        states = subprocess.run(
            ["sinfo", "--noheader", "--Node", "--format=%T"], capture_output=True, text=True, timeout=15
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 15 s"
    if states.returncode != 0:
        return f"no SLURM controller answers: {states.stderr.strip()}"
    if not re.search(r"^(idle|mixed|allocated|completing)", states.stdout, re.M):
        return f"no SLURM node is up (node states: {' '.join(states.stdout.split()) or 'none'})"
    return None


@pytest.fixture(scope="module")
def cluster() -> None:
    problem = cluster_problem()
    if problem and os.environ.get("ATTNSCOPE_SLURM") == "1":
        pytest.fail(f"ATTNSCOPE_SLURM=1 promises a SLURM cluster, but {problem}")
    if problem:
        pytest.skip(f'{problem}; start one with: eval "$(sudo tests/slurm_cluster.sh start)"')


def slurm_snakemake(workdir: Path, *args: str, config: dict, timeout: int = SLURM_RUN_TIMEOUT):
    """Snakemake with the SLURM profile; on timeout it is interrupted, so it cancels its jobs."""
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    command = snakemake_command(
        workdir,
        "--workflow-profile",
        str(REPO / "profiles" / "slurm"),
        # The test node has 2 CPUs and jobs take seconds: one thread per job, so that two run
        # side by side, and faster polling.
        "--max-threads",
        "1",
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--seconds-between-status-checks",
        "1",
        *args,
    )
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)  # Snakemake cancels its SLURM jobs on interrupt
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        pytest.fail(f"the SLURM run took longer than {timeout} s:\n{output[-6000:]}")
    return process.returncode, output


def slurm_jobs(run_id: str) -> list[dict[str, str]]:
    """The jobs SLURM ran for a Snakemake run: id, state, comment (rule and wildcards)."""
    out = subprocess.run(
        ["squeue", "--noheader", "--states=all", "--name", run_id, "--format=%i|%T|%k"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [dict(zip(("id", "state", "comment"), line.split("|", 2))) for line in out.splitlines()]


def job_request(job_id: str) -> dict[str, str]:
    """What SLURM granted a job: memory, time limit, CPUs, GPUs (scontrol's fields)."""
    out = subprocess.run(
        ["scontrol", "--oneliner", "show", "job", job_id],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def minutes(limit: str) -> int:
    """SLURM's [D-]HH:MM:SS time limit in minutes."""
    days, _, clock = limit.rpartition("-")
    hours, mins, _ = map(int, clock.split(":"))
    return (int(days or 0) * 24 + hours) * 60 + mins


def test_slurm_run_equals_local_run(cluster, tiny_default_run, tmp_path):
    config = tiny_config()
    local, cluster_dir = tiny_default_run, tmp_path / "slurm"
    cluster_dir.mkdir()
    code, output = slurm_snakemake(cluster_dir, config=config)
    assert code == 0, output[-6000:]

    # Every job but the local rules' went through SLURM and completed there.
    run_id = re.search(r"SLURM run ID: (\S+)", output).group(1)
    jobs = slurm_jobs(run_id)
    planned = int(re.search(r"^total\s+(\d+)", output, re.M).group(1))
    local_rules = re.findall(r"^localrule (\w+):", output, re.M)  # `all` among them
    assert {"all", "import_clues", "clue_table"} <= set(local_rules)
    assert len(jobs) == planned - len(local_rules) >= 9, output[-4000:]
    assert {job["state"] for job in jobs} == {"COMPLETED"}
    assert not {job["comment"].split("_wildcards")[0] for job in jobs} & {f"rule_{r}" for r in local_rules}

    # The same files, byte for byte: every table, store, figure and the prepared model (not
    # the logs, benchmarks and per-prompt timings, which measure the run, nor Snakemake's
    # report.html, which records when and how long each job ran).
    def outputs(root: Path) -> list[Path]:
        return sorted(
            path.relative_to(root)
            for path in (root / "results").rglob("*")
            if path.is_file()
            and path.relative_to(root / "results").parts[0] not in {"logs", "benchmarks"}
            and not path.name.endswith(".timing.tsv")
            and path.name != "report.html"
        )

    produced = outputs(local)
    assert outputs(cluster_dir) == produced and len(produced) >= 20
    for path in produced:
        assert (cluster_dir / path).read_bytes() == (local / path).read_bytes(), path

    # SLURM granted what the rule asked for, computed from the prepared model's manifest.
    generate = next(job for job in jobs if job["comment"].startswith("rule_generate_clues"))
    experiment = generate["comment"].rsplit("_", 1)[1]
    attnscope_configfile.validate(config, REPO / "schemas" / "config.schema.yaml")  # fills the defaults
    spec = config["models"]["tiny-mistral"]
    results = cluster_dir / "results"
    size = resources.model_size(spec, results / "models" / "tiny-mistral" / "manifest.json")
    assert size.exact
    expected = resources.generation_resources(
        spec,
        size,
        "trained",
        n_prompts=config["experiments"][experiment]["n_targets"],
        tokens=resources.prompt_tokens(results / "prompts" / "tiny-mistral" / f"{experiment}.parquet", 0),
        max_new_tokens=config["generation"]["max_new_tokens"],
        batch_size=config["generation"]["batch_size"],
    )
    granted = job_request(generate["id"])
    assert granted["MinMemoryNode"] == f"{expected.mem_mb}M"
    assert minutes(granted["TimeLimit"]) == expected.runtime
    assert granted["NumCPUs"] == "1"  # the rule's MODEL_THREADS, scaled down to --max-threads


def test_cuda_on_a_cluster_without_gpus_fails_before_any_job(cluster, tmp_path):
    config = tiny_config()
    config["models"]["tiny-mistral"]["device"] = "cuda"
    code, output = slurm_snakemake(tmp_path, config=config, timeout=300)
    assert code != 0
    assert "models.tiny-mistral.device: cuda, but no partition of this SLURM cluster offers GPUs" in output
    assert "submitted" not in output and not (tmp_path / "results" / "data").exists()
