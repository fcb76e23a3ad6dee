"""Imports run one way: every library module sits in a declared layer and imports only from its own
layer or those below, the import graph has no cycle, the theory and the plots never import each
other, and no library module imports the scripts, tests or benchmarks. Read from the sources (every
import statement, also those inside functions), so a lazy import against the layering counts too."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

LAYERS: tuple[tuple[str, ...], ...] = (
    # the bottom: formats, stores, writers, names; no model, no plan
    (
        "attnscope",
        "attnscope.chunks",
        "attnscope.data",
        "attnscope.io",
        "attnscope.matrices",
        "attnscope.paths",
        "attnscope.prepared",
        "attnscope.shape",
        "attnscope.stats",
        "attnscope.store",
        "attnscope.verdicts",
        "attnscope.zarrwrite",
    ),
    # the decoder's anatomy, the prompts, the variant names, the plan; the theory (numbers only)
    (
        "attnscope.architecture",
        "attnscope.config",
        "attnscope.configfile",
        "attnscope.evidence",
        "attnscope.mapview",
        "attnscope.prompts",
        "attnscope.resources",
        "attnscope.theory",
        "attnscope.variants",
    ),
    # models run and measured
    (
        "attnscope.attention",
        "attnscope.capture",
        "attnscope.choices",
        "attnscope.circuits",
        "attnscope.comparison",
        "attnscope.edgesets",
        "attnscope.effects",
        "attnscope.generation",
        "attnscope.headtable",
        "attnscope.headtypes",
        "attnscope.knockout",
        "attnscope.mapdata",
        "attnscope.metrics",
        "attnscope.models",
        "attnscope.promptgroup",
        "attnscope.rollout",
        "attnscope.spectra",
        "attnscope.spectrastore",
        "attnscope.streamed",
    ),
    # the claims, bottom up: evidence views and records, one module per measurement, the registry, the outputs
    ("attnscope.claims.views",),
    ("attnscope.claims.records",),
    (
        "attnscope.claims.attention",
        "attnscope.claims.clues",
        "attnscope.claims.knockout",
        "attnscope.claims.weights",
    ),
    ("attnscope.claims.registry",),
    ("attnscope.report", "attnscope.plots", "attnscope.explorer"),
    ("attnscope.claims.render", "attnscope.claims.evaluation"),
    ("attnscope.claims.across",),
    ("attnscope.claims",),
)
"""Bottom up; a name stands for its module and, for a package, every module below it that has no
layer of its own."""
APART = (("attnscope.theory", "attnscope.plots"), ("attnscope.plots", "attnscope.theory"))
"""(importer, imported) pairs that must not meet in either layer order: the theory computes the
numbers, the plots draw them."""
OUTSIDE = ("scripts", "tests", "benchmarks")
"""Top-level names no library module imports."""


def library_modules(src: Path = SRC) -> dict[str, tuple[str, bool]]:
    """Module name → (its source, whether it is a package's ``__init__``) for every module under ``src``."""
    found = {}
    for path in sorted((src / "attnscope").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path.read_text(encoding="utf-8"), package)
    return found


def imports_of(name: str, source: str, package: bool, known: set[str]) -> set[str]:
    """The modules that ``source`` (module ``name``) imports anywhere: attnscope modules (``from
    attnscope import x`` names module ``attnscope.x`` where there is one) and :data:`OUTSIDE` names."""
    found = set()
    here = name.split(".") if package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names
            ]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in OUTSIDE:
                found.add(target)
            elif target.split(".")[0] == "attnscope":
                while target not in known:
                    target = target.rpartition(".")[0]
                found.add(target)
    found.discard(name)
    return found


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module``'s own entry or, failing that, its nearest package's
    (below ``attnscope`` itself, whose entry is the package's ``__init__`` only)."""
    ranks = {name: rank for rank, names in enumerate(LAYERS) for name in names}
    if module in ranks:
        return ranks[module]
    while "." in (module := module.rpartition(".")[0]):
        if module in ranks:
            return ranks[module]
    return None


def violations(modules: Mapping[str, tuple[str, bool]]) -> list[str]:
    """Every import against the layering of ``modules`` (name → (source, is package)), one line each."""
    known = set(modules)
    graph = {name: imports_of(name, source, package, known) for name, (source, package) in modules.items()}
    found = [f"{name}: in no layer of tests/test_layers.py" for name in graph if layer_of(name) is None]
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            if target.split(".")[0] in OUTSIDE:
                found.append(f"{name} imports {target}: the library imports no {target.split('.')[0]}")
                continue
            if any(name.startswith(a) and target.startswith(b) for a, b in APART):
                found.append(f"{name} imports {target}: the theory and the plots stay apart")
            rank, target_rank = layer_of(name), layer_of(target)
            if rank is not None and target_rank is not None and target_rank > rank:
                found.append(f"{name} imports {target}, a layer above it")
    found += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return found


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle through each module that starts one (depth-first search)."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            found.append(path[path.index(node) :] + [node])
            return
        if node in done or node not in graph:
            return
        for target in sorted(graph[node]):
            visit(target, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return found


def test_the_library_imports_run_one_way():
    assert violations(library_modules()) == []


def planted(name: str, line: str) -> list[str]:
    """The violations after adding the import ``line`` to module ``name``."""
    modules = library_modules()
    source, package = modules[name]
    return violations({**modules, name: (f"{source}\n{line}\n", package)})


@pytest.mark.parametrize(
    ("name", "line", "expected"),
    [
        (
            "attnscope.store",
            "from attnscope import models",
            "attnscope.store imports attnscope.models, a layer above",
        ),
        (
            "attnscope.architecture",
            "import attnscope.spectra",
            "attnscope.architecture imports attnscope.spectra",
        ),
        ("attnscope.theory.figures", "from attnscope import plots", "the theory and the plots stay apart"),
        ("attnscope.plots.theory", "from attnscope.theory import rmt", "the theory and the plots stay apart"),
        (
            "attnscope.claims.records",
            "from .registry import CLAIMS",
            "claims.records imports attnscope.claims.registry",
        ),
        ("attnscope.spectra", "import scripts.weight_spectra", "the library imports no scripts"),
        ("attnscope.capture", "from attnscope import attention", "import cycle: attnscope.attention -> "),
    ],
)
def test_an_import_against_the_layering_is_found(name, line, expected):
    """The check can fail: a planted import inside a function counts as much as one at the top."""
    indented = f"def _planted():\n    {line}"
    assert any(expected in v for v in planted(name, indented)), planted(name, indented)


def test_a_new_module_needs_a_layer():
    modules = {**library_modules(), "attnscope.newthing": ("import attnscope.store\n", False)}
    assert "attnscope.newthing: in no layer of tests/test_layers.py" in violations(modules)
