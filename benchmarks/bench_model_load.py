"""Model load: the safetensors cache vs converting the GGUF (the embedded SmolLM2).

python benchmarks/bench_model_load.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import EMBEDDED_SPEC, best_of, write  # noqa: E402

from attnscope import models  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        prepare_s, _ = best_of(1, lambda: models.prepare_model("smollm2", EMBEDDED_SPEC, tmp))
        cache_s = gguf_s = float("inf")
        gguf = models.embedded_gguf_path(EMBEDDED_SPEC)
        for _ in range(args.repeats):  # alternate, so both see the same machine load
            cache_s = min(cache_s, best_of(1, lambda: models.load_model(tmp))[0])
            gguf_s = min(gguf_s, best_of(1, lambda: models.dequantize_embedded(EMBEDDED_SPEC, gguf))[0])
    write(
        "model_load",
        {
            "gguf_load_s": round(gguf_s, 2),
            "cache_load_s": round(cache_s, 2),
            "speedup": round(gguf_s / cache_s, 1),
            "prepare_once_s": round(prepare_s, 2),
        },
    )


if __name__ == "__main__":
    main()
