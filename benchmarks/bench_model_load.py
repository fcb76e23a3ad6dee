"""Model load: the safetensors cache vs converting the GGUF (the embedded SmolLM2), and a model
job's start (import torch, import the model code, load the model) with this checkout's code against
a baseline commit's, each in fresh interpreters, alternating.

python benchmarks/bench_model_load.py [--repeats 3] [--starts 5] [--baseline a6a49a9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import EMBEDDED_SPEC, best_of, write  # noqa: E402

from attnscope import models  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PHASES = ("import_torch_s", "import_models_s", "load_model_s")
"""A model job's start, phase by phase: what ``scripts/*.py`` do before their first line of work."""
START = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
from attnscope import models
t2 = time.perf_counter()
torch.set_num_threads({threads})
models.load_model({model_dir!r})
t3 = time.perf_counter()
assert models.__file__.startswith({src!r}), models.__file__
print(json.dumps([t1 - t0, t2 - t1, t3 - t2]))
"""


def source_tree(commit: str, into: Path) -> Path:
    """The ``src/`` of ``commit`` (``git archive``), unpacked under ``into``."""
    archive = subprocess.run(["git", "archive", commit, "src"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def job_start(src: Path, model_dir: Path, threads: int) -> dict[str, float]:
    """One fresh interpreter's start with the package at ``src``: its phases and its whole wall time
    (interpreter start and exit included)."""
    code = START.format(threads=threads, model_dir=str(model_dir), src=str(src))
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    wall = time.perf_counter() - start
    return dict(zip(PHASES, json.loads(out.splitlines()[-1]), strict=True)) | {"process_s": wall}


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    """The median and the fastest of each phase over ``runs``."""
    return {
        key: {
            "median": round(statistics.median(r[key] for r in runs), 2),
            "min": round(min(r[key] for r in runs), 2),
        }
        for key in runs[0]
    }


def compare_starts(baseline: str, model_dir: Path, starts: int, threads: int) -> dict[str, Any]:
    """The job start of ``baseline``'s code and this checkout's, alternating, ``starts`` times each."""
    with tempfile.TemporaryDirectory() as tmp:
        old_src = source_tree(baseline, Path(tmp))
        runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this_checkout": []}
        for _ in range(starts):
            runs["baseline"].append(job_start(old_src, model_dir, threads))
            runs["this_checkout"].append(job_start(REPO / "src", model_dir, threads))
    result: dict[str, Any] = {"baseline_commit": baseline, "starts": starts}
    result |= {name: summary(r) for name, r in runs.items()}
    result["speedup_median"] = {
        key: round(result["baseline"][key]["median"] / result["this_checkout"][key]["median"], 2)
        for key in result["baseline"]
    }
    return result


def compare_weight_reads(weights: Path, repeats: int) -> dict[str, float]:
    """The cache's weights read by ``from_pretrained`` (the baseline's route) and by
    :func:`attnscope.models.assign_safetensors`, in this process after its first load (warm: a job
    starts cold, see :func:`compare_starts`), alternating: the fastest of each."""
    routes = {
        "from_pretrained_s": lambda: models.AutoModelForCausalLM.from_pretrained(
            weights, dtype=torch.float32, attn_implementation="eager"
        ),
        "assign_safetensors_s": lambda: models.assign_safetensors(weights),
    }
    best = dict.fromkeys(routes, float("inf"))
    for _ in range(repeats):
        for name, route in routes.items():
            best[name] = min(best[name], best_of(1, route)[0])
    return {name: round(s, 3) for name, s in best.items()} | {
        "speedup": round(best["from_pretrained_s"] / best["assign_safetensors_s"], 1)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--starts", type=int, default=5, help="fresh job starts per side")
    parser.add_argument("--baseline", default="a6a49a9", help="the commit whose job start is the reference")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        prepare_s, _ = best_of(1, lambda: models.prepare_model("smollm2", EMBEDDED_SPEC, tmp))
        starts = compare_starts(args.baseline, Path(tmp), args.starts, args.threads)
        cache_s = gguf_s = float("inf")
        gguf = models.embedded_gguf_path(EMBEDDED_SPEC)
        for _ in range(args.repeats):  # alternate, so both see the same machine load
            cache_s = min(cache_s, best_of(1, lambda: models.load_model(tmp))[0])
            gguf_s = min(gguf_s, best_of(1, lambda: models.dequantize_embedded(EMBEDDED_SPEC, gguf))[0])
        weights = compare_weight_reads(Path(tmp) / models.WEIGHTS_DIR, args.starts)
    write(
        "model_load",
        {
            "gguf_load_s": round(gguf_s, 2),
            "cache_load_s": round(cache_s, 2),
            "speedup": round(gguf_s / cache_s, 1),
            "prepare_once_s": round(prepare_s, 2),
            "job_start": starts,
            "weights_read": weights,
        },
    )


if __name__ == "__main__":
    main()
