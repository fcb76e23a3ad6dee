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


@functools.cache
def loaded_in_turn(*stages: str) -> tuple[frozenset[str], ...]:
    """The modules loaded after each of the import ``stages``, run in turn in one fresh interpreter:
    what is not loaded after a stage, neither it nor a stage before it loads (one interpreter for
    several checks; a stage's own interpreter only where one before it may be the one loading)."""
    snapshots = "".join(f"{stage}\nloaded.append(sorted(sys.modules))\n" for stage in stages)
    code = f"import json, sys\nloaded = []\n{snapshots}print(json.dumps(loaded))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return tuple(frozenset(names) for names in json.loads(out))


def unwanted_loaded(chain: tuple[str, ...], stage: int, unwanted: set[str]) -> frozenset[str]:
    """What of ``unwanted`` the ``stage`` of ``chain`` loads: nothing if the chain has loaded none
    of it by then, else what the stage's own interpreter loads."""
    if not loaded_in_turn(*chain)[stage] & unwanted:
        return frozenset()
    return loaded_by(chain[stage]) & unwanted


def loads(chain: tuple[str, ...], stage: int, module: str) -> bool:
    """Whether the ``stage`` of ``chain`` loads ``module`` (the checks' own checks): loaded by it
    in the chain, or, where a stage before it loaded the module already, in its own interpreter."""
    before = loaded_in_turn(*chain)[stage - 1] if stage else frozenset()
    if module not in before:
        return module in loaded_in_turn(*chain)[stage]
    return module in loaded_by(chain[stage])


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


TOKENIZER_SIDE = {MODEL_CLASSES, "attnscope.models"}
"""What building prompts, converting SmolLM2's tokenizer and reading a prepared model do not load."""
SCRIPTS_UNUSED = {
    "figures_spectra.py": {"torch", "transformers", "attnscope.spectra", "attnscope.models"},
    "build_prompts.py": TOKENIZER_SIDE,
    "smollm2_tokenizer.py": TOKENIZER_SIDE,
    "extract_attention.py": {"sacrebleu"},
}


def snakefile_imports() -> str:
    """The attnscope imports of the Snakefile and its rule files (what every snakemake command,
    and every job on a cluster, loads while it parses the workflow)."""
    sources = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
    lines = (line for path in sources for line in path.read_text().splitlines())
    return "\n".join(line for line in lines if line.startswith("from attnscope"))


def tokenizer_side() -> str:
    """The scripts of :data:`TOKENIZER_SIDE` and the prepared model's reader, imported together."""
    scripts = [script_imports(s) for s, unused in SCRIPTS_UNUSED.items() if unused is TOKENIZER_SIDE]
    return "\n".join([*scripts, "import attnscope.prepared"])


LIGHT_CHAIN = (
    "\n".join(f"import {name}" for name in LIGHT_MODULES),
    "import attnscope.plots.maps",
    script_imports("figures_spectra.py"),
)
"""The light modules, then a plotting module (matplotlib), then the spectra figures' script."""
MODEL_CHAIN = (
    snakefile_imports(),
    "import attnscope.effects",  # scipy.stats
    tokenizer_side(),
    script_imports("extract_attention.py"),
)
"""The workflow's parse, then the statistics, the tokenizer side, the extraction: each loads what
the ones before it do not want."""
SCRIPT_STAGES = {
    "figures_spectra.py": (LIGHT_CHAIN, 2),
    "build_prompts.py": (MODEL_CHAIN, 2),
    "smollm2_tokenizer.py": (MODEL_CHAIN, 2),
    "extract_attention.py": (MODEL_CHAIN, 3),
}


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
    if unwanted_loaded(LIGHT_CHAIN, 0, unwanted):
        loaded = imported_after(module)
        assert not loaded & unwanted, f"{module} imports {sorted(loaded & unwanted)}"


@pytest.mark.parametrize(("script", "unused"), SCRIPTS_UNUSED.items())
def test_scripts_load_only_what_they_use(script, unused):
    """The spectra figures read stored singular values and tables (no torch); building prompts
    and converting SmolLM2's tokenizer from its GGUF need a tokenizer, not the model classes that
    loading a model imports; the extraction runs generation's shared prefill, not its clue scores
    (chrF)."""
    chain, stage = SCRIPT_STAGES[script]
    if unwanted_loaded(chain, stage, unused):  # a script's own interpreter names the culprit
        loaded = loaded_by(script_imports(script))
        assert not loaded & unused, f"scripts/{script} imports {sorted(loaded & unused)}"


def test_prepared_model_reader_loads_no_model_classes():
    """The manifest and tokenizer of a prepared model come without the model classes."""
    if unwanted_loaded(MODEL_CHAIN, 2, TOKENIZER_SIDE):
        loaded = imported_after("attnscope.prepared")
        assert MODEL_CLASSES not in loaded and "attnscope.models" not in loaded
    assert loads(MODEL_CHAIN, 3, MODEL_CLASSES)  # the check can fail: the extraction loads them


def test_the_workflow_parses_without_scipy_or_a_model_library():
    """Parsing the workflow plans the knockouts and reads configs and manifests; the statistics
    (scipy.stats: 0.6 s to import) and the model libraries load in the jobs that use them."""
    statements = MODEL_CHAIN[0]
    assert "import variants" in statements and "import config" in statements
    loaded = unwanted_loaded(MODEL_CHAIN, 0, {"scipy", *HEAVY})
    assert not loaded, f"the Snakefile imports {sorted(loaded)}"
    assert loads(MODEL_CHAIN, 1, "scipy")  # the check can fail


def test_the_store_reader_of_the_package_loads_no_model_library():
    """``attnscope.open_attention`` reads a Zarr store: it comes from the store module, without the
    capture code (torch, transformers) that writes one."""
    loaded = loaded_by("import attnscope\nattnscope.open_attention")
    assert "attnscope.store" in loaded, "the check must reach the reader"
    assert not loaded & set(HEAVY), f"attnscope.open_attention imports {sorted(loaded & set(HEAVY))}"
    assert loads(MODEL_CHAIN, 2, "torch")  # the check can fail: a tokenizer's transformers load torch


def test_check_sees_a_heavy_import():
    """The check above can fail: a plotting module does load matplotlib."""
    assert loads(LIGHT_CHAIN, 1, "matplotlib")


def test_a_chain_names_what_a_stage_loads_where_one_before_it_loaded_it_too():
    """A stage's check is its own: a module a stage before it loaded is looked up in the stage's own
    interpreter, both ways (fractions loads decimal, csv does not; nothing here loads tomllib)."""
    chain = ("import fractions", "import fractions\nimport csv")
    assert loads(chain, 1, "decimal") and not loads(chain, 1, "tomllib")
    assert unwanted_loaded(chain, 1, {"decimal", "tomllib"}) == {"decimal"}
    assert not unwanted_loaded(("import csv", *chain), 0, {"decimal"})
    assert unwanted_loaded(("import csv", *chain), 1, {"decimal"}) == {"decimal"}


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
