"""The cold default run and a no-op rerun, wall time, in a fresh working directory.

    python benchmarks/bench_workflow.py [--cores 2] [--workdir DIR] [--compare DIR] [--config FILE]
    python benchmarks/bench_workflow.py --profile DIR     # only the profile of a finished run
    python benchmarks/bench_workflow.py --profile DIR --compare REF  # add the comparison to DIR's JSON
    python benchmarks/bench_workflow.py --noop DIR        # measure DIR's no-op rerun again, into its JSON

Runs `snakemake --cores N` on this checkout's config.yaml (or ``--config FILE``, e.g.
config/examples/two_models.yaml, in its place: benchmarks/out/workflow-{stem}.json) and sample
data in a new working directory (nothing cached: the model is prepared from the GGUF, every job
runs), then the same command again, which must run no job: ``--noop-repeats`` times (default 3;
the median is the figure), each beside `snakemake --version`, Snakemake's own start in this
environment (its imports and plugins, no workflow), the floor under any no-op rerun. With
``--compare DIR`` (the working directory of an earlier cold run), also checks determinism: every
Parquet table byte-identical and every Zarr array equal — except the columns and arrays named in
``TOLERANCES`` (or by ``--tolerance NAME=ABS``), which may move by that much, and float16 arrays,
which may move by one float16 step; and the job seconds of the earlier run beside this one's. Writes
benchmarks/out/workflow.json, with the 1-minute load average before and after the cold run (other
jobs on the machine slow it: the run alone reads ~N), and the cold run's profile: per rule its jobs,
their summed wall and CPU seconds (the Snakemake benchmark TSVs) and the seconds it holds of the
critical path (the longest chain of jobs, each waiting on the one before, by job seconds), and how
long the run had 0, 1, 2, … jobs running (the Snakemake log's start and finish lines).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import zarr

REPO = Path(__file__).resolve().parent.parent


def snakemake(workdir: Path, cores: int) -> tuple[float, str]:
    """Wall seconds and output of one `snakemake --cores N` in ``workdir``."""
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    start = time.perf_counter()
    run = subprocess.run([*command, "--cores", str(cores)], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"snakemake failed in {workdir}:\n{run.stderr[-4000:]}")
    return seconds, run.stdout + run.stderr


def noop_reruns(workdir: Path, cores: int, repeats: int) -> dict[str, object]:
    """The no-op rerun of the finished run in ``workdir``, ``repeats`` times, each beside
    `snakemake --version` (Snakemake's own start), alternating: medians and every time."""
    reruns, starts, jobs = [], [], 0
    for _ in range(repeats):
        seconds, log = snakemake(workdir, cores)
        reruns.append(round(seconds, 2))
        jobs += log.count("Finished jobid")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "snakemake", "--version"], capture_output=True, check=True)
        starts.append(round(time.perf_counter() - start, 2))
    return {
        "noop_rerun_s": round(statistics.median(reruns), 2),
        "noop_rerun_runs_s": reruns,
        "noop_rerun_jobs": jobs,
        "snakemake_start_s": round(statistics.median(starts), 2),
        "snakemake_start_runs_s": starts,
    }


def zarr_arrays(store: Path) -> dict[str, np.ndarray]:
    """Every array of a Zarr store, at any depth, by its path."""
    members = zarr.open_group(store, mode="r").members(max_depth=None)
    return {name: node[...] for name, node in members if isinstance(node, zarr.Array)}


TOLERANCES: dict[str, float] = {
    "blocked_mass": 1e-6,
    "blocked_mass_low": 1e-6,
    "blocked_mass_high": 1e-6,
    "mass_ratio": 1e-5,
}
"""Parquet column or Zarr array name → the absolute change a method change is allowed to make
(issue 40), each with its reason in docs/performance.md: a knockout's blocked mass (and the
effects table's interval and control ratio of it) from maps that continue the prompt's KV cache,
float32 rounding away from a whole pass's (8.7e-8 at most on the default run)."""


def _float16_steps(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference of two float16 arrays in float16 steps (ulps at the larger value)."""
    a, b = a.astype(np.float32), b.astype(np.float32)
    step = np.spacing(np.maximum(np.abs(a), np.abs(b)).astype(np.float16)).astype(np.float32)
    both_nan = np.isnan(a) & np.isnan(b)
    return float(np.max(np.where(both_nan, 0.0, np.abs(a - b) / step), initial=0.0))


def _moved(name: str, mine: np.ndarray, theirs: np.ndarray, tolerances: dict[str, float]) -> str | None:
    """``None`` when two arrays are equal or within what ``name`` may move (its tolerance; one
    step for float16), else what differs."""
    if mine.shape != theirs.shape or mine.dtype != theirs.dtype:
        return f"{mine.dtype}{list(mine.shape)} against {theirs.dtype}{list(theirs.shape)}"
    if np.array_equal(mine, theirs, equal_nan=mine.dtype.kind in "fc"):
        return None
    if mine.dtype.kind != "f":
        return "values differ"
    if mine.dtype == np.float16 and _float16_steps(mine, theirs) <= 1:
        return None
    delta = np.abs(mine.astype(np.float64) - theirs.astype(np.float64))
    largest = float(np.nanmax(delta)) if np.isfinite(delta).any() else float("nan")
    if (
        name in tolerances
        and np.array_equal(np.isnan(mine), np.isnan(theirs))
        and largest <= tolerances[name]
    ):
        return None
    return f"max |Δ| {largest:.3g}" + (f" > {tolerances[name]:g}" if name in tolerances else "")


def _table_moves(path: Path, other: Path, tolerances: dict[str, float]) -> list[str]:
    """What differs between two Parquet tables, column by column (``[]``: equal up to the tolerances)."""
    mine, theirs = pd.read_parquet(path), pd.read_parquet(other)
    if list(mine.columns) != list(theirs.columns) or len(mine) != len(theirs):
        shapes = [f"{len(t)} × {list(t.columns)}" for t in (mine, theirs)]
        return [f"columns or rows differ ({shapes[0]} against {shapes[1]})"]
    moves = []
    for column in mine.columns:
        a, b = mine[column].to_numpy(), theirs[column].to_numpy()
        if a.dtype.kind in "fiub" and b.dtype.kind in "fiub":
            moved = _moved(column, a, b, tolerances)
        else:
            moved = None if mine[column].equals(theirs[column]) else "values differ"
        if moved:
            moves.append(f"{column}: {moved}")
    return moves


def differences(results: Path, reference: Path, tolerances: dict[str, float] | None = None) -> list[str]:
    """Parquet tables and Zarr arrays of ``results`` that differ from ``reference`` beyond what
    ``tolerances`` (name → absolute change) and one float16 step allow. A table whose bytes differ
    but whose columns are all within them is not listed (its metadata, e.g. a digest of new
    params, may differ)."""
    tolerances = TOLERANCES if tolerances is None else tolerances
    found = []
    for path in sorted(results.rglob("*.parquet")):
        name, other = str(path.relative_to(results)), reference / path.relative_to(results)
        if not other.is_file():
            found.append(f"{name}: not in the reference")
        elif other.read_bytes() != path.read_bytes():
            found += [f"{name}: {move}" for move in _table_moves(path, other, tolerances)]
    for store in sorted(results.rglob("*.zarr")):
        mine, theirs = zarr_arrays(store), zarr_arrays(reference / store.relative_to(results))
        if mine.keys() != theirs.keys():
            found.append(f"{store.relative_to(results)}: arrays differ")
        for name in sorted(mine.keys() & theirs.keys()):
            moved = _moved(name.rsplit("/", 1)[-1], mine[name], theirs[name], tolerances)
            if moved:
                found.append(f"{store.relative_to(results)}/{name}: {moved}")
    return found


def job_seconds(tsv: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and largest RSS (MiB) of one job's Snakemake benchmark TSV."""
    with tsv.open() as handle:
        row = next(csv.DictReader(handle, delimiter="\t"))

    def number(key: str) -> float:
        return float(row[key]) if row[key] not in ("", "NA", "-") else 0.0

    return float(row["s"]), number("cpu_time"), number("max_rss")


def rule_profile(workdir: Path, critical: list[dict] | None = None) -> dict[str, dict[str, float]]:
    """Per rule of a finished run: jobs, summed wall and CPU seconds, largest RSS (MiB), from
    results/benchmarks/ (one TSV per job: ``{rule}.tsv`` or ``{rule}/…/*.tsv``), and the seconds
    its jobs hold of the ``critical`` path; slowest first."""
    rules: dict[str, dict[str, float]] = defaultdict(
        lambda: {"jobs": 0, "s": 0.0, "cpu_s": 0.0, "max_rss_mb": 0.0, "critical_s": 0.0}
    )
    root = workdir / "results" / "benchmarks"
    for tsv in root.rglob("*.tsv"):
        wall, cpu, rss = job_seconds(tsv)
        entry = rules[tsv.relative_to(root).parts[0].removesuffix(".tsv")]
        entry["jobs"] += 1
        entry["s"] += wall
        entry["cpu_s"] += cpu
        entry["max_rss_mb"] = max(entry["max_rss_mb"], rss)
    for job in critical or []:
        rules[job["rule"]]["critical_s"] += job["s"]
    ordered = sorted(rules.items(), key=lambda item: -item[1]["s"])
    return {rule: {key: round(value, 1) for key, value in entry.items()} for rule, entry in ordered}


JOB_FIELD = re.compile(r"^    (input|output|jobid|benchmark): (.*)$")


def logged_jobs(log: Path) -> list[dict]:
    """The jobs of a Snakemake log in the order they started: rule, inputs, outputs, benchmark."""
    jobs: list[dict] = []
    for line in log.read_text().splitlines():
        rule = re.match(r"^(?:local)?rule (\w+):$", line)
        if rule:
            jobs.append({"rule": rule.group(1), "input": [], "output": [], "benchmark": None})
            continue
        field = JOB_FIELD.match(line)
        if field and jobs:
            key, value = field.groups()
            if key in ("input", "output"):
                jobs[-1][key] = value.split(", ")
            elif key == "benchmark":
                jobs[-1]["benchmark"] = value
    return jobs


def critical_path(workdir: Path, log: Path) -> list[dict]:
    """The longest chain of jobs of a finished run, each reading an output of the one before, by
    job wall seconds (its benchmark TSV; 0 for a job without one): rule, benchmark, seconds.
    A job starts after every job it reads, so the log's start order is a topological order."""
    producer: dict[str, int] = {}
    finish: list[float] = []
    before: list[int | None] = []
    jobs = logged_jobs(log)
    for index, job in enumerate(jobs):
        tsv = workdir / job["benchmark"] if job["benchmark"] else None
        job["s"] = job_seconds(tsv)[0] if tsv is not None and tsv.is_file() else 0.0
        sources = {producer[path] for path in job["input"] if path in producer}
        first = max(sources, key=lambda j: finish[j], default=None)
        finish.append(job["s"] + (finish[first] if first is not None else 0.0))
        before.append(first)
        producer.update({path: index for path in job["output"]})
    chain, at = [], max(range(len(jobs)), key=lambda j: finish[j], default=None)
    while at is not None:
        chain.append(
            {"rule": jobs[at]["rule"], "benchmark": jobs[at]["benchmark"], "s": round(jobs[at]["s"], 1)}
        )
        at = before[at]
    return chain[::-1]


STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ [\d:]{8} \d{4})\]$")


def concurrency(log: Path) -> dict[str, int]:
    """Seconds during which 0, 1, 2, … jobs ran, from a Snakemake log's time stamps (1 s steps):
    a job runs from its rule line to its ``Finished jobid`` line."""
    events, stamp = [], None
    for line in log.read_text().splitlines():
        match = STAMP.match(line)
        if match:
            stamp = datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
        elif stamp is not None and re.match(r"^(local)?rule \w+:$", line):
            events.append((stamp, +1))
        elif stamp is not None and line.startswith("Finished jobid"):
            events.append((stamp, -1))
    seconds: dict[str, int] = defaultdict(int)
    running, last = 0, None
    for when, step in sorted(events, key=lambda e: (e[0], -e[1])):  # starts first: no negative counts
        if last is not None:
            seconds[str(running)] += int(when - last)
        running, last = running + step, when
    return {n: s for n, s in sorted(seconds.items(), key=lambda item: int(item[0])) if s}


def profile(workdir: Path) -> dict:
    """The per-rule profile, critical path and job concurrency of the run in ``workdir``."""
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    critical = critical_path(workdir, logs[0]) if logs else []
    rules = rule_profile(workdir, critical)
    return {
        "rules": rules,
        "job_s": round(sum(entry["s"] for entry in rules.values()), 1),
        "job_cpu_s": round(sum(entry["cpu_s"] for entry in rules.values()), 1),
        "critical_path_s": round(sum(job["s"] for job in critical), 1),
        "critical_path": critical,
        "seconds_with_n_jobs_running": concurrency(logs[0]) if logs else None,
    }


def comparison(workdir: Path, reference: Path, tolerance_args: list[str]) -> dict:
    """The outputs of the run in ``workdir`` against the earlier run in ``reference`` (within
    ``TOLERANCES`` and ``--tolerance NAME=ABS``), and the earlier run's profile."""
    tolerances = TOLERANCES | dict(_tolerance(text) for text in tolerance_args)
    return {
        "compared_with": str(reference),
        "compared_profile": profile(reference),
        "tolerances": tolerances,
        "differences": differences(workdir / "results", reference / "results", tolerances),
    }


def _tolerance(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    try:
        return name, float(value)
    except ValueError:
        raise SystemExit(f"--tolerance {text!r}: expected NAME=ABS, e.g. entropy=1e-6") from None


def recorded_run(config: Path | None, workdir: Path) -> tuple[Path, dict]:
    """The JSON of the cold run of ``config`` (default: config.yaml) and its contents, which must
    be of the run in ``workdir`` (the modes that add to a finished run's record)."""
    name = f"workflow-{config.stem}.json" if config else "workflow.json"
    path = Path(__file__).resolve().parent / "out" / name
    result = json.loads(path.read_text())
    if Path(result["workdir"]) != workdir:
        raise SystemExit(f"{path} holds the run in {result['workdir']}, not {workdir}")
    return path, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--workdir", type=Path, help="keep the run here (default: a temporary directory)")
    parser.add_argument("--compare", type=Path, help="an earlier cold run's working directory")
    parser.add_argument("--config", type=Path, help="a config file in place of config.yaml")
    parser.add_argument(
        "--tolerance",
        action="append",
        default=[],
        metavar="NAME=ABS",
        help="with --compare: a column or array that may move by ABS (adds to TOLERANCES)",
    )
    parser.add_argument(
        "--profile", type=Path, help="only print the profile of this finished run's directory"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="with --profile: record the job seconds of this earlier cold run (the bar's reference) "
        "without comparing outputs, for a run whose outputs differ from it on purpose",
    )
    parser.add_argument(
        "--noop-repeats", type=int, default=3, help="no-op reruns, each beside `snakemake --version`"
    )
    parser.add_argument(
        "--noop", type=Path, help="only measure this finished run's no-op rerun again, into its JSON"
    )
    args = parser.parse_args()
    if args.noop:  # a later commit's parse and DAG on the same finished run
        result_path, result = recorded_run(args.config, args.noop)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from common import git_commit

        result |= noop_reruns(args.noop, args.cores, args.noop_repeats) | {"noop_commit": git_commit()}
        result_path.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: v for k, v in result.items() if "noop" in k or "snakemake" in k}, indent=2))
        if result["noop_rerun_jobs"]:
            raise SystemExit("the rerun ran jobs")
        return
    if args.profile and (args.compare or args.baseline):  # the cold run finished before the reference did
        result_path, result = recorded_run(args.config, args.profile)
        if args.compare:
            result |= comparison(args.profile, args.compare, args.tolerance)
        else:
            result |= {"baseline": str(args.baseline), "compared_profile": profile(args.baseline)}
        result_path.write_text(json.dumps(result, indent=2) + "\n")
        shown = ("compared_with", "tolerances", "differences") if args.compare else ("baseline",)
        print(json.dumps({key: result[key] for key in shown}, indent=2))
        return
    if args.profile:
        print(json.dumps(profile(args.profile), indent=2))
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="attnscope-cold-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if (workdir / "results").exists():
        raise SystemExit(f"{workdir}/results exists: a cold run needs an empty working directory")
    shutil.copy(args.config or REPO / "config.yaml", workdir / "config.yaml")
    if not (workdir / "data").exists():
        os.symlink(REPO / "data", workdir / "data")

    load_before = os.getloadavg()[0]  # other processes' load: the run's own reads ~cores
    cold_s, cold_log = snakemake(workdir, args.cores)
    load_after = os.getloadavg()[0]
    jobs = cold_log.count("Finished jobid")
    result = {
        "cores": args.cores,
        "workdir": str(workdir),
        "cold_run_s": round(cold_s, 1),
        "cold_run_jobs": jobs,
        "load_average_1min_before_after": [round(load_before, 2), round(load_after, 2)],
        **noop_reruns(workdir, args.cores, args.noop_repeats),
        "cold_run_profile": profile(workdir),
    }
    if args.compare:
        result |= comparison(workdir, args.compare, args.tolerance)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import write  # here: it loads torch, which the tests of the functions above need not

    write(f"workflow-{args.config.stem}" if args.config else "workflow", result)
    if result["noop_rerun_jobs"] or result.get("differences"):
        raise SystemExit("the rerun ran jobs, or the outputs differ from --compare")


if __name__ == "__main__":
    main()
