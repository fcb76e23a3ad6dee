"""One job per model for weight_spectra and head_types: a model job's start against the work of
one variant, and two finished runs of one config, one job per model × variant (before) and one
job per model (after).

    python benchmarks/bench_model_jobs.py --before DIR --after DIR [--variants DIR ...] [--starts 5]
        [--rounds 2 --before-src CHECKOUT]

``--starts``: fresh interpreters that import the model code (``from attnscope import models``:
torch, transformers' model classes), each timed whole: what every model job pays before it
loads a model. ``--before``, ``--after``: the working directories of two finished cold runs of
one config, run one after the other (e.g. the families example on the commit before and on this
checkout): jobs, summed wall and CPU seconds (Snakemake's benchmark TSVs) of weight_spectra,
head_types and all jobs, each run's span (its Snakemake log's first to last time stamp), and
their results compared byte for byte.
``--variants``: finished runs with one job per model × variant: each such job's seconds, what a
changed ``spectra.variants`` list now reruns for every variant of a model. ``--rounds``: the
two stages side by side, each round forcing weight_spectra and head_types in a copy of each run
(before with the code of the checkout ``--before-src``, after with this one's), alternating: the
snakemake command's wall seconds and those rules' job seconds. Writes
benchmarks/out/model_jobs.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_workflow import STAMP, job_seconds, rule_profile  # noqa: E402
from common import write  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RULES = ("weight_spectra", "head_types")
"""The rules that run one job per model instead of one per model × spectra variant."""
START = "from attnscope import models"


def model_start(starts: int) -> dict:
    """Wall seconds of ``starts`` fresh interpreters that import the model code: median, range."""
    seconds = []
    for _ in range(starts):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", START], check=True)
        seconds.append(time.perf_counter() - start)
    return {
        "statement": START,
        "starts": starts,
        "median_s": round(statistics.median(seconds), 2),
        "min_s": round(min(seconds), 2),
        "max_s": round(max(seconds), 2),
    }


def span(workdir: Path) -> float:
    """Seconds from the first to the last time stamp of the run's Snakemake log (the one that
    finished most jobs: a dry run's log finishes none)."""
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        raise SystemExit(f"{workdir}: no Snakemake log under .snakemake/log")
    text = max((log.read_text() for log in logs), key=lambda t: t.count("Finished jobid"))
    stamps = [
        datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
        for line in text.splitlines()
        if (m := STAMP.match(line))
    ]
    return round(stamps[-1] - stamps[0], 1)


def run(workdir: Path) -> dict:
    """The jobs and job seconds of a finished run: per rule of ``RULES``, of all, and its span."""
    profile = rule_profile(workdir)
    return {
        "workdir": str(workdir),
        "span_s": span(workdir),
        "jobs": sum(int(entry["jobs"]) for entry in profile.values()),
        "job_s": round(sum(entry["s"] for entry in profile.values()), 1),
        "job_cpu_s": round(sum(entry["cpu_s"] for entry in profile.values()), 1),
        "rules": {rule: {key: profile[rule][key] for key in ("jobs", "s", "cpu_s")} for rule in RULES},
    }


def same_bytes(before: Path, after: Path) -> dict:
    """The files of both runs' results/ (not their logs and benchmark TSVs, which hold times and
    paths), compared byte for byte: how many, and those that differ or only one run has."""

    def files(workdir: Path) -> set[str]:
        results = workdir / "results"
        return {
            str(path.relative_to(results))
            for path in results.rglob("*")
            if path.is_file() and path.relative_to(results).parts[0] not in ("logs", "benchmarks")
        }

    in_before, in_after = files(before), files(after)
    both = sorted(in_before & in_after)
    return {
        "files": len(both),
        "differ": [
            f for f in both if (before / "results" / f).read_bytes() != (after / "results" / f).read_bytes()
        ],
        "only_before": sorted(in_before - in_after),
        "only_after": sorted(in_after - in_before),
    }


def per_variant(workdir: Path) -> dict:
    """Per rule of ``RULES`` and model, each variant's job wall seconds of a run with one job
    per model × variant (results/benchmarks/{rule}/{model}/{variant}.tsv)."""
    found: dict = {}
    for rule in RULES:
        for tsv in sorted((workdir / "results" / "benchmarks" / rule).glob("*/*.tsv")):
            model = found.setdefault(rule, {}).setdefault(tsv.parent.name, {})
            model[tsv.stem] = round(job_seconds(tsv)[0], 1)
    if not found:
        raise SystemExit(f"{workdir}: no per-variant job of {', '.join(RULES)} (one job per model?)")
    return {"workdir": str(workdir), "rules": found}


def stage(workdir: Path, src: Path) -> dict:
    """Force the ``RULES`` jobs of a finished run in ``workdir`` with the checkout ``src``'s code,
    nothing downstream: the snakemake command's wall seconds, those jobs' number and seconds."""
    targets = [
        str(path.relative_to(workdir))
        for types in sorted((workdir / "results" / "heads").glob("*/*.types.parquet"))
        for path in (
            types,
            workdir / "results" / "spectra" / types.parent.name / types.name.replace(".types", ""),
        )
    ]
    for rule in RULES:
        shutil.rmtree(workdir / "results" / "benchmarks" / rule, ignore_errors=True)
    command = [sys.executable, "-m", "snakemake", "-s", str(src / "Snakefile"), "-d", str(workdir)]
    start = time.perf_counter()
    subprocess.run(
        [*command, *targets, "--cores", "2", "--forcerun", *RULES],
        env={**os.environ, "PYTHONPATH": str(src / "src")},
        capture_output=True,
        check=True,
    )
    wall = time.perf_counter() - start
    profile = {rule: entry for rule, entry in rule_profile(workdir).items() if rule in RULES}
    return {
        "wall_s": round(wall, 1),
        "jobs": sum(int(entry["jobs"]) for entry in profile.values()),
        "job_s": round(sum(entry["s"] for entry in profile.values()), 1),
    }


def side_by_side(before: Path, after: Path, before_src: Path, rounds: int) -> dict:
    """``rounds`` of :func:`stage` on copies of the two runs, before and after alternating."""
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        copies = {name: Path(tmp) / name for name in runs}
        shutil.copytree(before, copies["before"], symlinks=True)
        shutil.copytree(after, copies["after"], symlinks=True)
        for _ in range(rounds):
            runs["before"].append(stage(copies["before"], before_src))
            runs["after"].append(stage(copies["after"], REPO))
    medians = {
        name: {key: statistics.median(r[key] for r in found) for key in ("wall_s", "job_s")}
        for name, found in runs.items()
    }
    return {
        "before_src": str(before_src),
        "rounds": rounds,
        **runs,
        "median": medians,
        "ratio": {
            key: round(medians["before"][key] / medians["after"][key], 2) for key in ("wall_s", "job_s")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a run, one job per model × variant")
    parser.add_argument("--after", type=Path, required=True, help="the same config's run, one job per model")
    parser.add_argument("--variants", type=Path, nargs="*", default=[], help="more runs like --before")
    parser.add_argument("--starts", type=int, default=5, help="fresh interpreters importing the model code")
    parser.add_argument("--rounds", type=int, default=0, help="side-by-side reruns of the two stages")
    parser.add_argument("--before-src", type=Path, help="with --rounds: the checkout whose code ran --before")
    args = parser.parse_args()
    if args.rounds and not args.before_src:
        parser.error("--rounds needs --before-src")
    result = {
        "model_start": model_start(args.starts),
        "before": run(args.before),
        "after": run(args.after),
        "outputs": same_bytes(args.before, args.after),
        "per_variant": [per_variant(workdir) for workdir in (args.before, *args.variants)],
    }
    if args.rounds:
        result["side_by_side"] = side_by_side(args.before, args.after, args.before_src, args.rounds)
    write("model_jobs", result)


if __name__ == "__main__":
    main()
