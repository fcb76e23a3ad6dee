"""How far the default run's numbers move with the CPU's kernels: one experiment's clues, attention
store and metrics and the trained model's spectra, run cold twice under two ``ATEN_CPU_CAPABILITY``
values, compared file by file.

    python benchmarks/bench_kernels.py [--capabilities default avx2] [--experiment animals-k3] [--cores 2]

torch picks its CPU kernels by the processor's capability (AVX-512, AVX2, or the default scalar
code), and ``ATEN_CPU_CAPABILITY`` forces a lower one, so one machine shows what another CPU
generation would compute. MKL's and oneDNN's matmuls dispatch on their own and are not covered.
Writes benchmarks/out/kernels.json: per Parquet table the columns that differ (largest absolute
difference, rows that differ), per Zarr array the elements that differ (float16 arrays: the largest
difference in float16 steps; others: the largest absolute difference), and which generated clues differ.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_workflow import zarr_arrays  # noqa: E402
from common import write  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def targets(model: str, experiment: str) -> list[str]:
    """One experiment's clues, store and metrics on the trained model, and the trained spectra."""
    return [
        f"results/clues/{model}/trained/{experiment}.parquet",
        f"results/metrics/{model}/trained/{experiment}.parquet",
        f"results/spectra/{model}/trained.parquet",
    ]


def run(workdir: Path, capability: str, cores: int, wanted: list[str]) -> float:
    """Wall seconds of a cold run of ``wanted`` in ``workdir`` under ``ATEN_CPU_CAPABILITY=capability``."""
    workdir.mkdir(parents=True)
    (workdir / "config.yaml").write_bytes((REPO / "config.yaml").read_bytes())
    os.symlink(REPO / "data", workdir / "data")
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "--cores", str(cores), *wanted],
        capture_output=True,
        text=True,
        env=os.environ | {"ATEN_CPU_CAPABILITY": capability},
    )
    if done.returncode != 0:
        raise SystemExit(f"snakemake failed under {capability}:\n{done.stderr[-4000:]}")
    return time.perf_counter() - start


def table_differences(path: Path, other: Path) -> dict[str, dict[str, float]]:
    """Per column of a Parquet table that differs: rows that differ and the largest absolute difference."""
    mine, theirs = pd.read_parquet(path), pd.read_parquet(other)
    found = {}
    for column in mine.columns:
        a, b = mine[column], theirs[column]
        if pd.api.types.is_float_dtype(a):
            x, y = a.to_numpy(np.float64), b.to_numpy(np.float64)
            differ = ~((x == y) | (np.isnan(x) & np.isnan(y)))
            if differ.any():
                found[column] = {
                    "rows": int(differ.sum()),
                    "max_abs": float(np.nanmax(np.abs(x - y)[differ])),
                }
        elif not a.astype(str).equals(b.astype(str)):
            found[column] = {"rows": int((a.astype(str) != b.astype(str)).sum())}
    return found


def array_differences(a: np.ndarray, b: np.ndarray) -> dict[str, float] | None:
    """Elements that differ and by how much (float16: in float16 steps), or None if equal."""
    differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    if not differ.any():
        return None
    out: dict[str, float] = {"elements": int(differ.sum()), "of": int(a.size)}
    if a.dtype == np.float16:  # non-negative maps: bit patterns order like values
        steps = np.abs(a.view(np.uint16).astype(np.int32) - b.view(np.uint16).astype(np.int32))
        out["max_float16_steps"] = int(steps.max())
    out["max_abs"] = float(np.abs(a.astype(np.float64) - b.astype(np.float64))[differ].max())
    return out


def compare(results: Path, reference: Path) -> dict:
    """Every Parquet table and Zarr array of ``results`` against ``reference``."""
    tables = {}
    for path in sorted(results.rglob("*.parquet")):
        name = str(path.relative_to(results))
        tables[name] = (
            table_differences(path, reference / name)
            if path.read_bytes() != (reference / name).read_bytes()
            else "identical"
        )
    arrays = {}
    for store in sorted(results.rglob("*.zarr")):
        mine, theirs = zarr_arrays(store), zarr_arrays(reference / store.relative_to(results))
        for name, values in mine.items():
            found = array_differences(values, theirs[name])
            if found:
                arrays[f"{store.relative_to(results)}/{name}"] = found
    return {"tables": tables, "arrays_that_differ": arrays}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capabilities", nargs=2, default=["default", "avx2"])
    parser.add_argument("--experiment", default="animals-k3")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    wanted = targets(args.model, args.experiment)
    root = Path(tempfile.mkdtemp(prefix="attnscope-kernels-"))
    seconds = {c: round(run(root / c, c, args.cores, wanted), 1) for c in args.capabilities}
    first, second = (root / c / "results" for c in args.capabilities)
    clues = [pd.read_parquet(r / wanted[0].removeprefix("results/")) for r in (first, second)]
    write(
        "kernels",
        {
            "capabilities": args.capabilities,
            "native_capability": subprocess.run(
                [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                capture_output=True,
                text=True,
                env={k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"},
            ).stdout.strip(),
            "targets": wanted,
            "seconds": seconds,
            "clues_that_differ": int(
                (clues[0]["generated_ids"].map(list) != clues[1]["generated_ids"].map(list)).sum()
            ),
            "clues": len(clues[0]),
            **compare(second, first),
        },
    )


if __name__ == "__main__":
    main()
