"""Helpers shared by the benchmark scripts: the prepared embedded model, timing, output."""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import yaml

from attnscope import data, models, prompts

OUT = Path(__file__).resolve().parent / "out"
LOAD_AT_START = round(os.getloadavg()[0], 2)
"""The 1-minute load average when the benchmark started (other processes slow it down)."""
EMBEDDED_SPEC = yaml.safe_load((OUT.parent.parent / "config.yaml").read_text())["models"]["smollm2"]
"""The embedded SmolLM2's spec as config.yaml gives it (init std included)."""


def embedded_model_dir(path: str | Path = "results/models/smollm2") -> Path:
    """The prepared embedded model (prepared into ``path`` if it is not there yet)."""
    path = Path(path)
    if not (path / models.MANIFEST).is_file():
        models.prepare_model("smollm2", EMBEDDED_SPEC, path)
    return path


def animals_prompts(tokenizer: Any, n: int) -> tuple[Any, Any]:
    """(the sample clues, the Animals k = 3 prompt table of the default config's first ``n``
    targets), the prompts the generation and knockout benchmarks time."""
    config = yaml.safe_load((OUT.parent.parent / "config.yaml").read_text())
    clues, _ = data.import_clues(config["data"]["clue_files"])
    path = config["data"]["targets"]["Animals"]
    targets = data.read_target_list(path, "Animals", "data.targets.Animals").words[:n]
    spec = {"category": "Animals", "k": 3, "seed": 0}
    return clues, prompts.build_prompts(clues, "animals-k3", spec, targets, tokenizer)


def best_of(repeats: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``repeats`` wall-clock timings of ``fn`` and its last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else the platform's processor string."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def ram_gib() -> float:
    """Total physical memory in GiB."""
    return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)


def machine() -> dict[str, Any]:
    """The machine a benchmark ran on: cores, CPU model, RAM, GPU, versions, torch's threads."""
    return {
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "ram_gib": ram_gib(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average_1min_start_end": [LOAD_AT_START, round(os.getloadavg()[0], 2)],
    }


MEASURED = ("src", "benchmarks/*.py", "rules", "scripts", "Snakefile", "config.yaml", "pyproject.toml")
"""The paths whose changes change what a benchmark measures (not docs, not other results)."""


def git_commit() -> str:
    """The checkout's commit, with ``-dirty`` if the code or config measured differs from it."""
    root = OUT.parent.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", *MEASURED)
    return commit + ("-dirty" if changed else "")


def provenance() -> dict[str, Any]:
    """How a result came about: the machine, the command line, the git commit, the UTC date."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(OUT.parent.parent)
    except ValueError:
        pass
    return {
        "machine": machine(),
        "command": shlex.join(["python", str(script), *sys.argv[1:]]),
        "commit": git_commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def write(name: str, result: dict[str, Any]) -> Path:
    """Write ``benchmarks/out/{name}.json`` (to a temporary file, then renamed) and print it."""
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.json"
    payload = {"benchmark": name, **provenance(), **result}
    text = json.dumps(payload, indent=2) + "\n"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    print(text, end="")
    return path
