"""Knockout effects: a clue's log-probabilities with and without a knockout, whole forward passes
against the prompt's unchanged positions run once (the embedded SmolLM2).

python benchmarks/bench_knockout.py [--prompts 16] [--repeats 2]

Builds the Animals k=3 prompts of the default config, appends a shot clue to each as the clue to
score (teacher forcing needs tokens, not a generated clue), then times, alternately in one run,
both routes of `attnscope.knockout.clue_logprobs` per edge set, as the `knockout` rule runs them
(one thread): `whole` (two forward passes over prompt and clue) and `shared` (the positions
before the first blocked query once, the rest with and without the knockout).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import animals_prompts, embedded_model_dir, write  # noqa: E402

from attnscope import knockout, models, prompts, variants  # noqa: E402

TIMED_EDGE_SETS = (variants.TARGET_SHOTWORDS, variants.ACROSS_SHOTS)
"""The edge sets timed: one a target row blocks, one every shot row blocks."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    loaded = models.load_model(embedded_model_dir())
    clues, table = animals_prompts(loaded.tokenizer, args.prompts)
    texts = clues["clue"].tolist()
    cases = []  # (edge set, prompt ids, clue ids, knockout, first blocked query)
    for edges in TIMED_EDGE_SETS:
        for i, row in table.reset_index(drop=True).iterrows():
            prompt_ids = [int(t) for t in row["input_ids"]]
            clue_ids = loaded.tokenizer.encode(" " + texts[i % len(texts)], add_special_tokens=False)
            blocker = knockout.applied(
                loaded.model, f"knockout-{edges}-L0-9", prompts.prompt_annotation(row), len(prompt_ids)
            )
            cases.append(
                (edges, prompt_ids, clue_ids, blocker, knockout.first_blocked_query(blocker.blocked))
            )

    seconds = {(edges, route): float("inf") for edges in TIMED_EDGE_SETS for route in ("whole", "shared")}
    results: dict[tuple[str, str], list[np.ndarray]] = {}
    for _ in range(args.repeats):  # alternate, so both routes see the same machine load
        for route in ("whole", "shared"):
            for edges in TIMED_EDGE_SETS:
                start, out = time.perf_counter(), []
                for case_edges, prompt_ids, clue_ids, blocker, first in cases:
                    if case_edges == edges:
                        shared = first if route == "shared" else 0
                        out += knockout.clue_logprobs(
                            loaded.model, prompt_ids, clue_ids, [None, blocker], shared
                        )
                seconds[edges, route] = min(seconds[edges, route], time.perf_counter() - start)
                results[edges, route] = out
    n = len(table)
    write(
        "knockout",
        {
            "prompts": n,
            "prompt_tokens_mean": round(float(table["n_tokens"].mean()), 1),
            "threads": 1,
            **{
                edges: {
                    "first_blocked_query_mean": round(
                        float(np.mean([c[4] for c in cases if c[0] == edges])), 1
                    ),
                    "whole_s_per_prompt": round(seconds[edges, "whole"] / n, 3),
                    "shared_s_per_prompt": round(seconds[edges, "shared"] / n, 3),
                    "speedup": round(seconds[edges, "whole"] / seconds[edges, "shared"], 2),
                    "max_abs_difference": float(
                        max(
                            np.abs(a - b).max()
                            for a, b in zip(results[edges, "whole"], results[edges, "shared"], strict=True)
                        )
                    ),
                }
                for edges in TIMED_EDGE_SETS
            },
        },
    )


if __name__ == "__main__":
    main()
