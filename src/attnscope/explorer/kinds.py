"""The explorer's map kinds and levels: which arrays of a prompt group each kind and level reads
(the names from :mod:`attnscope.store`), and the word memberships a level pools a token map with."""

from __future__ import annotations

from typing import Any

import numpy as np

from attnscope.store import DIMENSIONS, VALUE_WEIGHTED, WEIGHTS, weighted_array, word_membership_matrix

LEVELS = ("token", "word", "word_mean", "thesis_word", "cosine")
"""Map levels: tokens (``attn``/``head_mean``), words summed over subword pairs (``word_attn_sum``),
words averaged over the query word's tokens (``word_attn_mean_query``), the thesis's words
(``thesis_word_attn_sum``), and the input-embedding cosine."""
KINDS = ("weights", "value", "rollout", "value_rollout")
"""Map kinds: the attention weights; the value-weighted maps (α_ij·‖W_O,h W_V,h x_j‖ summed over
the heads, rows normalised); the attention rollout with the residual of either's head means."""
KIND_NAMES = {
    "weights": "attention weights",
    "value": "value-weighted maps",
    "rollout": "attention rollout",
    "value_rollout": "value-weighted rollout",
}
KIND_WEIGHTINGS = {
    "weights": WEIGHTS,
    "value": VALUE_WEIGHTED,
    "rollout": WEIGHTS,
    "value_rollout": VALUE_WEIGHTED,
}
"""The weighting of the maps each kind shows (:data:`attnscope.store.WEIGHTINGS`)."""
ROLLOUT_MAPS = {
    kind: weighted_array("head_mean", KIND_WEIGHTINGS[kind]) for kind in ("rollout", "value_rollout")
}
"""The rollout kinds and the head-mean maps each rolls out."""
STORED_KINDS = ("weights", "value")
"""The kinds whose maps the stores hold."""
TOKEN_ARRAYS = {
    kind: (weighted_array("head_mean", KIND_WEIGHTINGS[kind]), weighted_array("attn", KIND_WEIGHTINGS[kind]))
    for kind in STORED_KINDS
}
"""The stored token maps of a kind: (head mean [layer, query, key], heads [layer, head, query, key])."""
HEAD_ARRAYS = frozenset(heads for _, heads in TOKEN_ARRAYS.values())
"""The per-head arrays: only the prompts in ``keep_heads`` have them."""
WORD_LEVEL_ARRAYS = {
    "word": "word_attn_sum",
    "word_mean": "word_attn_mean_query",
    "thesis_word": "thesis_word_attn_sum",
}
"""The word levels and the arrays of the weights that hold them."""
WORD_ARRAYS = {
    kind: {
        level: weighted_array(name, KIND_WEIGHTINGS[kind])
        for level, name in WORD_LEVEL_ARRAYS.items()
        if weighted_array(name, KIND_WEIGHTINGS[kind]) in DIMENSIONS
    }
    for kind in STORED_KINDS
}
"""The stored word maps of each kind (the rollouts: none); its other word levels are its token map
pooled (:func:`attnscope.store.pool_words`)."""
METRIC_ARRAYS = {kind: weighted_array("metrics", KIND_WEIGHTINGS[kind]) for kind in STORED_KINDS}
"""The per-layer metrics [layer, map, metric] of each kind that stores them (not the rollout)."""
VALUE_ARRAYS = (TOKEN_ARRAYS["value"][0], WORD_ARRAYS["value"]["word"], METRIC_ARRAYS["value"])
"""The value-weighted arrays of every prompt group of a store that has the kind (and ``value_attn``
in the prompts that keep heads)."""


def word_membership(attrs: dict[str, Any], level: str) -> np.ndarray:
    """The [token, word] 0/1 matrix (float64) of a word level's words from a prompt group's
    attributes: the map words (``map_words``) or the thesis's words, as the capture pools them."""
    if level == "thesis_word":
        token_word, words = attrs["thesis_token_word"], range(len(attrs["thesis_words"]))
    else:
        token_word, words = attrs["token_word"], attrs["map_words"]
    return word_membership_matrix(token_word, words).astype(np.float64)
