"""Greedy generation routes on the embedded model, side by side (same outputs).

    python benchmarks/bench_generation.py [--prompts 16] [--batch-size 8] [--repeats 2]

Builds the Animals k=3 prompts of the default config, then times, alternately in one run:
one prompt at a time (batch 1, no shared prefix: the reference route), batched without
the shared prefix, batched behind the shared-prefix KV cache in fixed batches (the next
batch starts when the last is done: the earlier route), and the same with the next prompts
joining the running ones when half the rows are free (the rule's route). The ratios to the
first are the figures the README quotes. The JSON's
``profile`` splits each route's last run into its model calls: prefills (calls, tokens,
seconds) and decode steps (seconds, and steps and mean milliseconds per batch size).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import animals_prompts, best_of, embedded_model_dir, write  # noqa: E402

from attnscope import generation, models  # noqa: E402


def call_profile(calls: list[tuple[int, int, float]], total: float) -> dict:
    """Where a route's ``total`` seconds went: prefill calls (more than one token per row),
    decode steps by batch size, and the rest (Python around the model: decoding text, caches)."""
    prefill = [(b, n, s) for b, n, s in calls if n > 1]
    steps: dict[int, list[float]] = defaultdict(list)
    for b, n, s in calls:
        if n == 1:
            steps[b].append(s)
    decode_s = sum(map(sum, steps.values()))
    prefill_s = sum(s for _, _, s in prefill)
    return {
        "prefill_calls": len(prefill),
        "prefill_tokens": sum(b * n for b, n, _ in prefill),
        "prefill_s": round(prefill_s, 2),
        "decode_steps": sum(map(len, steps.values())),
        "decode_s": round(decode_s, 2),
        "decode_steps_ms_by_batch": {
            b: [len(v), round(1000 * sum(v) / len(v), 1)] for b, v in sorted(steps.items())
        },
        "other_s": round(total - prefill_s - decode_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    loaded = models.load_model(embedded_model_dir())
    _, table = animals_prompts(loaded.tokenizer, args.prompts)
    ids = list(table["input_ids"])

    routes = {  # batch size, shared prefix, join
        "sequential": (1, False, True),
        "batched": (args.batch_size, False, True),
        "shared_prefix_fixed_batches": (args.batch_size, True, False),
        "shared_prefix": (args.batch_size, True, True),
    }

    calls: list[tuple[int, int, float]] = []  # (batch, new tokens per row, seconds) of each model call
    forward = loaded.model.forward

    def timed_forward(*args, **kwargs):
        start = time.perf_counter()
        out = forward(*args, **kwargs)
        calls.append((*kwargs["input_ids"].shape, time.perf_counter() - start))
        return out

    loaded.model.forward = timed_forward

    def run(route: str) -> list[generation.Generation]:
        calls.clear()
        batch_size, share_prefix, join = routes[route]
        return generation.generate(
            loaded.model,
            loaded.tokenizer,
            ids,
            args.max_new_tokens,
            batch_size,
            progress=False,
            share_prefix=share_prefix,
            join=join,
        )

    seconds = dict.fromkeys(routes, float("inf"))
    outputs, profiles = {}, {}
    for _ in range(args.repeats):  # alternate, so every route sees the same machine load
        for route in routes:
            s, outputs[route] = best_of(1, lambda route=route: run(route))
            seconds[route] = min(seconds[route], s)
            profiles[route] = call_profile(calls, s)
    reference = [g.generated_ids for g in outputs["sequential"]]
    same = all([g.generated_ids for g in out] == reference for out in outputs.values())
    write(
        "generation",
        {
            "prompts": len(ids),
            "batch_size": args.batch_size,
            "max_new_tokens": args.max_new_tokens,
            "shared_prefix_tokens": generation.shared_prefix_length(ids),
            "mean_prompt_tokens": round(sum(map(len, ids)) / len(ids), 1),
            "generated_tokens": sum(len(g) for g in reference),
            **{f"{route}_s": round(s, 2) for route, s in seconds.items()},
            "speedup_batched": round(seconds["sequential"] / seconds["batched"], 2),
            "speedup_shared_prefix_fixed_batches": round(
                seconds["sequential"] / seconds["shared_prefix_fixed_batches"], 2
            ),
            "speedup_shared_prefix": round(seconds["sequential"] / seconds["shared_prefix"], 2),
            "same_outputs": same,
            "profile": profiles,
        },
    )
    if not same:
        raise SystemExit("the routes' outputs differ")


if __name__ == "__main__":
    main()
