import numpy as np
import pandas as pd
import pytest

from attnscope import prompts, store


def test_experiment_attrs_are_the_prompt_tables_one_value_per_column():
    fmt = prompts.THESIS_FORMAT.to_json()
    table = pd.DataFrame(
        {"category": ["Food"] * 2, "k": np.array([3, 3]), "seed": [7, 7], "prompt_format": [fmt] * 2}
    )
    attrs = store.experiment_attrs(table)
    assert attrs == {"category": "Food", "k": 3, "seed": 7, "prompt_format": fmt}
    assert type(attrs["k"]) is int  # JSON-ready, not numpy
    assert prompts.PromptFormat.from_json(attrs["prompt_format"]) == prompts.THESIS_FORMAT
    with pytest.raises(ValueError, match="column 'k': 2 values"):
        store.experiment_attrs(table.assign(k=[2, 3]))


def test_segments_are_defined_once():
    assert prompts.SEGMENTS is store.SEGMENTS
    assert set(store.WORD_SEGMENTS) < set(store.SEGMENTS)
