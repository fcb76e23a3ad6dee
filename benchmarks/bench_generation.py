"""Batched vs one-at-a-time greedy generation on the embedded model (same outputs).

    python benchmarks/bench_generation.py [--prompts 16] [--batch-size 8] [--repeats 2]

Builds the Animals k=3 prompts of the default config, then times batch size 1 and
the batched path alternately in one run; the ratio is the figure the README quotes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_of, embedded_model_dir, write  # noqa: E402

from attnscope import data, generation, models, prompts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config = yaml.safe_load(Path("config.yaml").read_text())
    clues, _ = data.import_clues(config["data"]["clue_files"])
    path = config["data"]["targets"]["Animals"]
    targets = data.read_target_list(path, "Animals", "data.targets.Animals").words[: args.prompts]
    loaded = models.load_model(embedded_model_dir())
    table = prompts.build_prompts(
        clues, "animals-k3", {"category": "Animals", "k": 3, "seed": 0}, targets, loaded.tokenizer
    )
    ids = list(table["input_ids"])

    def run(batch_size: int) -> list[generation.Generation]:
        return generation.generate(
            loaded.model, loaded.tokenizer, ids, args.max_new_tokens, batch_size, progress=False
        )

    sequential_s = batched_s = float("inf")
    for _ in range(args.repeats):  # alternate, so both see the same machine load
        s, sequential = best_of(1, lambda: run(1))
        b, batched = best_of(1, lambda: run(args.batch_size))
        sequential_s, batched_s = min(sequential_s, s), min(batched_s, b)
    same = [g.generated_ids for g in sequential] == [g.generated_ids for g in batched]
    write(
        "generation",
        {
            "command": "python benchmarks/bench_generation.py",
            "prompts": len(ids),
            "batch_size": args.batch_size,
            "max_new_tokens": args.max_new_tokens,
            "generated_tokens": sum(len(g.generated_ids) for g in batched),
            "sequential_s": round(sequential_s, 2),
            "batched_s": round(batched_s, 2),
            "speedup": round(sequential_s / batched_s, 2),
            "same_outputs": same,
        },
    )
    if not same:
        raise SystemExit("batched and sequential outputs differ")


if __name__ == "__main__":
    main()
