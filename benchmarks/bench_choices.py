"""The choices table's cost against the rest of rule attention_metrics, on a finished store.

    python benchmarks/bench_choices.py --store results/attention/smollm2/trained/animals-k8.zarr

Rounds alternate :func:`attnscope.metrics.metrics_table` (what the rule computed before the
choices table: spectral ranks of every stored map) and :func:`attnscope.choices.choices_table`
(the added output), plus reading every prompt's ``head_mean`` alone (part of both). BLAS runs
on one thread, as in the rule's job (Snakemake sets ``OPENBLAS_NUM_THREADS`` to the rule's
``threads``, 1). Writes ``benchmarks/out/choices.json``: best wall-clock and CPU times and
the median over the rounds of each round's ratio (the shared machine's load drifts; CPU time
drifts less).

First, before anything else has raised the process's peak memory, one synthetic prompt of
Mistral-7B's shape (``--synthetic-tokens`` tokens, 32 layers, seeded random causal maps, shots
of 14 tokens) is measured as :func:`~attnscope.choices.choices_table` does it (layers in
chunks of ``choices.CHUNK_VALUES`` values), and once with all layers at once: time and the
peak resident memory added.
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"  # before numpy loads BLAS

import argparse  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from common import write  # noqa: E402

from attnscope import choices, metrics  # noqa: E402
from attnscope.store import open_store, prompt_groups  # noqa: E402


def read_head_means(path: str) -> int:
    return sum(group["head_mean"][...].size for group in prompt_groups(open_store(path)))


def synthetic_prompt(n: int, num_layers: int = 32) -> tuple[np.ndarray, list[str], list[int]]:
    """Head-mean maps [layer, n, n] (float16) and token labels shaped like a long few-shot prompt."""
    rng = np.random.default_rng(0)
    segment, shot = ["template"] * 20 + ["instruction"] * 50, [0] * 70
    while len(segment) < n - 10:
        segment += ["template", "shot_word", "shot_word"] + ["shot_clue"] * 10 + ["template"]
        shot += [shot[-1] + 1] * 14
    segment += ["target"] + ["generated"] * (n - len(segment) - 1)
    shot += [0] * (n - len(shot))
    weights = np.tril(rng.random((n, n), dtype=np.float32) ** 8)
    maps = (weights / weights.sum(axis=1, keepdims=True)).astype(np.float16)
    return np.ascontiguousarray(np.broadcast_to(maps, (num_layers, n, n))), segment, shot


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_synthetic(n: int, chunk_values: int) -> dict[str, float]:
    """Time and added peak memory of one synthetic prompt measured in chunks of ``chunk_values``."""
    maps, segment, shot = synthetic_prompt(n)
    step = max(1, chunk_values // (n * n))
    before, start = peak_mib(), time.perf_counter()
    for first in range(0, len(maps), step):
        choices.prompt_choices(maps[first : first + step], segment, shot)
    return {"seconds": time.perf_counter() - start, "peak_added_mib": peak_mib() - before}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", default="results/attention/smollm2/trained/animals-k8.zarr")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--synthetic-tokens", type=int, default=1024)
    args = parser.parse_args()
    synthetic = {
        "tokens": args.synthetic_tokens,
        "layers": 32,
        "chunked": measure_synthetic(args.synthetic_tokens, choices.CHUNK_VALUES),
        "all_layers_at_once": measure_synthetic(args.synthetic_tokens, 1 << 62),
    }
    modes = {
        "metrics_table": lambda: metrics.metrics_table(args.store, progress=False),
        "choices_table": lambda: choices.choices_table(args.store),
        "read_head_mean": lambda: read_head_means(args.store),
    }
    times: dict[str, list[float]] = {name: [] for name in modes}
    cpu: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.repeats):
        for name, fn in modes.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)

    def ratios(seconds: dict[str, list[float]]) -> dict[str, float]:
        per_round = [c / m for c, m in zip(seconds["choices_table"], seconds["metrics_table"])]
        best = min(seconds["choices_table"]) / min(seconds["metrics_table"])
        return {"best": best, "median_of_rounds": statistics.median(per_round)}

    root = open_store(args.store)
    write(
        "choices",
        {
            "store": args.store,
            "prompts": len(root.attrs["prompts"]),
            "layers": root.attrs["num_layers"],
            "rounds": args.repeats,
            "best_seconds": {name: min(t) for name, t in times.items()},
            "best_cpu_seconds": {name: min(t) for name, t in cpu.items()},
            "choices_over_metrics": ratios(times),
            "choices_over_metrics_cpu": ratios(cpu),
            "synthetic_prompt": synthetic,
        },
    )


if __name__ == "__main__":
    main()
