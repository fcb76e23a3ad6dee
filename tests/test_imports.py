"""Modules that must start fast import no heavy library they do not use, checked in a fresh
interpreter (this test process has imported everything already)."""

import json
import subprocess
import sys

import pytest

HEAVY = ("matplotlib", "torch", "transformers")


def imported_after(module: str) -> set[str]:
    """The top-level packages (and attnscope modules) loaded by importing ``module``."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


@pytest.mark.parametrize(
    "module",
    [
        "attnscope.mapdata",
        "attnscope.mapview",
        "attnscope.explorer.server",
        "attnscope.claims",
        "attnscope.comparison",
        "attnscope.paths",
        "attnscope.resources",
        "attnscope.rollout",
        "attnscope.headtypes",
    ],
)
def test_no_heavy_imports(module):
    """The figures' data reader and the explorer's server draw nothing with matplotlib (the
    explorer imports it only when it builds its colour tables); they, the claims and the
    learned-vs-random comparison (tables in, tables out) run no model, nor does the rollout (stored
    maps in) or the head-type scores until a model is run (torch is imported there); the
    Snakefile's imports (the results paths, the resource requests) start every snakemake command."""
    loaded = imported_after(module)
    assert not loaded & set(HEAVY), f"{module} imports {sorted(loaded & set(HEAVY))}"
    assert "attnscope.plots" not in loaded, f"{module} imports the plotting package"


def test_check_sees_a_heavy_import():
    """The check above can fail: the plotting package does load matplotlib."""
    assert "matplotlib" in imported_after("attnscope.plots")
