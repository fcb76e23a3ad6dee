"""The choices table's cost against the rest of rule attention_metrics, on a finished store.

    python benchmarks/bench_choices.py --store results/attention/smollm2/trained/animals-k8.zarr

Rounds alternate :func:`attnscope.metrics.metrics_table` (what the rule computed before the
choices table: spectral ranks of every stored map) and :func:`attnscope.choices.choices_table`
(the added output), plus reading every prompt's ``head_mean`` alone (part of both). BLAS runs
on one thread, as in the rule's job (Snakemake sets ``OPENBLAS_NUM_THREADS`` to the rule's
``threads``, 1). Writes ``benchmarks/out/choices.json``: best times and the median over the
rounds of each round's ratio (the shared machine's load drifts).
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"  # before numpy loads BLAS

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from common import write  # noqa: E402

from attnscope import choices, metrics  # noqa: E402
from attnscope.store import open_store, prompt_groups  # noqa: E402


def read_head_means(path: str) -> int:
    return sum(group["head_mean"][...].size for group in prompt_groups(open_store(path)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", default="results/attention/smollm2/trained/animals-k8.zarr")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    modes = {
        "metrics_table": lambda: metrics.metrics_table(args.store, progress=False),
        "choices_table": lambda: choices.choices_table(args.store),
        "read_head_mean": lambda: read_head_means(args.store),
    }
    times: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.repeats):
        for name, fn in modes.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    ratios = [c / m for c, m in zip(times["choices_table"], times["metrics_table"])]
    root = open_store(args.store)
    write(
        "choices",
        {
            "store": args.store,
            "prompts": len(root.attrs["prompts"]),
            "layers": root.attrs["num_layers"],
            "rounds": args.repeats,
            "best_seconds": {name: min(t) for name, t in times.items()},
            "choices_over_metrics": {"best": min(times["choices_table"]) / min(times["metrics_table"])}
            | {"median_of_rounds": statistics.median(ratios)},
        },
    )


if __name__ == "__main__":
    main()
