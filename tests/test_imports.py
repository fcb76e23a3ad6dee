"""Modules that must start fast import no heavy library they do not use, checked in a fresh
interpreter (this test process has imported everything already)."""

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("matplotlib", "torch", "transformers")
REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
MODEL_CLASSES = "transformers.modeling_utils"
"""Where ``PreTrainedModel`` lives: what loading a tokenizer does not need."""


def imported_after(module: str) -> frozenset[str]:
    """The modules loaded by importing ``module``."""
    return loaded_by(f"import {module}")


@functools.cache
def loaded_by(statements: str) -> frozenset[str]:
    """The modules loaded by running the import ``statements`` in a fresh interpreter (once per
    test process: the checks that the checks can fail share their interpreters)."""
    code = f"{statements}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return frozenset(json.loads(out))


def capture_imports() -> frozenset[str]:
    """What the extraction script loads (torch, the model classes): the import the checks' own
    checks use, shared with its script test (one interpreter for all of them)."""
    return loaded_by(script_imports("extract_attention.py"))


def script_imports(name: str) -> str:
    """The top-level import statements of ``scripts/{name}`` (what the rule's job loads before
    its first line of work)."""
    tree = ast.parse((SCRIPTS / name).read_text())
    return "\n".join(ast.unparse(node) for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom))


LIGHT_MODULES = (
    "attnscope.mapdata",
    "attnscope.metrics",
    "attnscope.mapview",
    "attnscope.explorer.server",
    "attnscope.claims",
    "attnscope.comparison",
    "attnscope.paths",
    "attnscope.resources",
    "attnscope.rollout",
    "attnscope.headtypes",
    "attnscope.spectrastore",
)


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_no_heavy_imports(module):
    """The figures' data reader and the explorer's server draw nothing with matplotlib (the
    explorer imports it only when it builds its colour tables); they, the claims and the
    learned-vs-random comparison (tables in, tables out) run no model, nor does the rollout (stored
    maps in) or the head-type scores until a model is run (torch is imported there), nor the
    singular-value store's reader, nor the metrics' names and tables (the claims read them; their
    torch computation is attnscope.streamed); the Snakefile's imports (the results paths, the resource
    requests) start every snakemake command."""
    unwanted = {*HEAVY, "attnscope.plots"}
    # One interpreter imports them all: what none of them loads, each does not; a module's own
    # interpreter only where the union holds something unwanted, to name the module.
    if loaded_by("\n".join(f"import {name}" for name in LIGHT_MODULES)) & unwanted:
        loaded = imported_after(module)
        assert not loaded & unwanted, f"{module} imports {sorted(loaded & unwanted)}"


TOKENIZER_SIDE = {MODEL_CLASSES, "attnscope.models"}
"""What building prompts, converting SmolLM2's tokenizer and reading a prepared model do not load."""
SCRIPTS_UNUSED = {
    "figures_spectra.py": {"torch", "transformers", "attnscope.spectra", "attnscope.models"},
    "build_prompts.py": TOKENIZER_SIDE,
    "smollm2_tokenizer.py": TOKENIZER_SIDE,
    "extract_attention.py": {"sacrebleu"},
}


def tokenizer_side_imports() -> frozenset[str]:
    """What the scripts and the reader of :data:`TOKENIZER_SIDE` load together, in one interpreter:
    what none of them loads, each does not (a member's own interpreter only names the culprit)."""
    scripts = [script_imports(s) for s, unused in SCRIPTS_UNUSED.items() if unused is TOKENIZER_SIDE]
    return loaded_by("\n".join([*scripts, "import attnscope.prepared"]))


@pytest.mark.parametrize(("script", "unused"), SCRIPTS_UNUSED.items())
def test_scripts_load_only_what_they_use(script, unused):
    """The spectra figures read stored singular values and tables (no torch); building prompts
    and converting SmolLM2's tokenizer from its GGUF need a tokenizer, not the model classes that
    loading a model imports; the extraction runs generation's shared prefill, not its clue scores
    (chrF)."""
    if unused is TOKENIZER_SIDE and not tokenizer_side_imports() & unused:
        return
    loaded = loaded_by(script_imports(script))
    assert not loaded & unused, f"scripts/{script} imports {sorted(loaded & unused)}"


def test_prepared_model_reader_loads_no_model_classes():
    """The manifest and tokenizer of a prepared model come without the model classes."""
    if tokenizer_side_imports() & TOKENIZER_SIDE:
        loaded = imported_after("attnscope.prepared")
        assert MODEL_CLASSES not in loaded and "attnscope.models" not in loaded
    assert MODEL_CLASSES in capture_imports()  # the check can fail


def snakefile_imports() -> str:
    """The attnscope imports of the Snakefile and its rule files (what every snakemake command,
    and every job on a cluster, loads while it parses the workflow)."""
    sources = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
    lines = (line for path in sources for line in path.read_text().splitlines())
    return "\n".join(line for line in lines if line.startswith("from attnscope"))


def test_the_workflow_parses_without_scipy_or_a_model_library():
    """Parsing the workflow plans the knockouts and reads configs and manifests; the statistics
    (scipy.stats: 0.6 s to import) and the model libraries load in the jobs that use them."""
    statements = snakefile_imports()
    assert "import variants" in statements and "import config" in statements
    loaded = loaded_by(statements)
    assert not loaded & {"scipy", *HEAVY}, f"the Snakefile imports {sorted(loaded & {'scipy', *HEAVY})}"
    assert "scipy" in imported_after("attnscope.effects")  # the check can fail


def test_the_store_reader_of_the_package_loads_no_model_library():
    """``attnscope.open_attention`` reads a Zarr store: it comes from the store module, without the
    capture code (torch, transformers) that writes one."""
    loaded = loaded_by("import attnscope\nattnscope.open_attention")
    assert "attnscope.store" in loaded, "the check must reach the reader"
    assert not loaded & set(HEAVY), f"attnscope.open_attention imports {sorted(loaded & set(HEAVY))}"
    assert "torch" in capture_imports()  # the check can fail


def test_check_sees_a_heavy_import():
    """The check above can fail: a plotting module does load matplotlib."""
    assert "matplotlib" in imported_after("attnscope.plots.maps")


def imported_test_files(path: Path) -> list[str]:
    """The ``tests.test_*`` modules a file imports (at any depth, ``from tests import test_x`` too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("tests.test_")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("tests.test_"):
                found.append(node.module)
            elif node.module == "tests":
                found += [f"tests.{a.name}" for a in node.names if a.name.startswith("test_")]
    return found


def test_no_test_file_imports_another(tmp_path):
    """Shared builders live in tests/helpers.py, shared fixtures in tests/conftest.py: a test file
    that imports another runs (and collects) that file's tests' module too."""
    leaning = {p.name: imported_test_files(p) for p in sorted((REPO / "tests").glob("test_*.py"))}
    assert {name: found for name, found in leaning.items() if found} == {}
    leaner = tmp_path / "test_leaner.py"  # the check can fail
    leaner.write_text("from tests import test_io\n\n\ndef f():\n    from tests.test_data import x\n")
    assert imported_test_files(leaner) == ["tests.test_io", "tests.test_data"]
