"""Shared fixtures: tiny random models with real tokenizers, the sample clues, stores of them
that several test files read, and the embedded SmolLM2 prepared once per session (integration
tests only)."""

from __future__ import annotations

import copy
import gc
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def read_yaml(path: Path) -> Any:
    """A YAML file of this checkout, read by libyaml's safe loader as the workflow reads its config
    (``attnscope.configfile.FAST_LOADER``, C; the unit tier builds the test config dozens of times)."""
    from attnscope.configfile import FAST_LOADER

    return yaml.load(path.read_text(), Loader=FAST_LOADER)


def snakemake_command(workdir: Path, *args: str) -> list[str]:
    """This checkout's workflow run by Snakemake in ``workdir`` (a subprocess command)."""
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]


@pytest.fixture(scope="session", autouse=True)
def torch_threads() -> Iterator[None]:
    """Two torch threads at most, and as many for numpy's BLAS, split among pytest-xdist's workers
    (threads beyond the cores spin-wait: two workers' two-thread SVDs burned several times their
    CPU). A fixture, not an import: pytest-xdist's controller, which runs no test, loads this file
    too, and the model libraries take seconds to import."""
    import torch
    from threadpoolctl import threadpool_limits

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    threads = max(1, min(2, os.cpu_count() or 1) // workers)
    torch.set_num_threads(threads)
    with threadpool_limits(threads, "blas"):
        yield


def pytest_collection_finish(session: pytest.Session) -> None:
    """The modules and objects collection loaded live as long as the run: gc.freeze moves them out
    of the collector's sight, so its full collections walk only what the tests make."""
    gc.freeze()


def workflow_config() -> dict:
    """config.yaml with the test models of tests/configs/tiny-models.yaml and the data paths
    made absolute, so that a run in any working directory finds this checkout's files."""
    config = read_yaml(REPO / "config.yaml")
    config["models"].update(read_yaml(REPO / "tests" / "configs" / "tiny-models.yaml")["models"])
    for entry in config["data"]["clue_files"]:
        entry["path"] = str(REPO / entry["path"])
    config["data"]["targets"] = {c: str(REPO / p) for c, p in config["data"]["targets"].items()}
    return config


def tiny_spec(architecture: str = "mistral", tokenizer: str = "mistral-v1", **overrides) -> dict:
    """A tiny random model spec as the schema fills it (GQA: 4 query heads, 2 KV heads)."""
    spec = {
        "source": "tiny-random",
        "architecture": architecture,
        "tokenizer": tokenizer,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_layers": 2,
        "num_heads": 4,
        "num_kv_heads": 2,
        "max_position_embeddings": 4096,
        "sliding_window": None,
        "initializer_range": 0.02,
        "seed": 0,
    }
    spec.update(overrides)
    return spec


@pytest.fixture(scope="session")
def tiny_mistral(tmp_path_factory):
    """(model, tokenizer): a tiny random Mistral with the real Mistral v1 tokenizer."""
    from attnscope import models

    return models.build_tiny_random(tiny_spec(), tmp_path_factory.mktemp("tok-mistral"))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """(model, tokenizer): a tiny random Llama with SmolLM2's tokenizer and ChatML template."""
    from attnscope import models

    return models.build_tiny_random(
        tiny_spec("llama", "smollm2", hidden_size=96, num_heads=6), tmp_path_factory.mktemp("tok-llama")
    )


def tiny_gemma_spec() -> dict:
    """The tiny random Gemma 3 of tests/configs/tiny-models.yaml as the schema fills it: QK-norm,
    (1 + γ) norms, one KV head, a sliding-window layer (window 4) before a global one."""
    return tiny_spec("gemma3", "smollm2", num_kv_heads=1, sliding_window=4)


@pytest.fixture(scope="session")
def tiny_gemma(tmp_path_factory):
    """(model, tokenizer): a tiny random Gemma 3 with SmolLM2's tokenizer."""
    from attnscope import models

    return models.build_tiny_random(tiny_gemma_spec(), tmp_path_factory.mktemp("tok-gemma"))


@pytest.fixture(scope="session")
def prepared_tiny_mistral(tmp_path_factory) -> Path:
    """A prepared model directory (weights cache + manifest) of the tiny Mistral."""
    from attnscope import models

    out = tmp_path_factory.mktemp("models") / "tiny-mistral"
    models.prepare_model("tiny-mistral", tiny_spec(), out)
    return out


@pytest.fixture(scope="session")
def tiny_default_run(tmp_path_factory) -> Path:
    """A finished run of the default target on the tests' tiny config (tests.helpers.tiny_config),
    once per session. Tests read it, or dry-run changed configs and put the config back."""
    from tests.helpers import snakemake, tiny_config

    workdir = tmp_path_factory.mktemp("tiny-run")
    snakemake(workdir, config=tiny_config())
    return workdir


@pytest.fixture(scope="session")
def tiny_cold_run(tmp_path_factory) -> Path:
    """A second cold run of the tests' tiny config, of tests.helpers.STAGE_TARGETS (a table or
    store of every stage), once per session, in its own working directory. Tests read it."""
    from tests.helpers import STAGE_TARGETS, snakemake, tiny_config

    workdir = tmp_path_factory.mktemp("tiny-cold-run")
    snakemake(workdir, *STAGE_TARGETS, config=tiny_config())
    return workdir


@pytest.fixture(scope="session")
def tiny_variants_run(tiny_default_run, tmp_path_factory) -> Path:
    """The tiny run extended to tests.helpers.variants_config (the named `report` target too) with
    Snakemake's HTML report, once per session: a copy of tiny_default_run (mtimes kept), so only
    the new variants' jobs, the attention-map figures and what combines them run. Tests read it,
    or dry-run changed configs and put the config back."""
    from tests.helpers import REPORT_AFTER_RUN, snakemake, variants_config

    workdir = tmp_path_factory.mktemp("variants-run") / "run"
    shutil.copytree(tiny_default_run, workdir, symlinks=True)
    snakemake(workdir, "all", "report", *REPORT_AFTER_RUN, config=variants_config())
    return workdir


EMBEDDED_PREPARED = "results/models/smollm2"
"""Where a run puts the prepared embedded SmolLM2 (``embedded_model_run``)."""


@pytest.fixture(scope="session")
def embedded_model_run(tmp_path_factory) -> Path:
    """A run of the workflow's prepare_model rule on the embedded SmolLM2 (its GGUF dequantized,
    about 30 s, once per session); tests copy its results/models into their own runs."""
    from attnscope import models
    from tests.helpers import snakemake, tiny_config

    workdir = tmp_path_factory.mktemp("embedded-run")
    snakemake(workdir, f"{EMBEDDED_PREPARED}/{models.MANIFEST}", config=tiny_config("smollm2"))
    return workdir


@pytest.fixture(scope="session")
def embedded_model_dir(embedded_model_run) -> Path:
    """The embedded SmolLM2 as the prepare_model rule wrote it."""
    return embedded_model_run / EMBEDDED_PREPARED


def embedded_spec() -> dict:
    """The embedded SmolLM2's spec as config.yaml gives it (init std included)."""
    return read_yaml(REPO / "config.yaml")["models"]["smollm2"]


@pytest.fixture(scope="session")
def sample_clues():
    """The clues table of the sample data, as the default config imports it."""
    from attnscope import data

    entries = read_yaml(REPO / "config.yaml")["data"]["clue_files"]
    clues, _ = data.import_clues([{**e, "path": str(REPO / e["path"])} for e in entries])
    return clues


@pytest.fixture(scope="module")
def llama_store(tiny_llama, sample_clues, tmp_path_factory):
    """The tiny Llama (SmolLM2 tokenizer) on two prompts with a clue appended; heads kept for Ant,
    with their singular values (``attention.head_spectra``)."""
    from tests.helpers import clue_table, extract, prompt_table

    model, tokenizer = tiny_llama
    table = prompt_table(tokenizer, sample_clues)
    path = tmp_path_factory.mktemp("llama") / "animals-k3.zarr"
    extract(
        model, tokenizer, table, path, clue_table(table, tokenizer), keep_heads=["ant"], head_spectra=True
    )
    return path, table


@pytest.fixture(scope="module")
def results(tiny_mistral, sample_clues, tmp_path_factory) -> Path:
    """The explorer's results folder: the tiny Mistral's stores of two variants (different clues
    appended; tests.helpers.store_path finds them)."""
    from attnscope import attention, variants
    from tests.helpers import CLUES, EXPERIMENT, MODEL, clue_table, prompt_table

    model, tokenizer = tiny_mistral
    table = prompt_table(tokenizer, sample_clues, targets=("Ant", "Bee", "Fox"))
    out = tmp_path_factory.mktemp("explorer-results")
    for name, clue in CLUES.items():
        edited = copy.deepcopy(model)
        variants.apply_edit(edited, variants.parse(name))
        inputs = attention.prompt_inputs(table, tokenizer, clue_table(table, tokenizer, clue), ["ant", "fox"])
        path = out / "attention" / MODEL / name / f"{EXPERIMENT}.zarr"
        attention.extract(edited, inputs, path, {"config_digest": name}, progress=False)
    return out
