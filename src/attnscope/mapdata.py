"""One prompt's maps from an attention store, read for the figures.

A thin reader of the store's file contract (``attnscope.attention``: one Zarr group per
prompt with ``head_mean``, ``word_attn_sum``, ``cosine``, ``metrics`` and the token/word
labels as attributes) that reads only the layers a figure draws and needs neither torch nor
transformers: a figure job starts in about a second instead of ten.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.mapview import MapAxis, thesis_word_axis, token_axis, word_axis
from attnscope.store import open_store

if TYPE_CHECKING:
    import zarr


@dataclass
class PromptMaps:
    """The drawn parts of one prompt's maps: token maps over the plotted tokens, word maps,
    the embedding cosine and the head-mean metrics per layer."""

    target: str
    clue: str | None
    num_layers: int
    token_index: np.ndarray
    tokens: MapAxis
    words: MapAxis
    thesis_words: MapAxis
    group: Any
    metric_names: list[str]

    def plotted(self, token_map: np.ndarray) -> np.ndarray:
        """A map [query, key] over all the prompt's tokens cut to the plotted tokens (rows, then
        columns: the values ``np.ix_`` gives, faster on float16 maps)."""
        return token_map[self.token_index][:, self.token_index]

    def token_maps(self, layers: list[int]) -> np.ndarray:
        """Head-mean maps [len(layers), t, t] over the plotted tokens."""
        return np.stack([self.plotted(self.group["head_mean"][layer]) for layer in layers])

    def word_maps(self, layers: list[int]) -> np.ndarray:
        """Word-level maps [len(layers), w, w], summed over subword pairs (``word_attn_sum``)."""
        return np.stack([self.group["word_attn_sum"][layer] for layer in layers])

    def thesis_word_maps(self, layers: list[int]) -> np.ndarray:
        """The thesis's word-level maps [len(layers), w, w] (``thesis_word_attn_sum``: its notebook's
        words, prompt tokens only)."""
        return np.stack([self.group["thesis_word_attn_sum"][layer] for layer in layers])

    def cosine(self) -> np.ndarray:
        """Input-embedding cosine [t, t] over the plotted tokens."""
        return self.plotted(np.asarray(self.group["cosine"][...]))

    def correlations(self, layers: list[int]) -> dict[int, tuple[float, float]]:
        """{layer: (Pearson, Spearman)} of the head-mean map with the cosine (the last map)."""
        values = self.group["metrics"][...][:, -1]
        pearson, spearman = (self.metric_names.index(m) for m in ("cosine_pearson", "cosine_spearman"))
        return {layer: (float(values[layer, pearson]), float(values[layer, spearman])) for layer in layers}


def read_prompt_maps(path: str | os.PathLike, target: str) -> PromptMaps:
    """The prompt of ``target`` (case-insensitive) in the store at ``path``."""
    return prompt_maps(open_store(path), target, path)


def prompt_maps(root: zarr.Group, target: str, path: str | os.PathLike) -> PromptMaps:
    """The prompt of ``target`` (case-insensitive) in the open store ``root`` (at ``path``, for the
    error): its arrays are read through the store ``root`` was opened on."""
    groups = {entry["target"].casefold(): entry["group"] for entry in root.attrs["prompts"]}
    if target.casefold() not in groups:
        raise KeyError(f"{path}: no prompt for target {target!r} (targets: {', '.join(groups)})")
    group = root[groups[target.casefold()]]
    attrs = group.attrs
    labels = [attrs[key] for key in ("tokens", "token_segment", "token_shot", "token_word")]
    keep, tokens = token_axis(*labels)
    map_words = attrs["map_words"]
    words = word_axis(
        [attrs["words"][w] for w in map_words],
        [attrs["word_segment"][w] for w in map_words],
        [attrs["word_shot"][w] for w in map_words],
    )
    return PromptMaps(
        target=attrs["target"],
        clue=attrs.get("clue"),
        num_layers=int(root.attrs["num_layers"]),
        token_index=keep,
        tokens=tokens,
        words=words,
        thesis_words=thesis_word_axis(
            attrs["thesis_words"], attrs["thesis_word_segment"], attrs["thesis_word_shot"]
        ),
        group=group,
        metric_names=list(root.attrs["metrics"]),
    )
