"""The cold default run and a no-op rerun, wall time, in a fresh working directory.

    python benchmarks/bench_workflow.py [--cores 2] [--workdir DIR] [--compare DIR] [--config FILE]
    python benchmarks/bench_workflow.py --profile DIR     # only the profile of a finished run

Runs `snakemake --cores N` on this checkout's config.yaml (or ``--config FILE``, e.g.
config/examples/two_models.yaml, in its place: benchmarks/out/workflow-{stem}.json) and sample
data in a new working directory (nothing cached: the model is prepared from the GGUF, every job
runs), then the same command again, which must run no job. With ``--compare DIR`` (the working directory of
an earlier cold run), also checks determinism: every Parquet table byte-identical and
every Zarr array equal. Writes benchmarks/out/workflow.json, with the 1-minute load average
before and after the cold run (other jobs on the machine slow it: the run alone reads ~N),
and the cold run's profile:
per rule its jobs, their summed wall and CPU seconds (the Snakemake benchmark TSVs), and how
long the run had 0, 1, 2, … jobs running (the Snakemake log's start and finish lines).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import numpy as np
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write  # noqa: E402

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


def zarr_arrays(store: Path) -> dict[str, np.ndarray]:
    """Every array of a Zarr store, at any depth, by its path."""
    members = zarr.open_group(store, mode="r").members(max_depth=None)
    return {name: node[...] for name, node in members if isinstance(node, zarr.Array)}


def differences(results: Path, reference: Path) -> list[str]:
    """Parquet files whose bytes differ and Zarr arrays whose values differ from ``reference``."""
    found = []
    for path in sorted(results.rglob("*.parquet")):
        other = reference / path.relative_to(results)
        if not other.is_file() or other.read_bytes() != path.read_bytes():
            found.append(str(path.relative_to(results)))
    for store in sorted(results.rglob("*.zarr")):
        mine, theirs = zarr_arrays(store), zarr_arrays(reference / store.relative_to(results))
        if mine.keys() != theirs.keys():
            found.append(f"{store.relative_to(results)}: arrays differ")
        found += [
            f"{store.relative_to(results)}/{name}"
            for name in mine
            if name in theirs and not np.array_equal(mine[name], theirs[name], equal_nan=True)
        ]
    return found


def rule_profile(workdir: Path) -> dict[str, dict[str, float]]:
    """Per rule of a finished run: jobs, summed wall and CPU seconds, largest RSS (MiB), from
    results/benchmarks/ (one TSV per job: ``{rule}.tsv`` or ``{rule}/…/*.tsv``), slowest first."""
    rules: dict[str, dict[str, float]] = defaultdict(
        lambda: {"jobs": 0, "s": 0.0, "cpu_s": 0.0, "max_rss_mb": 0.0}
    )
    root = workdir / "results" / "benchmarks"
    for tsv in root.rglob("*.tsv"):
        rule = tsv.relative_to(root).parts[0].removesuffix(".tsv")
        with tsv.open() as handle:
            row = next(csv.DictReader(handle, delimiter="\t"))
        entry = rules[rule]
        entry["jobs"] += 1
        entry["s"] += float(row["s"])
        entry["cpu_s"] += float(row["cpu_time"]) if row["cpu_time"] not in ("", "NA", "-") else 0.0
        rss = row["max_rss"]
        entry["max_rss_mb"] = max(entry["max_rss_mb"], float(rss) if rss not in ("", "NA", "-") else 0.0)
    ordered = sorted(rules.items(), key=lambda item: -item[1]["s"])
    return {rule: {key: round(value, 1) for key, value in entry.items()} for rule, entry in ordered}


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
    """The per-rule profile and job concurrency of the run in ``workdir``."""
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    return {
        "rules": rule_profile(workdir),
        "seconds_with_n_jobs_running": concurrency(logs[0]) if logs else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--workdir", type=Path, help="keep the run here (default: a temporary directory)")
    parser.add_argument("--compare", type=Path, help="an earlier cold run's working directory")
    parser.add_argument("--config", type=Path, help="a config file in place of config.yaml")
    parser.add_argument(
        "--profile", type=Path, help="only print the profile of this finished run's directory"
    )
    args = parser.parse_args()
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
    noop_s, noop_log = snakemake(workdir, args.cores)
    result = {
        "cores": args.cores,
        "workdir": str(workdir),
        "cold_run_s": round(cold_s, 1),
        "cold_run_jobs": jobs,
        "load_average_1min_before_after": [round(load_before, 2), round(load_after, 2)],
        "noop_rerun_s": round(noop_s, 2),
        "noop_rerun_jobs": noop_log.count("Finished jobid"),
        "cold_run_profile": profile(workdir),
    }
    if args.compare:
        diffs = differences(workdir / "results", args.compare / "results")
        result |= {"compared_with": str(args.compare), "differences": diffs}
    write(f"workflow-{args.config.stem}" if args.config else "workflow", result)
    if result["noop_rerun_jobs"] or result.get("differences"):
        raise SystemExit("the rerun ran jobs, or the outputs differ from --compare")


if __name__ == "__main__":
    main()
