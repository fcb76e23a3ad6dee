"""Knockout effects: a clue's log-probabilities with and without a knockout, whole forward passes
against the prompt's unchanged positions run once (the embedded SmolLM2).

python benchmarks/bench_knockout.py [--prompts 16] [--repeats 2] [--stage-prompts 4] [--before REV]

Builds the Animals k=3 prompts of the default config, appends a shot clue to each as the clue to
score (teacher forcing needs tokens, not a generated clue), then times, alternately in one run,
both routes of `attnscope.knockout.clue_logprobs` per edge set, as the `knockout` rule runs them
(one thread): `whole` (two forward passes over prompt and clue) and `shared` (the positions
before the first blocked query once, the rest with and without the knockout).

Then the stage (`stage`): every knockout of config.yaml's `knockout:` on the first
``--stage-prompts`` prompts, each shot clue as the trained clue, without greedy decoding (the
default), by three routes alternating in one run: `before` (`attnscope/knockout.py` as commit
``--before`` has it, one `prompt_effects` call per knockout, as one job each ran it), `per_knockout`
(this tree, one call per knockout) and `per_edge_set` (this tree, one call per `knockout.edges`
entry, all its windows). The rows of each route must equal `before`'s (bytes of every column).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, animals_prompts, embedded_model_dir, write  # noqa: E402

from attnscope import knockout, models, prompts, variants  # noqa: E402

TIMED_EDGE_SETS = (variants.TARGET_SHOTWORDS, variants.ACROSS_SHOTS)
"""The edge sets timed: one a target row blocks, one every shot row blocks."""
STAGE_ROUTES = ("before", "per_knockout", "per_edge_set")


def module_at(rev: str) -> ModuleType:
    """``attnscope.knockout`` as commit ``rev`` has it (imported beside this tree's)."""
    root = OUT.parent.parent
    source = subprocess.run(
        ["git", "show", f"{rev}:src/attnscope/knockout.py"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    spec = importlib.util.spec_from_loader("knockout_before", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(compile(source, f"{rev}:src/attnscope/knockout.py", "exec"), module.__dict__)
    return module


def stage(loaded: models.LoadedModel, n_prompts: int, before: str) -> dict[str, object]:
    """Every default knockout on ``n_prompts`` prompts by the three :data:`STAGE_ROUTES`, alternated."""
    clues, table = animals_prompts(loaded.tokenizer, n_prompts)
    table = table.reset_index(drop=True)
    texts = clues["clue"].tolist()
    trained = pd.DataFrame({"prompt_index": table["prompt_index"], "clue": texts[: len(table)]})
    trained["generated_ids"] = [
        loaded.tokenizer.encode(" " + clue, add_special_tokens=False) for clue in trained["clue"]
    ]
    options = yaml.safe_load((OUT.parent.parent / "config.yaml").read_text())["knockout"]
    sets = {
        edges: variants.knockout_variants(
            {**options, "edges": [edges]}, loaded.model.config.num_hidden_layers
        )
        for edges in options["edges"]
    }
    old = module_at(before)
    routes = {  # per edge set: each route's calls (effects function, knockout names)
        "before": lambda names: [(old.prompt_effects, name) for name in names],
        "per_knockout": lambda names: [(knockout.prompt_effects, name) for name in names],
        "per_edge_set": lambda names: [(knockout.prompt_effects, names)],
    }
    seconds, rows = dict.fromkeys(STAGE_ROUTES, 0.0), {route: [] for route in STAGE_ROUTES}
    for names in sets.values():  # the routes alternate edge set by edge set, under the same load
        for route in STAGE_ROUTES:
            start = time.perf_counter()
            for effects, chosen in routes[route](names):
                rows[route].append(effects(loaded.model, loaded.tokenizer, table, trained, chosen, False))
            seconds[route] += time.perf_counter() - start
    start = time.perf_counter()
    models.load_model(embedded_model_dir())
    load_s = time.perf_counter() - start
    knockouts = sum(len(names) for names in sets.values())
    jobs = {"before": knockouts, "per_knockout": knockouts, "per_edge_set": len(sets)}
    expected = pd.concat(rows["before"], ignore_index=True)
    for route in STAGE_ROUTES[1:]:
        pd.testing.assert_frame_equal(pd.concat(rows[route], ignore_index=True), expected, check_exact=True)
    return {
        "prompts": len(table),
        "knockouts": knockouts,
        "edge_sets": len(sets),
        "model_load_s": round(load_s, 2),
        **{
            route: {
                "jobs": jobs[route],
                "s_per_prompt": round(seconds[route] / len(table), 2),
                "speedup": round(seconds["before"] / seconds[route], 2),
            }
            for route in STAGE_ROUTES
        },
        "rows_equal_before": True,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--stage-prompts", type=int, default=4)
    parser.add_argument(
        "--before", default="a6a49a9", help="the commit whose knockout stage is timed as `before`"
    )
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
            "stage": stage(loaded, args.stage_prompts, args.before),
        },
    )


if __name__ == "__main__":
    main()
