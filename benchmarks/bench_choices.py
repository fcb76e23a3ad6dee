"""The analysis choices' cost on a long prompt: layers in chunks, as the capture measures them.

    python benchmarks/bench_choices.py [--synthetic-tokens 1024]

One synthetic prompt of Mistral-7B's shape (``--synthetic-tokens`` tokens, 32 layers, seeded
random causal maps, shots of 14 tokens) is measured as the capture does it (layers in chunks
of ``choices.CHUNK_VALUES`` values), and once with all layers at once: time and the peak
resident memory added. BLAS runs on one thread, as in the capture. Writes
``benchmarks/out/choices.json``. (The choices' cost within the extraction of the embedded
model is part of ``bench_attention.py``'s ``extract`` mode.)
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"  # before numpy loads BLAS

import argparse  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from common import write  # noqa: E402

from attnscope import choices  # noqa: E402


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
    parser.add_argument("--synthetic-tokens", type=int, default=1024)
    args = parser.parse_args()
    write(
        "choices",
        {
            "tokens": args.synthetic_tokens,
            "layers": 32,
            "chunked": measure_synthetic(args.synthetic_tokens, choices.CHUNK_VALUES),
            "all_layers_at_once": measure_synthetic(args.synthetic_tokens, 1 << 62),
        },
    )


if __name__ == "__main__":
    main()
