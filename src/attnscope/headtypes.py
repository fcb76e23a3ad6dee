"""Head types: previous-token, duplicate-token and induction scores per layer × head, measured
on a seeded probe of repeated random tokens.

The probe (Olsson et al. 2022, "In-context Learning and Induction Heads", sec. 2: "repeated
random tokens"; the convention of TransformerLens's tutorials): ``count`` sequences, each the
tokenizer's BOS token where it has one, then ``length`` token ids drawn without replacement
(no token repeats within a copy) from the vocabulary minus the special and added tokens, then
the same ``length`` ids again. ``numpy.random.default_rng(seed)`` draws them: same seed, same probe.

A score is the mean, over the query rows that have a *target key*, of the row's attention on
its target keys; the targets follow TransformerLens's head detector
(``transformer_lens.head_detector``: ``get_previous_token_head_detection_pattern``,
``get_duplicate_token_head_detection_pattern``, ``get_induction_head_detection_pattern``):

- ``previous_token``: key i − 1 of every query i ≥ 1 (i ≥ 2 after BOS, below);
- ``duplicate_token``: the keys j < i holding query i's token (its earlier occurrence);
- ``induction``: the keys j ≤ i whose preceding token j − 1 is query i's token (the token after
  its earlier occurrence: Olsson et al.'s prefix matching).

No score has a target on the BOS key (TransformerLens's ``exclude_bos``): the mass a head parks
on the first token (an attention sink) is no previous-token attention of query 1, so query 1,
whose only target would be BOS, leaves the previous-token score's mean. TransformerLens zeroes the
BOS column and divides by the rest of the mass; here each row keeps its own mass as denominator,
so a score stays the share of a row's attention on its targets. On the probe BOS never repeats, so
the duplicate-token and induction targets never include it: the rule changes only previous-token.

The probe's scores are their means over the probes. On the probe (BOS at 0, the copies at
1..L and L+1..2L) duplicate_token is the mean of a[i, i − L] and induction the mean of
a[i, i − L + 1] over the second copy's queries, the diagonal scores of the tutorials. A head's
type (:func:`head_types`) is its highest score if that reaches the threshold, else ``none``: a
label the readers of the scores apply (the head table, the figure), so a new threshold reruns no
probe. Keys a sliding-window layer hides cannot be attended: such a layer scores what it can see.

Torch is imported only by the functions that run a model, so the figures and the scores of
stored maps import this module in a figure job's time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SCORES = ("previous_token", "duplicate_token", "induction")
"""The head-type scores, the columns of the table and the panels of its figure."""
NO_TYPE = "none"
"""The type of a head whose every score is below the threshold."""
COLUMNS = ("layer", "head", "kv_head", *SCORES)
"""The columns of the head-types table, in order."""


def probe_vocabulary(tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> np.ndarray:
    """The token ids a probe draws from: ids below ``vocab_size`` (the model's embedding rows)
    that the tokenizer knows, minus its special and added tokens."""
    excluded = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    ids = np.arange(min(vocab_size, len(tokenizer)))
    return ids[~np.isin(ids, sorted(excluded))]


def probe_ids(vocabulary: np.ndarray, length: int, count: int, seed: int, bos: int | None) -> np.ndarray:
    """``count`` probes [probe, position]: ``bos`` (if not None), then ``length`` distinct ids of
    ``vocabulary``, then the same ids again."""
    if length > len(vocabulary):
        raise ValueError(
            f"heads.probe_length: {length} distinct tokens per copy, the vocabulary has {len(vocabulary)}"
        )
    rng = np.random.default_rng(seed)
    copies = np.stack([rng.choice(vocabulary, size=length, replace=False) for _ in range(count)])
    probes = np.concatenate([copies, copies], axis=1)
    if bos is None:
        return probes
    return np.concatenate([np.full((count, 1), bos, dtype=probes.dtype), probes], axis=1)


def previous_token_pattern(n: int) -> np.ndarray:
    """Target keys [query, key] of the previous-token score: key i − 1 of query i."""
    return np.eye(n, k=-1, dtype=bool)


def duplicate_token_pattern(ids: Sequence[int]) -> np.ndarray:
    """Target keys [query, key] of the duplicate-token score: earlier keys with the query's token."""
    ids = np.asarray(ids)
    return (ids[:, None] == ids[None, :]) & np.tri(len(ids), k=-1, dtype=bool)


def induction_pattern(ids: Sequence[int]) -> np.ndarray:
    """Target keys [query, key] of the induction score: keys j ≤ i after an earlier occurrence
    (key j − 1) of query i's token."""
    duplicate = duplicate_token_pattern(ids)
    shifted = np.zeros_like(duplicate)
    shifted[:, 1:] = duplicate[:, :-1]
    return shifted & np.tri(len(duplicate), dtype=bool)


def patterns(ids: Sequence[int], bos: bool) -> np.ndarray:
    """The target keys of every score of :data:`SCORES` for the token ids of a probe [score, query, key];
    with ``bos`` (the first token is the tokenizer's BOS) no target is key 0."""
    targets = np.stack(
        [previous_token_pattern(len(ids)), duplicate_token_pattern(ids), induction_pattern(ids)]
    )
    if bos:
        targets[..., 0] = False
    return targets


def pattern_score(maps: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """The mean over the queries with a target key of the attention on the target keys: ``maps``
    [..., query, key], ``pattern`` [query, key] (bool) → [...]."""
    rows = pattern.any(axis=-1)
    if not rows.any():
        raise ValueError("no query has a target key: a probe of repeated tokens has some for every score")
    on_target = (maps * pattern).sum(axis=-1)
    return on_target[..., rows].mean(axis=-1)


def probe_scores(model: PreTrainedModel, probes: np.ndarray, bos: bool) -> np.ndarray:
    """Every probe's scores [probe, score, layer, head], each layer's per-head maps captured in one
    forward pass per probe (:func:`attnscope.capture.capture`, the eager kernel's probabilities);
    ``bos``: the probes start with BOS (:func:`patterns`)."""
    import torch

    from attnscope import architecture, capture

    num_layers = model.config.num_hidden_layers
    num_heads = architecture.attention_shape(model.config)[0]
    out = np.empty((len(probes), len(SCORES), num_layers, num_heads))
    device = next(model.parameters()).device
    for i, ids in enumerate(probes):
        targets = patterns(ids, bos)

        def score(layer: int, weights: torch.Tensor, i: int = i, targets: np.ndarray = targets) -> None:
            maps = weights.float().cpu().numpy()
            for s, pattern in enumerate(targets):
                out[i, s, layer] = pattern_score(maps, pattern)

        with torch.inference_mode(), capture.capture(model, score):
            model.base_model(input_ids=torch.as_tensor(ids[None], device=device))
    return out


def head_types_table(scores: np.ndarray, kv_head: Sequence[int]) -> pd.DataFrame:
    """One row per layer × head (:data:`COLUMNS`) from the probe means of ``scores``
    [probe, score, layer, head]; ``kv_head``: each query head's KV head."""
    mean = scores.mean(axis=0)
    num_layers, num_heads = mean.shape[1:]
    layer, head = np.indices((num_layers, num_heads)).reshape(2, -1)
    table = pd.DataFrame({"layer": layer, "head": head, "kv_head": np.asarray(kv_head)[head]})
    for i, name in enumerate(SCORES):
        table[name] = mean[i].ravel()
    return table[list(COLUMNS)]


def head_types(scores: pd.DataFrame, threshold: float) -> np.ndarray:
    """Each row's head type: the name of its highest score of :data:`SCORES` (columns of
    ``scores``) if that reaches ``threshold``, else :data:`NO_TYPE`."""
    values = scores[list(SCORES)].to_numpy()
    top = values.argmax(axis=1)
    typed = values[np.arange(len(values)), top] >= threshold
    return np.where(typed, np.asarray(SCORES)[top], NO_TYPE)


def measure_head_types(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    length: int,
    count: int,
    seed: int,
) -> pd.DataFrame:
    """The head-types table of ``model`` on its probe (:func:`probe_ids` with the tokenizer's BOS)."""
    from attnscope import architecture

    vocabulary = probe_vocabulary(tokenizer, model.get_input_embeddings().num_embeddings)
    probes = probe_ids(vocabulary, length, count, seed, tokenizer.bos_token_id)
    num_heads, num_kv_heads, _ = architecture.attention_shape(model.config)
    kv_head = architecture.kv_head_index(num_heads, num_kv_heads).tolist()
    return head_types_table(probe_scores(model, probes, tokenizer.bos_token_id is not None), kv_head)
