"""Information flow across layers: attention rollout with the residual (Abnar & Zuidema 2020,
"Quantifying Attention Flow in Transformers", eq. 1), from the head-mean maps of an attention store.

Each layer's head-mean map A_l [query, key] is mixed with the residual stream's identity,
Ã_l = ½A_l + ½I, and its rows are renormalised to sum to 1 (a stored float16 row sums to 1 only
to float16 rounding); the rollout through layers 0..l is the product R_l = Ã_l Ã_{l−1} ⋯ Ã_0.
Row i of R_l says how much of position i's state after layer l traces back to each input token.

The rollout is computed at token level and pooled afterwards: a query unit's row (the target
word, the generated clue) is the mean of its tokens' rows, and a source's share is the sum of
its key tokens' columns, so every pooled row still sums to 1. The sources are the first token
(``sink``, the attention sink; it is left out of its own segment), then each token segment of
:data:`attnscope.store.SEGMENTS`, the shot words and shot clues one per shot.

The same rollout runs on the value-weighted head-mean maps (``value_head_mean``: each key's
weight times the norm of what its value writes, rows as shares), the table's ``weighting`` column
saying which.

Pure numpy on stored maps (no model, no torch).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from attnscope.store import (
    GENERATED,
    INSTRUCTION_SEGMENT,
    SHOT_CLUE,
    SHOT_WORD,
    TARGET,
    TEMPLATE,
    WEIGHTINGS,
    open_store,
    prompt_groups,
    weighted_array,
)

SINK = "sink"
"""The source of the first token, apart from its segment."""
SOURCES = (SINK, TEMPLATE, INSTRUCTION_SEGMENT, SHOT_WORD, SHOT_CLUE, TARGET, GENERATED)
"""The source kinds of the rollout table, in drawing order."""
PER_SHOT = frozenset({SHOT_WORD, SHOT_CLUE})
"""The sources counted per shot (``shot`` 1..k); the others have ``shot`` 0."""
QUERIES = (TARGET, GENERATED)
"""The query units whose rows the table keeps: the target word and the generated clue."""
COLUMNS = ("prompt_index", "prompt_id", "target", "weighting", "query", "layer", "source", "shot", "share")
"""The columns of the rollout table, in order."""


def source_order(sources: pd.DataFrame) -> list[tuple[str, int]]:
    """The (source, shot) pairs of a rollout table in prompt order: sink, template, instruction,
    then each shot's word and clue, the target and the generated clue."""
    pairs = set(zip(sources["source"], sources["shot"]))
    shots = sorted({shot for kind, shot in pairs if kind in PER_SHOT})
    order = [(kind, 0) for kind in (SINK, TEMPLATE, INSTRUCTION_SEGMENT)]
    order += [(kind, shot) for shot in shots for kind in (SHOT_WORD, SHOT_CLUE)]
    order += [(kind, 0) for kind in (TARGET, GENERATED)]
    return [pair for pair in order if pair in pairs]


def residual_matrices(head_mean: np.ndarray) -> np.ndarray:
    """½A + ½I of every layer's map ``head_mean`` [layer, query, key], rows renormalised, float64."""
    mixed = 0.5 * np.asarray(head_mean, dtype=np.float64)
    np.einsum("lii->li", mixed)[...] += 0.5
    mixed /= mixed.sum(axis=-1, keepdims=True)
    return mixed


def rollout_rows(head_mean: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``queries`` [row, query] times the rollout after every layer: [layer, row, key], entry l
    is ``queries`` Ã_l ⋯ Ã_0 of :func:`residual_matrices` (layer l's matrix next to the queries).

    With ``queries`` the identity this is the full rollout; a few pooled query rows cost
    L²/2 row-times-matrix products instead of L matrix products.
    """
    mixed = residual_matrices(head_mean)
    queries = np.asarray(queries, dtype=np.float64)
    out = np.empty((len(mixed), *queries.shape))
    for layer in range(len(mixed) - 1, -1, -1):  # every depth ≥ layer takes Ã_layer next
        out[layer] = queries
        active = out[layer:].reshape(-1, queries.shape[-1])
        active[...] = active @ mixed[layer]
    return out


def extend_rollout(head_mean: np.ndarray, rollout: np.ndarray | None = None) -> np.ndarray:
    """The rollout [query, key] through the layers of ``head_mean`` [layer, query, key] that follow
    ``rollout`` (the rollout through the layers before them; None: no layer before, the identity):
    Ã_last ⋯ Ã_first · ``rollout`` of :func:`residual_matrices`, float64. Whole matrices, for the
    explorer's maps, which step it a layer at a time."""
    mixed = residual_matrices(head_mean)
    out = np.eye(mixed.shape[-1]) if rollout is None else np.asarray(rollout, dtype=np.float64)
    for matrix in mixed:
        out = matrix @ out
    return out


def token_sources(token_segment: Sequence[str], token_shot: Sequence[int]) -> list[tuple[str, int]]:
    """Each token's source (kind, shot): the first token is the sink, shot words and shot clues
    keep their shot, the rest their segment with shot 0."""
    sources = [(s, int(shot) if s in PER_SHOT else 0) for s, shot in zip(token_segment, token_shot)]
    if sources:
        sources[0] = (SINK, 0)
    return sources


def source_membership(sources: Sequence[tuple[str, int]]) -> tuple[list[tuple[str, int]], np.ndarray]:
    """The sources present (in :data:`SOURCES` order, shots ascending) and the 0/1 matrix
    [token, source] that sums a row's key tokens into them."""
    order = sorted(set(sources), key=lambda s: (SOURCES.index(s[0]), s[1]))
    index = {source: i for i, source in enumerate(order)}
    membership = np.zeros((len(sources), len(order)))
    membership[np.arange(len(sources)), [index[s] for s in sources]] = 1.0
    return order, membership


def prompt_rollout(
    head_mean: np.ndarray, token_segment: Sequence[str], token_shot: Sequence[int]
) -> pd.DataFrame:
    """One prompt's shares (columns query, layer, source, shot, share) of every query unit of
    :data:`QUERIES` it has, after every layer."""
    segment = np.asarray(token_segment)
    queries = [query for query in QUERIES if (segment == query).any()]
    rows = np.stack([(segment == query) / (segment == query).sum() for query in queries])
    order, membership = source_membership(token_sources(token_segment, token_shot))
    shares = rollout_rows(head_mean, rows) @ membership  # [layer, query unit, source]
    layer, query, source = np.indices(shares.shape).reshape(3, -1)
    return pd.DataFrame(
        {
            "query": np.asarray(queries)[query],
            "layer": layer,
            "source": [order[s][0] for s in source],
            "shot": [order[s][1] for s in source],
            "share": shares.ravel(),
        }
    )


def rollout_table(path: str | os.PathLike, weightings: Sequence[str] = WEIGHTINGS) -> pd.DataFrame:
    """The rollout table of the attention store at ``path``: one row per prompt × weighting
    (:data:`attnscope.store.WEIGHTINGS`) × query unit × layer × source (:data:`COLUMNS`);
    ``layer`` l holds the rollout through layers 0..l."""
    frames = []
    with threadpool_limits(limits=1, user_api="blas"):  # a few rows times one map: threads only wait
        for group in prompt_groups(open_store(path)):
            attrs = group.attrs
            missing = [key for key in ("token_segment", "token_shot", *COLUMNS[:3]) if key not in attrs]
            if missing:
                raise KeyError(
                    f"{path}/{group.basename}: attributes {missing} missing; rerun its extract_attention job"
                )
            for weighting in weightings:
                maps = group[weighted_array("head_mean", weighting)][...]
                frame = prompt_rollout(maps, attrs["token_segment"], attrs["token_shot"])
                frames.append(frame.assign(weighting=weighting, **{key: attrs[key] for key in COLUMNS[:3]}))
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)]
