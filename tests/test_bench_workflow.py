"""benchmarks/bench_workflow.py: the critical path read from a Snakemake log and the benchmark
files, and the output comparison with its tolerances, on a log, tables and stores built here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_workflow", ROOT / "benchmarks" / "bench_workflow.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _job(rule: str, jobid: int, inputs: list[str], outputs: list[str], benchmark: str | None) -> str:
    lines = ["[Fri Nov 27 14:23:06 2026]", f"{'local' if benchmark is None else ''}rule {rule}:"]
    if inputs:
        lines.append(f"    input: {', '.join(inputs)}")
    lines += [f"    output: {', '.join(outputs)}", f"    jobid: {jobid}"]
    if benchmark:
        lines.append(f"    benchmark: {benchmark}")
    lines.append("    reason: Missing output files")
    return "\n".join(lines)


def _run(tmp_path: Path, seconds: dict[str, float]) -> Path:
    """A run of five jobs: prepare → (extract, generate) → claims, and a theory job on its own;
    job seconds from ``seconds``, a benchmark TSV per job as Snakemake writes it."""
    jobs = [
        ("prepare", 1, [], ["m/manifest.json"]),
        ("theory", 2, [], ["t.parquet"]),
        ("extract", 3, ["m/manifest.json", "p.parquet"], ["a.zarr"]),
        ("generate", 4, ["m/manifest.json"], ["c.parquet", "c.md"]),
        ("claims", 5, ["a.zarr", "c.parquet", "t.parquet"], ["claims.md"]),
    ]
    blocks = []
    for rule, jobid, inputs, outputs in jobs:
        tsv = tmp_path / "results" / "benchmarks" / rule / f"{jobid}.tsv"
        tsv.parent.mkdir(parents=True)
        tsv.write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{seconds[rule]}\t0:00:01\t100.0\t{seconds[rule] / 2}\n")
        blocks.append(_job(rule, jobid, inputs, outputs, str(tsv.relative_to(tmp_path))))
    blocks.append(_job("all", 6, ["claims.md"], [], None))
    log = tmp_path / ".snakemake" / "log" / "x.snakemake.log"
    log.parent.mkdir(parents=True)
    log.write_text("Building DAG of jobs...\n" + "\n".join(blocks) + "\n")
    return log


@pytest.mark.parametrize(
    ("seconds", "chain"),
    [
        (
            {"prepare": 10, "theory": 5, "extract": 30, "generate": 20, "claims": 2},
            ["prepare", "extract", "claims"],
        ),
        (
            {"prepare": 10, "theory": 5, "extract": 3, "generate": 20, "claims": 2},
            ["prepare", "generate", "claims"],
        ),
        ({"prepare": 1, "theory": 50, "extract": 3, "generate": 20, "claims": 2}, ["theory", "claims"]),
    ],
)
def test_the_critical_path_is_the_longest_chain_of_jobs(bench, tmp_path, seconds, chain):
    log = _run(tmp_path, seconds)
    path = bench.critical_path(tmp_path, log)
    assert [job["rule"] for job in path] == chain
    # the reference: the longest of the chains enumerated by hand
    chains = {
        ("prepare", "extract", "claims"),
        ("prepare", "generate", "claims"),
        ("theory", "claims"),
    }
    longest = max(sum(seconds[rule] for rule in c) for c in chains)
    assert sum(job["s"] for job in path) == pytest.approx(longest)
    profile = bench.profile(tmp_path)
    assert profile["critical_path_s"] == pytest.approx(longest)
    assert profile["job_s"] == pytest.approx(sum(seconds.values()))
    assert profile["job_cpu_s"] == pytest.approx(sum(seconds.values()) / 2)
    on_path = {rule: entry["critical_s"] for rule, entry in profile["rules"].items()}
    assert on_path == {rule: (seconds[rule] if rule in chain else 0.0) for rule in seconds}


def _outputs(root: Path, entropy: np.ndarray, attn: np.ndarray, label: str = "a") -> Path:
    (root / "results").mkdir(parents=True)
    pd.DataFrame({"layer": [0, 1, 2], "entropy": entropy, "label": [label, "b", "c"]}).to_parquet(
        root / "results" / "m.parquet"
    )
    group = zarr.open_group(root / "results" / "s.zarr", mode="w")
    group.create_array("p0/attn", data=attn)
    return root / "results"


def test_differences_allow_only_named_columns_their_tolerance_and_float16_one_step(bench, tmp_path):
    entropy = np.array([0.5, 1.25, 2.0])
    attn = np.array([0.1, 0.5, 0.75, 1.0], dtype=np.float16)
    reference = _outputs(tmp_path / "ref", entropy, attn)
    assert bench.differences(_outputs(tmp_path / "same", entropy, attn), reference, {}) == []

    one_step = attn.copy()
    one_step[1] = np.nextafter(attn[1], np.float16(1))
    two_steps = one_step.copy()
    two_steps[1] = np.nextafter(one_step[1], np.float16(1))
    moved = entropy + np.array([0.0, 3e-7, -1e-7])
    run = _outputs(tmp_path / "moved", moved, one_step)
    assert bench.differences(run, reference, {"entropy": 1e-6}) == []  # within both
    found = bench.differences(run, reference, {})  # the column has no tolerance
    assert found == [f"m.parquet: entropy: max |Δ| {3e-7:.3g}"]
    found = bench.differences(run, reference, {"entropy": 1e-7})  # a tolerance it exceeds
    assert found == [f"m.parquet: entropy: max |Δ| {3e-7:.3g} > 1e-07"]
    assert bench.differences(run, reference, {"layer": 1.0}) != []  # another column's tolerance

    far = _outputs(tmp_path / "far", entropy, two_steps, label="z")
    found = bench.differences(far, reference, {"entropy": 1.0, "attn": 0.0})
    assert found == ["m.parquet: label: values differ", "s.zarr/p0/attn: max |Δ| 0.000977 > 0"]
    assert bench.differences(far, reference, {"attn": 1e-3}) == ["m.parquet: label: values differ"]


@pytest.fixture(scope="module")
def render():
    spec = importlib.util.spec_from_file_location(
        "render_performance", ROOT / "benchmarks" / "render_performance.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("job_s", "met"), [(590.0, "yes"), (610.0, "**no**")])
def test_the_default_runs_job_seconds_are_held_to_its_baselines_share(render, job_s, met):
    """With a baseline run's profile (``--baseline``), the default run's job seconds are held to
    0.6 × the baseline's, which the row names; over it the row says so."""
    profile = {"job_s": job_s, "job_cpu_s": 500.0, "critical_path_s": 100.0, "critical_path": [], "rules": {}}
    result = render.Result(
        "workflow",
        {
            "cores": 2, "cold_run_s": 400.0, "cold_run_jobs": 10, "noop_rerun_s": 2.0, "noop_rerun_jobs": 0,
            "cold_run_profile": profile, "baseline": "/runs/a6",
            "compared_profile": {"job_s": 1000.0, "rules": {}},
        },
    )  # fmt: skip
    [row] = [line for line in render.workflow(result) if line.startswith("| job seconds")]
    assert "≤ 0.6 × 1000 s (`/runs/a6`)" in row and row.endswith(f"| {met} |"), row


@pytest.mark.parametrize(("runs", "met"), [([2.9, 2.7, 3.4], "yes"), ([3.1, 2.7, 3.4], "**no**")])
def test_the_no_op_is_the_median_of_its_reruns_beside_snakemakes_own_start(render, runs, met):
    """The no-op figure is the median of the reruns (one slow rerun does not decide it; the middle
    one does), each listed, with the commit they ran at and Snakemake's own start beside them."""
    profile = {"job_s": 500.0, "job_cpu_s": 400.0, "critical_path_s": 100.0, "critical_path": [], "rules": {}}
    result = render.Result(
        "workflow",
        {
            "cores": 2, "cold_run_s": 400.0, "cold_run_jobs": 10, "noop_rerun_jobs": 0,
            "noop_rerun_s": sorted(runs)[1], "noop_rerun_runs_s": runs, "noop_commit": "0123456789abcdef",
            "snakemake_start_s": 2.3, "snakemake_start_runs_s": [2.3, 2.2, 2.4], "cold_run_profile": profile,
        },
    )  # fmt: skip
    lines = render.workflow(result)
    [noop] = [line for line in lines if line.startswith("| no-op rerun")]
    listed = ", ".join(f"{s:.2f} s" for s in runs)
    assert f"median of {listed}, measured again at `0123456789ab` (`--noop`)" in noop, noop
    assert noop.endswith(f"| ≤ 3 s | {met} |"), noop
    [start] = [line for line in lines if line.startswith("| Snakemake's own start")]
    assert "| 2.30 s |" in start


@pytest.mark.integration
def test_noop_reruns_time_each_rerun_beside_snakemakes_start(bench, tiny_default_run):
    """On a finished run: no job runs, every rerun and start is timed, the figures are their medians."""
    measured = bench.noop_reruns(tiny_default_run, 2, 3)
    assert measured["noop_rerun_jobs"] == 0
    for figure in ("noop_rerun", "snakemake_start"):
        runs = measured[f"{figure}_runs_s"]
        assert len(runs) == 3 and all(s > 0 for s in runs)
        assert measured[f"{figure}_s"] == sorted(runs)[1]
