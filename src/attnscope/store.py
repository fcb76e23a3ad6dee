"""The attention store: its layout, names and the one reader every consumer uses (torch-free).

A store is a Zarr v3 group per model × variant × experiment. The root's attributes describe
the run (model, variant, ``num_layers``, ``num_heads``, ``kv_head``, ``metrics``, ``choices``,
``choice_metrics``, ``prompts``: one entry per prompt with its ``group``, ``prompt_id`` and
``target``); each prompt is a child
group (``"000"``, ...) whose arrays carry the named dimensions of :data:`DIMENSIONS` and whose
attributes label every token with a segment of :data:`SEGMENTS`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr
    import zarr

# Token segments. ``template`` is everything the chat template and the prompt format
# add (role markers, special tokens, a default system turn, "Word:" labels, "#").
TEMPLATE = "template"
INSTRUCTION_SEGMENT = "instruction"
SHOT_WORD = "shot_word"
SHOT_CLUE = "shot_clue"
TARGET = "target"
GENERATED = "generated"
SEGMENTS = (TEMPLATE, INSTRUCTION_SEGMENT, SHOT_WORD, SHOT_CLUE, TARGET, GENERATED)
# The segments made of words: word-level maps, plotted tokens and the value domain use these.
WORD_SEGMENTS = (SHOT_WORD, SHOT_CLUE, TARGET, GENERATED)

STORE_VERSION = 9
"""The layout version a store records at its root (``store_version``); readers refuse others."""

# The ``head`` (metrics tables) / ``map`` (stores) index of the head-mean map.
HEAD_MEAN = -1

WEIGHTS, VALUE_WEIGHTED = "weights", "value-weighted"
WEIGHTINGS = (WEIGHTS, VALUE_WEIGHTED)
"""What a map holds: the attention weights, or the value-weighted maps (the ``value_*`` arrays)."""


def weighted_array(name: str, weighting: str) -> str:
    """The array of a prompt group that holds ``name`` (``head_mean``, ``metrics``, ...) under
    ``weighting``."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"unknown weighting {weighting!r}; expected one of {', '.join(WEIGHTINGS)}")
    return name if weighting == WEIGHTS else f"value_{name}"


# The arrays of a prompt group and their named dimensions.
DIMENSIONS = {
    "attn": ("layer", "head", "query", "key"),
    "head_mean": ("layer", "query", "key"),
    "word_attn_sum": ("layer", "query_word", "key_word"),
    "word_attn_mean_query": ("layer", "query_word", "key_word"),
    "thesis_word_attn_sum": ("layer", "query_thesis_word", "key_thesis_word"),
    "cosine": ("query", "key"),
    "metrics": ("layer", "map", "metric"),
    "singular_values": ("layer", "map", "singular_value"),
    "choices": ("layer", "choice", "choice_metric"),
    "value_attn": ("layer", "head", "query", "key"),
    "value_head_mean": ("layer", "query", "key"),
    "value_word_attn_sum": ("layer", "query_word", "key_word"),
    "value_metrics": ("layer", "map", "metric"),
    "value_choices": ("layer", "choice", "choice_metric"),
}


def word_membership_matrix(token_word: Sequence[int], words: Sequence[int]) -> np.ndarray:
    """The [token, word] 0/1 float32 matrix of which tokens make up each of ``words`` (word indices
    of ``token_word``): the pooling of a token map into a word map."""
    return (np.asarray(token_word)[:, None] == np.asarray(words)[None, :]).astype(np.float32)


def pool_words(values: Any, membership: Any) -> Any:
    """A map [query, key] pooled to [query_word, key_word] by a membership matrix [token, word]
    (:func:`word_membership_matrix`): summed over the subword pairs of two words
    (``word_attn_sum``), ``membership.T @ values @ membership`` in the operands' own library and
    precision (numpy arrays, or torch tensors in the capture)."""
    return membership.T @ values @ membership


def query_word_means(summed: Any, membership: Any) -> Any:
    """A pooled map [query_word, key_word] (:func:`pool_words`) averaged over each query word's
    subwords (``word_attn_mean_query``: a row is the mean distribution of the word's tokens; a word
    without tokens gets zeros), in the library of the operands, numpy or torch."""
    counts = membership.sum(0)
    means = summed / counts.clip(min=1)[:, None]
    means[counts == 0] = 0.0
    return means


def open_store(path: str | os.PathLike) -> zarr.Group:
    """The store at ``path``, read-only: missing data raises (:class:`attnscope.chunks.StrictStore`)."""
    import zarr

    from attnscope.chunks import strict_store

    return zarr.open_group(strict_store(path), mode="r")


def prompt_groups(root: zarr.Group) -> list[zarr.Group]:
    """The prompt groups of an open store, in the order of its ``prompts`` attribute."""
    return [root[entry["group"]] for entry in root.attrs["prompts"]]


def _prompt_dataset(ds: xr.Dataset, root: Mapping[str, Any]) -> xr.Dataset:
    attrs = ds.attrs
    n, words = attrs["n_tokens"], attrs["map_words"]
    word_text = [attrs["words"][w] for w in words]
    word_segment = [attrs["word_segment"][w] for w in words]
    word_shot = [attrs["word_shot"][w] for w in words]
    coords: dict[str, Any] = {
        "layer": np.arange(root["num_layers"]),
        "head": np.arange(root["num_heads"]),
        "kv_head": ("head", np.asarray(root["kv_head"])),
        "map": np.append(np.arange(root["num_heads"]), HEAD_MEAN),
        "metric": list(root["metrics"]),
        "choice": list(root["choices"]),
        "choice_metric": list(root["choice_metrics"]),
    }
    for side in ("query", "key"):
        coords[side] = np.arange(n)
        coords[f"{side}_token"] = (side, list(attrs["tokens"]))
        coords[f"{side}_segment"] = (side, list(attrs["token_segment"]))
        coords[f"{side}_shot"] = (side, np.asarray(attrs["token_shot"]))
        coords[f"{side}_token_word"] = (side, np.asarray(attrs["token_word"]))
        coords[f"{side}_word"] = np.asarray(words, dtype=np.int64)
        coords[f"{side}_word_text"] = (f"{side}_word", word_text)
        coords[f"{side}_word_segment"] = (f"{side}_word", word_segment)
        coords[f"{side}_word_shot"] = (f"{side}_word", np.asarray(word_shot, dtype=np.int64))
        coords[f"{side}_thesis_word"] = np.arange(len(attrs["thesis_words"]))
        coords[f"{side}_thesis_word_text"] = (f"{side}_thesis_word", list(attrs["thesis_words"]))
        coords[f"{side}_thesis_word_segment"] = (f"{side}_thesis_word", list(attrs["thesis_word_segment"]))
        coords[f"{side}_thesis_word_shot"] = (
            f"{side}_thesis_word",
            np.asarray(attrs["thesis_word_shot"], dtype=np.int64),
        )
    return ds.assign_coords(coords)


def open_attention(path: str | os.PathLike) -> xr.DataTree:
    """Open a store lazily as an ``xarray.DataTree``: one child per prompt group (``"000"``, ...).

    Each child's Dataset has ``attn`` (prompts that keep heads), ``head_mean``,
    ``word_attn_sum``, ``word_attn_mean_query``, ``thesis_word_attn_sum``, ``cosine``,
    ``metrics``, ``singular_values`` and ``choices``, and the value-weighted ``value_attn``,
    ``value_head_mean``, ``value_word_attn_sum``, ``value_metrics``, ``value_choices``, with
    named dimensions (layer, head, query, key, query_word, key_word, query_thesis_word,
    key_thesis_word, map, metric, singular_value, choice, choice_metric) and token coordinates
    (``query_token``, ``query_segment``, ``query_shot``, ``query_token_word``, the same for ``key``;
    ``query_word_text``, ``query_thesis_word_text`` etc. for the words). Arrays are read from
    disk only when indexed or loaded. The root's attributes are the store's: model,
    variant, config digest, ``kv_head``, and ``prompts`` (group, prompt_id, target).
    """
    import xarray as xr

    from attnscope.chunks import strict_store

    tree = xr.open_datatree(strict_store(path), engine="zarr", chunks=None, consolidated=False, zarr_format=3)
    root = dict(tree.attrs)
    nodes = {"/": xr.Dataset(attrs=root)}
    for entry in root["prompts"]:
        nodes[entry["group"]] = _prompt_dataset(tree[entry["group"]].to_dataset(), root)
    return xr.DataTree.from_dict(nodes)


EXPERIMENT_ATTRS = ("category", "k", "seed", "prompt_format")
"""The experiment settings a store records at its root (prompt-table columns of one value each;
``prompt_format`` as :meth:`attnscope.prompts.PromptFormat.to_json` wrote it), so figure titles
and resource sizing read them from the store instead of the config."""


def experiment_attrs(prompt_table: pd.DataFrame) -> dict[str, Any]:
    """:data:`EXPERIMENT_ATTRS` of a prompt table, as JSON-ready root attributes."""
    attrs: dict[str, Any] = {}
    for column in EXPERIMENT_ATTRS:
        values = prompt_table[column].unique()
        if len(values) != 1:
            raise ValueError(f"prompt table column {column!r}: {len(values)} values, expected one per store")
        attrs[column] = values[0].item() if isinstance(values[0], np.generic) else values[0]
    return attrs
