"""Helpers shared by the benchmark scripts: the prepared embedded model, timing, output."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from attnscope import models

OUT = Path(__file__).resolve().parent / "out"
EMBEDDED_SPEC = yaml.safe_load((OUT.parent.parent / "config.yaml").read_text())["models"]["smollm2"]
"""The embedded SmolLM2's spec as config.yaml gives it (init std included)."""


def embedded_model_dir(path: str | Path = "results/models/smollm2") -> Path:
    """The prepared embedded model (prepared into ``path`` if it is not there yet)."""
    path = Path(path)
    if not (path / models.MANIFEST).is_file():
        models.prepare_model("smollm2", EMBEDDED_SPEC, path)
    return path


def best_of(repeats: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``repeats`` wall-clock timings of ``fn`` and its last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
    }


def write(name: str, result: dict[str, Any]) -> Path:
    """Write ``benchmarks/out/{name}.json`` and print it."""
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **result}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(payload, indent=2))
    return path
