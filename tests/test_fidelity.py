"""The thesis preset (config/examples/thesis.yaml) on the embedded model: the thesis's word
maps, rows and values, as its notebook computes them."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch
import zarr

from attnscope import models, prompts
from tests.helpers import example_config, snakemake, write_config

pytestmark = pytest.mark.integration


def test_thesis_preset_word_maps_are_the_notebooks(tmp_path, embedded_model_dir):
    config = example_config("thesis")
    config["experiments"]["animals-k3"]["n_targets"] = 2
    config["figures"]["maps"][0]["targets"] = ["Ant"]
    (tmp_path / "results" / "models").mkdir(parents=True)
    shutil.copytree(embedded_model_dir, tmp_path / "results" / "models" / "smollm2")
    write_config(tmp_path, config)
    config_file = str(tmp_path / "config.yaml")
    # The files read below (the prompts with them): trained's store and its map figures.
    run = "smollm2/trained/animals-k3"
    store, figures = f"results/attention/{run}.zarr", f"results/figures/{run}"
    snakemake(tmp_path, store, figures, "--replace-workflow-config", "--configfile", config_file)
    results = tmp_path / "results"
    table = pd.read_parquet(results / "prompts" / "smollm2" / "animals-k3.parquet")
    row = table.iloc[0]
    assert row["target"] == "Ant"
    assert (
        "I will give you a word and you have to output a brief description related of the word" in row["text"]
    )
    # Rows and columns: the notebook's words of every shot and target turn, in order.
    turns = [t for w, c in zip(row["shot_words"], row["shot_clues"]) for t in (f"Word: {w}", f"{c}#")]
    expected = [w for turn in [*turns, "Word: Ant"] for w in prompts.THESIS_WORD_PATTERN.findall(turn)]
    group = zarr.open_group(results / "attention" / "smollm2" / "trained" / "animals-k3.zarr", mode="r")[
        "000"
    ]
    assert group.attrs["thesis_words"] == expected and group.attrs["clue"] is None
    assert group.attrs["n_tokens"] == row["n_tokens"], "the maps are of the prompt only"
    # Values: the notebook's head mean of the model's own attention (float32), summed over
    # each word pair's tokens, equal to the stored maps to float16 rounding.
    loaded = models.load_model(results / "models" / "smollm2")
    with torch.inference_mode():
        out = loaded.model(input_ids=torch.tensor([list(row["input_ids"])]), output_attentions=True)
    members = [np.flatnonzero(np.asarray(row["thesis_token_word"]) == i) for i in range(len(expected))]
    stored = group["thesis_word_attn_sum"][...]
    for layer, attention in enumerate(out.attentions):
        head_mean = attention[0].mean(dim=0).numpy()
        reference = np.array([[head_mean[np.ix_(q, k)].sum() for k in members] for q in members])
        np.testing.assert_allclose(stored[layer], reference, rtol=2**-9, atol=2**-12)
    figure = results / "figures" / "smollm2" / "trained" / "animals-k3" / "Ant" / "thesis_grid.png"
    assert figure.is_file()
