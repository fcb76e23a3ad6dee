"""config/examples/families.yaml: the whole DAG on tiny random Qwen2, Phi-3, GPT-2 and GPT-NeoX models
side by side, to the claims across models (docs/own-data.md, "Your own model")."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.helpers import example_config, snakemake, write_config

pytestmark = pytest.mark.integration

MODELS = ["tiny-qwen2", "tiny-phi3", "tiny-gpt2", "tiny-pythia"]


def test_the_families_example_runs_to_the_claims_across_models(tmp_path):
    config = example_config("families")
    assert config["model"] == MODELS
    write_config(tmp_path, config)
    snakemake(tmp_path, "--replace-workflow-config", "--configfile", str(tmp_path / "config.yaml"))
    results = tmp_path / "results"
    assert set(pd.read_parquet(results / "claims_across_models.parquet")["model"]) == set(MODELS)
    for model in MODELS:
        table = pd.read_parquet(results / "spectra" / model / "trained.parquet")
        matrices = {"q", "k", "v", "o", "up", "down"} | ({"gate"} if model in MODELS[:2] else set())
        assert set(table["matrix"]) == matrices and set(table["form"]) == {"raw", "folded"}
    for model in ("tiny-gpt2", "tiny-pythia"):  # base models: the plain few-shot format
        text = pd.read_parquet(results / "prompts" / model / "animals-k2.parquet")["text"].iloc[0]
        assert "<|im_end|>" not in text and text.endswith("\nClue:")
